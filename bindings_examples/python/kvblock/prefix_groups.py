"""Prefix groups of a batch (kvb_prefix_groups): which sequences of a step share their leading blocks.

    batch = m.batch_export(ids, bufs, prefix_groups=True)   # batch.prefix_groups: a PrefixGroups
    paged_attention(cache, layer, q, batch.block_tables, batch.seq_lens, out, prefix_groups=batch.prefix_groups)

The kernels then read each group's shared blocks once for all its members, where their cost model expects
that to be faster than the plain kernel (policy AUTO; always=True runs every group). The rules (full
computed blocks only, -1 ends the sharing, min_shared_blocks, the cost model) are kvblock.h's, at
kvb_prefix_groups."""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

from . import _lib
from ._lib import ffi
from .manager import Batch


class PrefixGroups:
    """Caller buffers of kvb_prefix_groups for batches of up to max_seqs sequences (always enough: a group
    has >= 2 members), and the cffi struct the export fills and the kernels read. Valid until the next
    export into the same BatchBuffers."""

    def __init__(self, max_seqs: int, min_shared_blocks: int = 2, always: bool = False) -> None:
        cap = max(1, int(max_seqs))
        self.group_start_all = np.zeros(cap + 1, np.int32)
        self.members_all = np.zeros(cap, np.int32)
        self.shared_blocks_all = np.zeros(cap, np.int32)
        c = ffi.new("kvb_prefix_groups*")
        _lib.lib.kvb_prefix_groups_init(c)
        c.min_shared_blocks = int(min_shared_blocks)
        c.policy = _lib.lib.KVB_PREFIX_GROUPS_ALWAYS if always else _lib.lib.KVB_PREFIX_GROUPS_AUTO
        c.group_capacity = c.member_capacity = cap
        c.group_start = ffi.from_buffer("int32_t[]", self.group_start_all)
        c.members = ffi.from_buffer("int32_t[]", self.members_all)
        c.shared_blocks = ffi.from_buffer("int32_t[]", self.shared_blocks_all)
        self._keep = (c.group_start, c.members, c.shared_blocks)
        self.c = c
        self.capacity = cap

    @property
    def num_groups(self) -> int:
        return int(self.c.num_groups)

    @property
    def group_start(self) -> np.ndarray:
        return self.group_start_all[: self.num_groups + 1]

    @property
    def members(self) -> np.ndarray:
        return self.members_all[: int(self.c.num_members)]

    @property
    def shared_blocks(self) -> np.ndarray:
        return self.shared_blocks_all[: self.num_groups]

    def groups(self) -> List[Tuple[np.ndarray, int]]:
        """[(member rows, shared blocks)] per group."""
        gs = self.group_start
        return [(self.members_all[gs[g]:gs[g + 1]].copy(), int(self.shared_blocks_all[g]))
                for g in range(self.num_groups)]


class GroupedBatch(Batch):
    """A Batch (the same six fields) that also carries its prefix groups (attribute prefix_groups)."""
    prefix_groups: PrefixGroups


def restrict_rows(pg: "PrefixGroups | None", lo: int, hi: int) -> "PrefixGroups | None":
    """The groups of `pg` seen by a kernel call over batch rows [lo, hi) only (the engine's decode rows,
    then its prompt-chunk rows, run as two calls): members outside the range dropped, the rest renumbered
    from 0, groups left with fewer than 2 members dropped. None when no group remains (the plain kernel).
    Returns pg itself when every group already lies in [0, hi)."""
    if pg is None or pg.num_groups == 0:
        return None
    members = pg.members
    if lo == 0 and (len(members) == 0 or int(members.max()) < hi):
        return pg
    out = PrefixGroups(max(1, hi - lo), int(pg.c.min_shared_blocks))
    out.c.policy = pg.c.policy
    ng = nm = 0
    gs = pg.group_start
    for g in range(pg.num_groups):
        m = members[gs[g]:gs[g + 1]]
        m = m[(m >= lo) & (m < hi)]
        if len(m) < 2:
            continue
        out.members_all[nm:nm + len(m)] = m - lo
        out.shared_blocks_all[ng] = pg.shared_blocks_all[g]
        nm += len(m)
        ng += 1
        out.group_start_all[ng] = nm
    if ng == 0:
        return None
    out.c.num_groups, out.c.num_members = ng, nm
    return out
