"""What a hostile or careless caller does to the Python wrapper: one Manager shared by threads (no
Python-side scratch may be shared between calls; closing is test_close.py), broadcast (stride 0) views handed to
the kernels, strided views that must give the same result as contiguous copies, and copy pairs that are not
integers. Each must work exactly or be refused with a clear error, never silently wrong."""
import threading

import numpy as np
import pytest

import kvblock

BS, KVH, QH, D = 16, 2, 4, 64


def test_one_manager_many_threads():
    """Block tables, infos and (empty) copy pairs read concurrently: every thread sees its own answers."""
    m = kvblock.Manager(num_blocks=256, block_size=4)
    lens = [1 + 13 * i for i in range(4)]
    for i, n in enumerate(lens):
        m.allocate(i, [1000 * i + j for j in range(n)])
        m.commit(i, n)
    errors = []

    def worker(i):
        want = (lens[i] + 3) // 4
        try:
            for _ in range(1500):
                if len(m.block_table(i)) != want or m.info(i).num_blocks != want:
                    errors.append(f"seq {i}: wrong table length")
                if len(m.drain_copies()):
                    errors.append("phantom copy pairs")
                if m.can_allocate([7 + i] * 5) != 0:
                    errors.append("wrong cached count")
        except Exception as e:  # noqa: BLE001 - any exception here is the failure being tested
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    m.close()
    assert not errors, errors[:3]


def test_broadcast_views_are_refused():
    """A stride-0 dimension would reach C as 0 = 'dense default': the kernel would read other memory."""
    cache = kvblock.KVCache(1, 4, BS, KVH, D, "float32")
    row = np.ones((1, KVH, D), np.float32)
    slots = np.arange(3, dtype=np.int64)
    with pytest.raises(kvblock.KvbArgumentError, match="key: dimension 0 has stride 0"):
        kvblock.write_kv(cache, 0, np.broadcast_to(row, (3, KVH, D)), np.ones((3, KVH, D), np.float32), slots)
    assert not cache.k[0].any()  # nothing written
    q = np.broadcast_to(np.ones((1, 1, D), np.float32), (2, QH, D))
    out = np.zeros((2, QH, D), np.float32)
    with pytest.raises(kvblock.KvbArgumentError, match="q: dimension 0 has stride 0"):
        kvblock.paged_attention(cache, 0, q, np.zeros((2, 1), np.int32), np.ones(2, np.int32), out)
    with pytest.raises(kvblock.KvbArgumentError, match="q: dimension 0 has stride 0"):
        kvblock.prefill_attention(cache, 0, q, np.array([0, 2], np.int32), np.array([2], np.int32),
                                  np.zeros((1, 1), np.int32), out)
    wide = np.lib.stride_tricks.as_strided(np.zeros((QH, D), np.float32), (2, QH, D), (0, D * 4, 4))
    with pytest.raises(kvblock.KvbArgumentError, match="out: dimension 0 has stride 0"):
        kvblock.paged_attention(cache, 0, np.ones((2, QH, D), np.float32), np.zeros((2, 1), np.int32),
                                np.ones(2, np.int32), wide)
    base = np.zeros((1, BS, KVH, D), np.float32)
    k_bcast = np.lib.stride_tricks.as_strided(base, (4, BS, KVH, D), (0,) + base.strides[1:])
    with pytest.raises(kvblock.KvbArgumentError, match=r"k_layers\[0\]: dimension 0 has stride 0"):
        kvblock.KVCache.wrap([k_bcast], [k_bcast.copy()])
    # a stride-0 dimension of one element is harmless (numpy makes them with np.newaxis)
    one = np.ones((KVH, D), np.float32)[np.newaxis]
    kvblock.write_kv(cache, 0, one, one, np.array([5], np.int64))
    assert cache.k[0][0, 5].sum() == KVH * D


