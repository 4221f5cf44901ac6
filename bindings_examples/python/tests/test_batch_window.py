"""The batched decode calls as the header states them since the package landed: batch_append is the
per-sequence append loop, refusals included (no window release on append, no watermark, forked siblings
that share a partial block copy it in turn: k writers among h holders make min(k, h - 1) copies), and
batch_commit is where a windowed sequence gives blocks back. Checked against per-sequence calls on a twin
manager, and the window's released (-1) blocks against the prefill kernel, which may be handed them."""
import os
import random

import numpy as np
import pytest

import kvblock

QUICK = os.environ.get("KVB_TEST_QUICK", "") not in ("", "0")


def state(m, ids):
    return ([m.block_table(s).tolist() for s in ids], m.num_free_blocks, m.drain_copies().tolist(),
            [m.info(s) for s in ids])


def test_append_releases_nothing_commit_releases():
    with kvblock.Manager(16, 4) as m:
        m.allocate(1, range(1, 13), window=6)  # 3 blocks; the window is set before anything is computed
        m.commit(1, 12)
        released = m.block_table(1).tolist()
        assert released[0] == -1 and released.count(-1) == 1  # position 12's window is 7..12: block 0 goes
        free = m.num_free_blocks
        for t in range(4):  # 4 decode tokens: one new block, nothing released while only appended
            m.batch_append([1], [100 + t])
            assert m.block_table(1).tolist()[:3] == released
        assert m.num_free_blocks == free - 1
        m.batch_commit([1])  # position 16's window is 11..16: block 1 (4..7) goes, block 2 (8..11) stays
        table = m.block_table(1).tolist()
        assert table[:3] == [-1, -1, released[2]] and table[3] >= 0
        assert m.num_free_blocks == free
        m.check_invariants()


def test_forked_siblings_copy_in_turn():
    """h holders of a partial last block, k of them appending in one batch: min(k, h - 1) copies, the last
    writer keeps the block (as the per-sequence loop does)."""
    for h in (2, 3, 4):
        for k in range(1, h + 1):
            with kvblock.Manager(32, 4) as m:
                m.allocate(0, range(1, 7))  # 1 full + 1 partial block
                m.commit(0, 6)
                for c in range(1, h):
                    m.fork(0, c)
                shared = int(m.block_table(0)[1])
                m.batch_append(list(range(k)), [50 + i for i in range(k)])
                pairs = m.drain_copies()
                assert len(pairs) == min(k, h - 1), (h, k, pairs)
                assert all(src == shared for src, _ in pairs.tolist())
                assert len({int(m.block_table(s)[1]) for s in range(h)}) == min(k, h - 1) + 1
                m.check_invariants()


def test_batch_calls_equal_the_per_sequence_loop_with_windows_and_forks():
    rng = random.Random(9)
    seen = {"refused": 0, "copies": 0, "released": 0}
    for trial in range(16 if QUICK else 40):
        bs = rng.choice([2, 4])
        kw = dict(num_blocks=rng.randrange(6, 20), block_size=bs, watermark=rng.choice([0.0, 0.2]))
        with kvblock.Manager(**kw) as a, kvblock.Manager(**kw) as b:
            live, next_id = [], 0
            for _ in range(30):
                op = rng.random()
                if op < 0.25 or not live:
                    next_id += 1
                    prompt = [rng.randrange(1, 6) for _ in range(rng.randrange(1, 12))]
                    window = rng.choice([0, 0, 3, 5])
                    sink = rng.choice([0, 1]) if window else 0
                    outs = []
                    for m in (a, b):
                        try:
                            outs.append(m.allocate(next_id, prompt, window=window, sink=sink))
                        except kvblock.KvbError as e:
                            outs.append(e.status)
                    assert outs[0] == outs[1]
                    if isinstance(outs[0], int) and not isinstance(outs[0], kvblock.Status):
                        live.append(next_id)
                elif op < 0.35:
                    done = [s for s in live if a.info(s).num_computed == a.info(s).num_tokens]
                    if not done:
                        continue
                    parent = rng.choice(done)  # fork needs every token committed
                    next_id += 1
                    for m in (a, b):
                        m.fork(parent, next_id)
                    live.append(next_id)
                elif op < 0.45:
                    sid = live.pop(rng.randrange(len(live)))
                    for m in (a, b):
                        m.free(sid)
                elif op < 0.75:
                    before = state(a, live)  # nothing pending: every step below drains both
                    ids = rng.sample(live, rng.randrange(1, len(live) + 1))
                    toks = [rng.randrange(1, 6) for _ in ids]
                    try:
                        a.batch_append(ids, toks)
                        ra = None
                    except kvblock.KvbError as e:
                        ra = e.status
                    try:  # the per-sequence loop on the twin: it refuses exactly when the batch does
                        for s, t in zip(ids, toks):
                            b.append(s, [t])
                        rb = None
                    except kvblock.KvbError as e:
                        rb = e.status
                    assert ra == rb, (trial, ra, rb)
                    if ra is not None:
                        seen["refused"] += 1
                        assert state(a, live) == before  # a refused batch changed nothing
                        break  # the loop may have appended part of the batch: the twins part here
                else:
                    ids = rng.sample(live, rng.randrange(1, len(live) + 1))
                    a.batch_commit(ids)
                    for s in ids:
                        info = b.info(s)
                        b.commit(s, info.num_tokens - info.num_computed)
                sa = state(a, live)
                assert sa == state(b, live), trial
                seen["copies"] += len(sa[2])
                seen["released"] += sum(row.count(-1) for row in sa[0])
                a.check_invariants()
                b.check_invariants()
    assert all(seen.values()), seen  # the workload met refusals, copy-on-write and window releases


