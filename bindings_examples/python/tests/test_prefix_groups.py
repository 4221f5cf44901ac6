"""batch_export(..., prefix_groups=True) and the kernels' prefix_groups argument: a forked family and an
unrelated sequence, the groups the export describes (kvblock.h's worked example), and the decode and
prefill kernels with the description equal to the plain calls."""
import numpy as np

import kvblock

BS, KVH, QH, D = 16, 2, 4, 64


def family(m):
    """Rows 0 and 2 forked from one 70-token prompt (4 full blocks shared, copy-on-write of the partial
    block on the first append); row 1 an unrelated 20-token prompt."""
    m.allocate(10, range(70))
    m.commit(10, 70)
    m.fork(10, 12)
    m.allocate(11, range(500, 520))
    m.commit(11, 20)
    m.batch_append([10, 11, 12], [1, 2, 3])
    return [10, 11, 12]


def test_export_describes_the_worked_example():
    with kvblock.Manager(num_blocks=32, block_size=BS) as m:
        ids = family(m)
        plain = m.batch_export(ids)
        assert not hasattr(plain, "prefix_groups")
        bufs = kvblock.BatchBuffers(3, 8)
        batch = m.batch_export(ids, bufs, prefix_groups=True)
        assert isinstance(batch, kvblock.Batch)
        tables, lens = batch.block_tables, batch.seq_lens
        assert list(lens) == [71, 21, 71]
        pg = batch.prefix_groups
        assert pg.num_groups == 1
        [(members, shared)] = pg.groups()
        assert list(members) == [0, 2] and shared == 4
        assert (tables[0, :4] == tables[2, :4]).all() and tables[0, 4] != tables[2, 4]
        # A minimum above the shared prefix: no group. A plain export afterwards leaves no groups set.
        assert m.batch_export(ids, bufs, prefix_groups=True, min_shared_blocks=5).prefix_groups.num_groups == 0
        m.batch_export(ids, bufs)
        assert bufs.c.prefix_groups == kvblock.ffi.NULL


def test_kernels_with_groups_equal_plain():
    rng = np.random.default_rng(3)
    with kvblock.Manager(num_blocks=32, block_size=BS) as m:
        ids = family(m)
        batch = m.batch_export(ids, prefix_groups=True)
        cache = kvblock.KVCache(1, 32, BS, KVH, D, "float32")
        cache.k[0][...] = rng.standard_normal(cache.k[0].shape).astype(np.float32)
        cache.v[0][...] = rng.standard_normal(cache.v[0].shape).astype(np.float32)
        q = rng.standard_normal((3, QH, D)).astype(np.float32)
        qp = rng.standard_normal((15, QH, D)).astype(np.float32)
        # AUTO (the default: this group is too small to pay, so the plain kernel runs) and ALWAYS (the
        # shared-prefix kernel runs it).
        for policy in (kvblock._lib.lib.KVB_PREFIX_GROUPS_AUTO, kvblock._lib.lib.KVB_PREFIX_GROUPS_ALWAYS):
            batch.prefix_groups.c.policy = policy
            out_plain, out_groups = np.full_like(q, np.nan), np.full_like(q, np.nan)
            kvblock.paged_attention(cache, 0, q, batch.block_tables, batch.seq_lens, out_plain)
            kvblock.paged_attention(cache, 0, q, batch.block_tables, batch.seq_lens, out_groups,
                                    prefix_groups=batch.prefix_groups)
            np.testing.assert_allclose(out_groups, out_plain, rtol=2e-5, atol=2e-5)
            # Prefill rows reaching back into the shared prefix: 5 rows per sequence.
            qs = np.array([0, 5, 10, 15], np.int32)
            op, og = np.full_like(qp, np.nan), np.full_like(qp, np.nan)
            for window, sink in [(0, 0), (24, 4)]:
                kvblock.prefill_attention(cache, 0, qp, qs, batch.seq_lens, batch.block_tables, op, window=window,
                                          sink=sink)
                kvblock.prefill_attention(cache, 0, qp, qs, batch.seq_lens, batch.block_tables, og, window=window,
                                          sink=sink, prefix_groups=batch.prefix_groups)
                np.testing.assert_allclose(og, op, rtol=2e-5, atol=2e-5)


def test_policy_defaults_and_travels():
    """AUTO by default, ALWAYS on request; restrict_rows keeps the policy of the description it cuts."""
    assert kvblock.PrefixGroups(4).c.policy == kvblock._lib.lib.KVB_PREFIX_GROUPS_AUTO
    pg = kvblock.PrefixGroups(4, always=True)
    assert pg.c.policy == kvblock._lib.lib.KVB_PREFIX_GROUPS_ALWAYS
    pg.group_start_all[:2] = [0, 2]
    pg.members_all[:2] = [1, 3]
    pg.shared_blocks_all[0] = 2
    pg.c.num_groups, pg.c.num_members = 1, 2
    cut = kvblock.prefix_groups.restrict_rows(pg, 1, 4)
    assert cut is not pg and list(cut.members) == [0, 2]
    assert cut.c.policy == kvblock._lib.lib.KVB_PREFIX_GROUPS_ALWAYS
