"""Token trees of a Manager (kvblock.h, "Token trees"): append a draft tree, commit its accepted path, drain
the slot copies that compact it. A mixin of kvblock.Manager, kept in its own file.

One speculative step with a tree (see kvblock.h's worked example):
    depths = m.append_tree(seq_id, draft_tokens, parents)   # node i at position committed + i
    batch = m.batch_export([seq_id, ...], BatchBuffers(tree_mask=True))
    ... write K/V at batch.slot_mapping; attend with batch.tree_mask; RoPE position committed + depths[i] ...
    m.commit_tree(seq_id, accepted_path)                     # e.g. [0, 2, 4]
    kernels.copy_slots(cache, m.drain_slot_copies())          # in list order, before the next step
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _lib
from ._convert import I32_MAX, I32_MIN, TokenLike, as_int64_array, i64, int64_ptr
from .errors import KvbArgumentError, check

if TYPE_CHECKING:
    from typing import Callable

ffi = _lib.ffi
MAX_TREE_NODES = int(_lib.lib.KVB_MAX_TREE_NODES)


def _int32_array(x: Any, what: str) -> np.ndarray:
    """x as a contiguous int32 array (parents, path): integers only, each within int32."""
    a = as_int64_array(x, what)
    if a.size and (int(a.min()) < I32_MIN or int(a.max()) > I32_MAX):
        bad = int(a.min()) if int(a.min()) < I32_MIN else int(a.max())
        raise KvbArgumentError(f"{what}: {bad} is outside int32_t")
    return np.ascontiguousarray(a, dtype=np.int32)


class TreeCalls:
    """append_tree / commit_tree / drain_slot_copies of kvblock.Manager (which sets these attributes)."""
    _lib: Any
    _run: "Callable[..., None]"
    _call: "Callable[..., int]"

    def append_tree(self, seq_id: int, tokens: TokenLike, parents: TokenLike) -> np.ndarray:
        """Appends a draft tree after the sequence's committed tokens (kvb_seq_append_tree): parents[i] is -1
        for a root (a child of the last committed token) or an earlier node. Returns the nodes' depths (int32,
        0 for a root): node i's query position is committed + depths[i], its K/V slot position committed + i.
        At most MAX_TREE_NODES nodes; the sequence must have no uncomputed token and no pending tree."""
        sid = i64(seq_id, "seq_id")
        toks, n = int64_ptr(tokens)
        par = _int32_array(parents, "parents")
        if par.shape[0] != n:
            raise KvbArgumentError(f"tokens has {n} entries but parents has {par.shape[0]}")
        depths = np.zeros(n, np.int32)
        self._run(self._lib.kvb_seq_append_tree, sid, toks, ffi.from_buffer("int32_t[]", par), n,
                  ffi.from_buffer("int32_t[]", depths))
        return depths

    def commit_tree(self, seq_id: int, path: TokenLike) -> None:
        """Keeps the accepted root-to-leaf path (node indices; may be empty: the whole tree dropped) and commits
        it (kvb_seq_commit_tree): path[j] moves to position committed + j (slot pairs: drain_slot_copies), the
        other nodes are dropped and only the accepted tokens are hashed."""
        p = _int32_array(path, "path")
        self._run(self._lib.kvb_seq_commit_tree, i64(seq_id, "seq_id"), ffi.from_buffer("int32_t[]", p), p.shape[0])

    def drain_slot_copies(self) -> np.ndarray:
        """Pending compaction pairs [n, 2] int64 (src slot, dst slot) of every committed tree: run them in list
        order (a later pair may overwrite an earlier pair's source) on every layer's K and V, right after the
        commit and before the next forward step."""
        pairs, size = np.empty((16, 2), np.int64), ffi.new("size_t*")
        while True:
            status = self._call(self._lib.kvb_drain_slot_copies, ffi.from_buffer("int64_t[]", pairs),
                                pairs.shape[0], size)
            if status == self._lib.KVB_ERR_BUFFER_TOO_SMALL:
                pairs = np.empty((max(size[0], 2 * pairs.shape[0]), 2), np.int64)
                continue
            check(status)
            return pairs[: size[0]]
