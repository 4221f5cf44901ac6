"""BatchBuffers: the preallocated outputs of batch_export, and Batch: one export's views into them."""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional

import numpy as np

from . import _lib
from ._convert import u32
from ._nocopy import OwnsHandle

if TYPE_CHECKING:
    from .prefix_groups import PrefixGroups

ffi = _lib.ffi


class BatchBuffers(OwnsHandle):
    """Preallocated outputs of kvb_batch_export, reused step after step (no allocation per step).
    Grows (rarely) when a step needs more rows, columns or slots than it has. Not copyable (its kvb_batch
    points into its own arrays)."""
    _what_is_owned = "a kvb_batch whose C pointers point into its own arrays"
    _pg: Optional[PrefixGroups] = None  # the prefix groups of the last grouped export (batch_export)
    _with_mask = False  # tree_mask=True: exports fill tree_mask_all

    def __init__(self, max_seqs: int = 256, max_blocks_per_seq: int = 128, slot_capacity: int = 0, *,
                 tree_mask: bool = False) -> None:
        """Sizes are uint32 (kvb_batch's); 0 rows or columns mean 1, slot_capacity 0 means max_seqs. With
        tree_mask=True every export also fills Batch.tree_mask (kvb_batch.tree_mask: one uint64 word per
        uncomputed row, a pending token tree's ancestor bits, causal bits for other rows up to 64)."""
        seqs, cols = u32(max_seqs, "max_seqs"), u32(max_blocks_per_seq, "max_blocks_per_seq")
        slots = u32(slot_capacity, "slot_capacity")
        self._with_mask = bool(tree_mask)
        self._alloc(max(1, seqs), max(1, cols), max(1, slots or seqs))

    def _alloc(self, seqs: int, cols: int, slots: int) -> None:
        self.block_tables_all = np.full((seqs, cols), -1, np.int32)
        self.seq_lens_all = np.zeros(seqs, np.int32)
        self.query_start_all = np.zeros(seqs + 1, np.int32)
        self.slot_mapping_all = np.full(slots, -1, np.int64)
        b = ffi.new("kvb_batch*")
        _lib.lib.kvb_batch_init(b)
        b.max_blocks_per_seq = cols
        b.block_tables = ffi.from_buffer("int32_t[]", self.block_tables_all)
        b.seq_lens = ffi.from_buffer("int32_t[]", self.seq_lens_all)
        b.query_start = ffi.from_buffer("int32_t[]", self.query_start_all)
        b.slot_mapping = ffi.from_buffer("int64_t[]", self.slot_mapping_all)
        b.slot_capacity = slots
        self.tree_mask_all: Optional[np.ndarray] = None
        if self._with_mask:
            self.tree_mask_all = np.zeros(slots, np.uint64)
            b.tree_mask = ffi.from_buffer("uint64_t[]", self.tree_mask_all)
        self._keep = (b.block_tables, b.seq_lens, b.query_start, b.slot_mapping, b.tree_mask)
        self.c = b
        # Read by every batch_export: plain attributes, cheaper than the cffi struct or the arrays' shapes.
        self._rows, self._group = seqs, 0
        self._last: tuple = (-1, -1, -1, None)  # (n, num_slots, max_blocks_needed, its Batch): the last export's

    def _batch_for(self, n: int, k: int, need: int) -> "Batch":
        """The Batch of an export of n sequences, k slots and `need` blocks, kept for the next export of the
        same shape: a decode step exports the same sequences step after step, and its Batch (four views and
        the tuple) is then the one of the step before, whose views see the new values."""
        # tuple.__new__ skips the NamedTuple's Python-level __new__
        mask = self.tree_mask_all[:k] if self.tree_mask_all is not None else None
        batch = tuple.__new__(Batch, (self.block_tables_all[:n], self.seq_lens_all[:n],
                                      self.query_start_all[: n + 1], self.slot_mapping_all[:k], k, need, mask))
        self._last = (n, k, need, batch)
        return batch

    @property
    def capacity(self) -> tuple:
        return (self.seq_lens_all.shape[0], self.block_tables_all.shape[1], self.slot_mapping_all.shape[0])


class Batch(NamedTuple):
    """Views into BatchBuffers for one step's sequences (valid until the buffers' next export)."""
    block_tables: np.ndarray   # [num_seqs, max_blocks_per_seq] int32, -1 padded
    seq_lens: np.ndarray       # [num_seqs] int32
    query_start: np.ndarray    # [num_seqs + 1] int32
    slot_mapping: np.ndarray   # [num_slots] int64: the cache slot of every uncomputed token
    num_slots: int
    max_blocks_needed: int
    tree_mask: Optional[np.ndarray] = None  # [num_slots] uint64 when the buffers were made with tree_mask=True