def test_strided_views_match_contiguous_copies():
    """Row- and head-strided q / out views (no copy) give exactly the contiguous result."""
    rng = np.random.default_rng(3)
    cache = kvblock.KVCache(1, 8, BS, KVH, D, "float32")
    n = 40
    k = rng.standard_normal((n, KVH, D)).astype(np.float32)
    kvblock.write_kv(cache, 0, k, -k, np.arange(n, dtype=np.int64))
    tables = np.array([[0, 1, 2, -1]], np.int32)
    big_q = rng.standard_normal((2 * 5, 2 * QH, D)).astype(np.float32)
    q = big_q[::2, ::2]  # strides (2 * 2 * QH * D, 2 * D, 1) in elements
    big_out = np.full((5, 3 * QH, D), np.nan, np.float32)
    out = big_out[:, ::3]
    kvblock.prefill_attention(cache, 0, q, np.array([0, 5], np.int32), np.array([n], np.int32), tables, out)
    ref = np.empty((5, QH, D), np.float32)
    kvblock.prefill_attention(cache, 0, np.ascontiguousarray(q), np.array([0, 5], np.int32), np.array([n], np.int32),
                              tables, ref)
    assert np.array_equal(out, ref)
    assert np.isnan(big_out[:, 1::3]).all() and np.isnan(big_out[:, 2::3]).all()  # only the view written


def test_copy_pairs_must_be_integers():
    cache = kvblock.KVCache(1, 4, BS, KVH, D, "float32")
    cache.k[0][1] = 1.0
    for bad, match in (([[1.7, 2.2]], "integers"), ([[1, 2**40]], "does not fit int32"), ([[True, False]], "integers")):
        with pytest.raises(kvblock.KvbArgumentError, match=match):
            kvblock.copy_blocks(cache, bad)
    assert not cache.k[0][2].any()
    kvblock.copy_blocks(cache, [[1, 2]])
    assert cache.k[0][2].all()
    kvblock.copy_blocks(cache, [])


def test_parent_hash_must_be_a_u64():
    assert kvblock.hash_tokens([1, 2], parent=2**64 - 1) == kvblock.hash_tokens([1, 2], parent=np.uint64(2**64 - 1))
    for bad, match in ((True, "got bool"), (1.5, "got float"), (-1, r"-1 is out of range \[0, 2\^64 - 1\] of uint64_t"),
                       (2**64, "out of range")):
        with pytest.raises(kvblock.KvbArgumentError, match=match):
            kvblock.hash_tokens([1, 2], parent=bad)


def test_kernels_on_one_cache_from_threads():
    """Long-context decode uses a split-K workspace; two threads on one KVCache must not share it."""
    rng = np.random.default_rng(1)
    cache = kvblock.KVCache(1, 64, BS, KVH, D, "float32")
    cache.k[0][:] = rng.standard_normal(cache.k[0].shape).astype(np.float32)
    cache.v[0][:] = rng.standard_normal(cache.v[0].shape).astype(np.float32)
    tables = np.arange(64, dtype=np.int32).reshape(1, 64).repeat(4, 0)
    lens = np.array([1000, 900, 800, 700], np.int32)
    qs = [rng.standard_normal((4, QH, D)).astype(np.float32) for _ in range(3)]
    refs = []
    for q in qs:
        out = np.empty_like(q)
        kvblock.paged_attention(cache, 0, q, tables, lens, out)
        refs.append(out)
    wrong = []

    def worker(i):
        out = np.empty_like(qs[i])
        for _ in range(100):
            # thread 2 alternates a shorter table: its workspace needs change size under the others
            t = tables if i != 2 or _ % 2 else tables[:, :48].copy()
            kvblock.paged_attention(cache, 0, qs[i], t, np.minimum(lens, t.shape[1] * BS), out)
            if i != 2 and not np.array_equal(out, refs[i]):
                wrong.append(i)
                return

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


def test_empty_batches():
    """Zero rows are valid (a step whose sequences bring no new token); numpy may give them 0 strides."""
    cache = kvblock.KVCache(1, 4, BS, KVH, D, "float32")
    empty = np.random.default_rng(0).standard_normal((0, KVH, D)).astype(np.float32)
    kvblock.write_kv(cache, 0, empty, empty, np.zeros(0, np.int64))
    q = np.random.default_rng(0).standard_normal((0, QH, D)).astype(np.float32)
    out = np.empty((0, QH, D), np.float32)
    kvblock.prefill_attention(cache, 0, q, np.array([0, 0], np.int32), np.array([5], np.int32),
                              np.zeros((1, 1), np.int32), out)
    assert not cache.k[0].any()
