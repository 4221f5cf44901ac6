"""The batched decode step of a Manager (batch_append, batch_commit, batch_export): one C call per step for
every running sequence. A mixin of kvblock.Manager, kept in its own file: its calls write out the close()
guard's protocol (kvblock/_guard.py) and check their arguments in place, the decode step's hot path."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from . import _lib
from ._convert import U32_MAX, TokenLike, as_int64_array, int64_ptr, scalar, u32
from ._guard import GuardedHandle, inline_call
from .batch_buffers import Batch, BatchBuffers
from .errors import KvbArgumentError, KvbClosedError, check
from .seq_ids import SeqIds

if TYPE_CHECKING:
    from typing import Callable

ffi = _lib.ffi
_BUFFER_TOO_SMALL = _lib.lib.KVB_ERR_BUFFER_TOO_SMALL
SeqIdsLike = Union[SeqIds, TokenLike]


class BatchCalls:
    """batch_append / batch_commit / batch_export of kvblock.Manager (which sets these attributes)."""
    _guard: Optional[GuardedHandle]
    _lib: Any
    _run: "Callable[..., None]"
    _call: "Callable[..., int]"

    @inline_call  # close() from a signal handler inside it must not wait for it (kvblock/_guard.py)
    def batch_append(self, seq_ids: SeqIdsLike, tokens: TokenLike) -> None:
        """Appends tokens[i] to sequence seq_ids[i] for every i, all-or-nothing (kvb_batch_append): the same as
        append(seq_ids[i], [tokens[i]]) in order, refusals included. Forked siblings sharing a partial last
        block copy it in turn (k of its h holders appending make min(k, h - 1) copies: drain_copies), no
        watermark applies, and a sliding window releases nothing here: batch_commit releases."""
        if type(seq_ids) is SeqIds:  # converted and checked once, when it was built
            ids, n = seq_ids._c, seq_ids._n
        else:
            ids, n = int64_ptr(seq_ids, "seq_ids")
        toks, nt = int64_ptr(tokens, "tokens")
        if n != nt:
            raise KvbArgumentError(f"seq_ids has {n} entries but tokens has {nt}")
        # The guard's protocol (kvblock/_guard.py, GuardedHandle.run) written out in the three batch calls:
        # its frame and argument tuples are a tenth of the step's cost over the bare C calls.
        g: GuardedHandle = self._guard  # type: ignore[assignment]
        busy = g._busy
        busy.append(None)
        try:
            h = g._ptr
            if h is None:
                raise KvbClosedError(g.name)
            status = self._lib.kvb_batch_append(h, ids, toks, n)
        finally:
            del busy[-1]
            if g._ptr is None:
                g._settle()
        if status:
            check(status)

    @inline_call
    def batch_commit(self, seq_ids: SeqIdsLike, num_tokens: Optional[TokenLike] = None) -> None:
        """Commits num_tokens[i] tokens of seq_ids[i] (None: every uncomputed token), all-or-nothing; this is
        where a windowed sequence gives back the blocks that fell wholly outside its window (-1 in its table)."""
        if type(seq_ids) is SeqIds:
            ids, n = seq_ids._c, seq_ids._n
        else:
            ids, n = int64_ptr(seq_ids, "seq_ids")
        if num_tokens is None:  # the decode step's commit: the guard written out, as in batch_append
            g: GuardedHandle = self._guard  # type: ignore[assignment]
            busy = g._busy
            busy.append(None)
            try:
                h = g._ptr
                if h is None:
                    raise KvbClosedError(g.name)
                status = self._lib.kvb_batch_commit(h, ids, ffi.NULL, n)
            finally:
                del busy[-1]
                if g._ptr is None:
                    g._settle()
            if status:
                check(status)
            return
        counts = as_int64_array(num_tokens, "num_tokens")
        if counts.shape[0] != n:
            raise KvbArgumentError(f"seq_ids has {n} entries but num_tokens has {counts.shape[0]}")
        if counts.size and int(counts.min()) < 0:
            raise KvbArgumentError(f"num_tokens: {int(counts.min())} is negative")
        counts = np.ascontiguousarray(counts, dtype=np.uint64)
        self._run(self._lib.kvb_batch_commit, ids, ffi.from_buffer("size_t[]", counts), n)

    @inline_call
    def batch_export(self, seq_ids: SeqIdsLike, buffers: Optional[BatchBuffers] = None, group: int = 0,
                     prefix_groups: bool = False, min_shared_blocks: int = 2) -> Batch:
        """Kernel inputs for the sequences (kvb_batch_export) of KV cache group `group`, written into
        `buffers` (grown if too small; a fresh one if None). Returns views into the buffers. With
        prefix_groups=True the result also carries .prefix_groups (a kvblock.PrefixGroups: the sequences
        that share leading blocks, for the kernels' prefix_groups argument)."""
        if prefix_groups:
            return self._batch_export_grouped(seq_ids, buffers, group, min_shared_blocks)
        if type(seq_ids) is SeqIds:
            ids, n = seq_ids._c, seq_ids._n
        else:
            ids, n = int64_ptr(seq_ids, "seq_ids")
        if buffers is None:
            buffers = BatchBuffers(n, 1, 1)
        elif type(buffers) is not BatchBuffers and not isinstance(buffers, BatchBuffers):
            raise KvbArgumentError(f"buffers must be a kvblock.BatchBuffers or None, got {type(buffers).__name__}")
        elif buffers._pg is not None:
            buffers.c.prefix_groups = ffi.NULL  # a previous grouped export set it
            buffers._pg = None
        if n > buffers._rows:
            rows, cols, slots = buffers.capacity
            buffers._alloc(max(n, 2 * rows), cols, slots)
        if type(group) is not int or group != buffers._group:  # the struct is written only when it changes
            group = u32(group, "group")
            buffers.c.group = buffers._group = group
        b = buffers.c
        # the guard written out, as in batch_append
        g: GuardedHandle = self._guard  # type: ignore[assignment]
        busy = g._busy
        busy.append(None)
        try:
            h = g._ptr
            if h is None:
                raise KvbClosedError(g.name)
            status = self._lib.kvb_batch_export(h, ids, n, b)
        finally:
            del busy[-1]
            if g._ptr is None:
                g._settle()
        if status:
            if status != _BUFFER_TOO_SMALL:
                check(status)
            rows, cols, slots = buffers.capacity
            buffers._alloc(rows, max(cols, b.max_blocks_needed + b.max_blocks_needed // 4),
                           max(slots, b.num_slots + b.num_slots // 4))
            b = buffers.c
            b.group = buffers._group = group
            check(self._call(self._lib.kvb_batch_export, ids, n, b))
        k, need = b.num_slots, b.max_blocks_needed
        last = buffers._last
        if last[0] == n and last[1] == k and last[2] == need:
            return last[3]  # the same shape as the last export: its Batch, whose views see the new values
        return buffers._batch_for(n, k, need)

    def _batch_export_grouped(self, seq_ids: SeqIdsLike, buffers: Optional[BatchBuffers], group: int,
                              min_shared_blocks: int) -> Batch:
        from .prefix_groups import GroupedBatch, PrefixGroups
        n = len(seq_ids) if hasattr(seq_ids, "__len__") else 0
        if buffers is None:
            buffers = BatchBuffers(max(n, 1), 1, 1)
        min_shared_blocks = scalar(min_shared_blocks, "min_shared_blocks", 0, U32_MAX, "uint32_t")
        pg = getattr(buffers, "_pg", None)
        if pg is None or pg.capacity < n:
            pg = PrefixGroups(max(n, buffers._rows), min_shared_blocks)
        pg.c.min_shared_blocks = min_shared_blocks
        buffers._pg = None  # the plain path below must leave buffers.c.prefix_groups as set here
        try:
            for _ in range(2):  # a BatchBuffers that grew has a new struct: export again with the groups
                c_before = buffers.c
                c_before.prefix_groups = pg.c
                batch = self.batch_export(seq_ids, buffers, group)
                if buffers.c is c_before:
                    break
        finally:
            buffers._pg = pg
            buffers.c.prefix_groups = pg.c
        out = GroupedBatch(*batch)
        out.prefix_groups = pg
        return out