def test_prefill_reads_no_released_block_and_checks_query_start():
    """A windowed sequence's block table holds -1 for released blocks; the prefill kernel may be handed
    them (no row attends there) and gives what it gives with the blocks present. A broken query_start is
    refused on the CPU before anything is written (kvb_prefill_attention's checks)."""
    bs, kvh, qh, d, window = 4, 1, 2, 64, 5
    rng = np.random.default_rng(3)
    cache = kvblock.KVCache(1, 8, bs, kvh, d)
    cache.k[0][:] = rng.standard_normal(cache.k[0].shape)
    cache.v[0][:] = rng.standard_normal(cache.v[0].shape)
    full = np.array([[0, 1, 2, 3]], np.int32)
    windowed = np.array([[-1, -1, 2, 3]], np.int32)  # rows at 13..15 attend 9..15 at most: blocks 2, 3
    q = rng.standard_normal((3, qh, d)).astype(np.float32)
    qs, lens = np.array([0, 3], np.int32), np.array([16], np.int32)
    want = kvblock.prefill_attention(cache, 0, q, qs, lens, full, np.empty_like(q), window=window)
    got = kvblock.prefill_attention(cache, 0, q, qs, lens, windowed, np.empty_like(q), window=window)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(kvblock.KvbError, match="block"):  # without the window block 0 is attended
        kvblock.prefill_attention(cache, 0, q, qs, lens, windowed, np.empty_like(q))
    out = np.full_like(q, 7.0)
    for bad in ([1, 3], [0, 2], [0, 4]):
        with pytest.raises(kvblock.KvbError, match="query_start"):
            kvblock.prefill_attention(cache, 0, q, np.array(bad, np.int32), lens, full, out, window=window)
        assert (out == 7.0).all()


def test_prefill_allow_tf32_is_exact_on_the_cpu():
    """allow_tf32 reaches kvb_prefill_args; the CPU kernel ignores it (always fp32): the same bytes."""
    bs, kvh, qh, d = 4, 1, 2, 64
    rng = np.random.default_rng(5)
    cache = kvblock.KVCache(1, 8, bs, kvh, d)
    cache.k[0][:] = rng.standard_normal(cache.k[0].shape)
    cache.v[0][:] = rng.standard_normal(cache.v[0].shape)
    table = np.array([[0, 1, 2, 3]], np.int32)
    q = rng.standard_normal((3, qh, d)).astype(np.float32)
    qs, lens = np.array([0, 3], np.int32), np.array([16], np.int32)
    want = kvblock.prefill_attention(cache, 0, q, qs, lens, table, np.empty_like(q))
    got = kvblock.prefill_attention(cache, 0, q, qs, lens, table, np.empty_like(q), allow_tf32=True)
    np.testing.assert_array_equal(got, want)
