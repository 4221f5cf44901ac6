"""Kernels on caller memory without copies: write_kv, paged and prefill attention against float64 numpy,
copy/swap blocks, the cache object, and argument checks whose messages name the argument."""
import numpy as np
import pytest

import kvblock

BS, KVH, QH, D = 16, 2, 4, 64


def reference(q, keys, values, positions, window=0, sink=0):
    """Attention of query rows at absolute positions over keys/values [L, KVH, D] in float64."""
    group = q.shape[1] // keys.shape[1]
    k = np.repeat(keys.astype(np.float64), group, axis=1)
    v = np.repeat(values.astype(np.float64), group, axis=1)
    logits = np.einsum("nhd,thd->nht", q.astype(np.float64), k) / np.sqrt(q.shape[2])
    t = np.arange(keys.shape[0])
    allowed = t[None, :] <= positions[:, None]
    if window:
        allowed &= (t[None, :] > positions[:, None] - window) | (t[None, :] < sink)
    logits = np.where(allowed[:, None, :], logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("nht,thd->nhd", p, v)


def fill(m, cache, lens, rng, dtype):
    """Sequences of the given lengths with random K/V written through batch_export's slot mapping."""
    kv = []
    for sid, n in enumerate(lens):
        m.allocate(sid, range(sid * 1000, sid * 1000 + n))
    batch = m.batch_export(np.arange(len(lens)))
    for layer in range(cache.num_layers):
        k = rng.standard_normal((batch.num_slots, KVH, D)).astype(dtype)
        v = rng.standard_normal((batch.num_slots, KVH, D)).astype(dtype)
        kvblock.write_kv(cache, layer, k, v, batch.slot_mapping)
        kv.append((k, v))
    return batch, kv


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("float16", 3e-3)])
def test_decode_and_prefill_against_numpy(dtype, tol):
    rng = np.random.default_rng(0)
    lens = [37, 20, 1]
    with kvblock.Manager(num_blocks=16, block_size=BS) as m:
        cache = kvblock.KVCache(2, 16, BS, KVH, D, dtype)
        batch, kv = fill(m, cache, lens, rng, dtype)
        starts = batch.query_start
        q = rng.standard_normal((len(lens), QH, D)).astype(dtype)
        out = np.full_like(q, np.nan)
        kvblock.paged_attention(cache, 1, q, batch.block_tables, batch.seq_lens, out)
        k, v = kv[1]
        for s, n in enumerate(lens):
            ref = reference(q[s:s + 1], k[starts[s]:starts[s + 1]], v[starts[s]:starts[s + 1]], np.array([n - 1]))
            np.testing.assert_allclose(out[s:s + 1].astype(np.float64), ref, atol=tol, rtol=tol)
        qp = rng.standard_normal((batch.num_slots, QH, D)).astype(dtype)
        outp = np.full_like(qp, np.nan)
        for window, sink in [(0, 0), (8, 4)]:
            kvblock.prefill_attention(cache, 1, qp, batch.query_start, batch.seq_lens, batch.block_tables, outp,
                                      window=window, sink=sink)
            for s, n in enumerate(lens):
                a, b = starts[s], starts[s + 1]
                ref = reference(qp[a:b], k[a:b], v[a:b], np.arange(n), window, sink)
                np.testing.assert_allclose(outp[a:b].astype(np.float64), ref, atol=tol, rtol=tol)


def test_cache_views_without_copy_and_strided_layout():
    """One combined [blocks, 2, BS, KVH, D] array: K and V are strided views; the kernel writes into it."""
    combined = np.zeros((8, 2, BS, KVH, D), np.float32)
    cache = kvblock.KVCache.wrap([combined[:, 0]], [combined[:, 1]])
    assert cache.descs[0].block_stride == 2 * BS * KVH * D
    key = np.ones((2, KVH, D), np.float32)
    value = np.full((2, KVH, D), 2.0, np.float32)
    kvblock.write_kv(cache, 0, key, value, np.array([3, -1], np.int64))
    assert (combined[0, 0, 3] == 1).all() and (combined[0, 1, 3] == 2).all()
    assert combined.sum() == KVH * D * 3  # the skipped slot wrote nothing
    kvblock.copy_blocks(cache, np.array([[0, 5]], np.int32))
    assert (combined[5] == combined[0]).all()
    host = kvblock.KVCache(1, 4, BS, KVH, D, "float32")
    kvblock.swap_blocks(cache, host, [[5, 2]])
    assert (host.k[0][2] == combined[5, 0]).all() and (host.v[0][2] == combined[5, 1]).all()


def test_argument_checks_name_the_argument():
    cache = kvblock.KVCache(1, 4, BS, KVH, D, "float32")
    good_k = np.zeros((1, KVH, D), np.float32)
    slots = np.zeros(1, np.int64)
    cases = [
        (lambda: kvblock.write_kv(cache, 0, good_k.astype(np.float16), good_k, slots), "key: dtype must be float32"),
        (lambda: kvblock.write_kv(cache, 0, good_k, np.zeros((1, KVH, 32), np.float32), slots), "value: dimension 2"),
        (lambda: kvblock.write_kv(cache, 0, good_k, good_k, slots.astype(np.int32)),
         "slot_mapping: dtype must be int64"),
        (lambda: kvblock.write_kv(cache, 0, good_k, good_k, np.zeros(2, np.int64)),
         "slot_mapping: dimension 0 must be 1"),
        (lambda: kvblock.write_kv(cache, 0, np.zeros((1, KVH, 2 * D), np.float32)[:, :, ::2], good_k, slots),
         "key: .*dimension 2|key: the last dimension must be contiguous"),
        (lambda: kvblock.write_kv(cache, 0, [[0.0]], good_k, slots), "key must be a numpy array"),
        (lambda: kvblock.write_kv(cache, 3, good_k, good_k, slots), "layer 3 is out of range"),
        (lambda: kvblock.write_kv(cache, 0, good_k, good_k, np.array([4 * BS], np.int64)), "slot"),
        (lambda: kvblock.paged_attention(cache, 0, np.zeros((1, 3, D), np.float32), np.zeros((1, 1), np.int32),
                                         np.ones(1, np.int32), np.zeros((1, 3, D), np.float32)), "q: 3 query heads"),
        (lambda: kvblock.paged_attention(cache, 0, np.zeros((1, QH, D), np.float32), np.zeros((1, 1), np.int64),
                                         np.ones(1, np.int32), np.zeros((1, QH, D), np.float32)),
         "block_tables: dtype must be int32"),
        (lambda: kvblock.paged_attention(cache, 0, np.zeros((1, QH, D), np.float32), np.zeros((1, 4), np.int32)[:, ::2],
                                         np.ones(1, np.int32), np.zeros((1, QH, D), np.float32)),
         "block_tables: must be contiguous"),
        (lambda: kvblock.copy_blocks(cache, np.zeros((1, 3), np.int32)), "pairs must be an"),
        (lambda: kvblock.KVCache.wrap([np.zeros((4, BS, KVH, D), np.float32)], [np.zeros((4, BS, KVH, D), np.float16)]),
         r"v_layers\[0\]: dtype must be float32"),
        (lambda: kvblock.KVCache(1, 4, BS, KVH, D, "bfloat16"), "bfloat16 on the CPU needs torch"),
    ]
    ro = np.zeros((1, QH, D), np.float32)
    ro.setflags(write=False)
    cases.append((lambda: kvblock.paged_attention(cache, 0, ro, np.zeros((1, 1), np.int32), np.ones(1, np.int32), ro),
                  "out: is read-only"))
    for call, match in cases:
        with pytest.raises(kvblock.KvbError, match=match):
            call()


def test_torch_tensors_without_copy():
    torch = pytest.importorskip("torch")
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devices:
        cache = kvblock.KVCache.wrap([torch.zeros(4, BS, KVH, D, device=dev)], [torch.zeros(4, BS, KVH, D, device=dev)])
        key = torch.ones(2, KVH, D, device=dev)
        kvblock.write_kv(cache, 0, key, key * 2, torch.tensor([1, 17], dtype=torch.int64, device=dev))
        if dev == "cuda":
            torch.cuda.synchronize()
        assert float(cache.k[0][0, 1].sum()) == KVH * D and float(cache.v[0][1, 1].sum()) == 2 * KVH * D
        q = torch.randn(1, QH, D, device=dev)
        out = torch.empty_like(q)
        kvblock.paged_attention(cache, 0, q, torch.tensor([[0, 1]], dtype=torch.int32, device=dev),
                                torch.tensor([18], dtype=torch.int32, device=dev), out)
        assert out.isfinite().all()
        if dev == "cuda":  # a CPU slot mapping for a CUDA cache is refused, naming the argument
            with pytest.raises(kvblock.KvbError, match="slot_mapping: is on cpu, the cache is on cuda:0"):
                kvblock.write_kv(cache, 0, key, key, torch.tensor([1, 2], dtype=torch.int64))


def test_take_fault_without_cuda_is_unsupported():
    """kvb_cuda_take_fault through the package: a CUDA-less library answers UNSUPPORTED (a KvbError, not a
    KernelFault and not a crash), for any device index and stream; bad Python arguments never reach C."""
    lib = kvblock._lib.lib
    built_with_cuda = lib.kvb_cuda_device_count(kvblock.ffi.new("int32_t*")) != lib.KVB_ERR_UNSUPPORTED
    if kvblock.cuda_device_count():
        assert kvblock.take_fault() is None  # no kernel ran with bad input
    else:
        for args in [(), (0,), (3, None), (np.int32(1), 0)]:
            with pytest.raises(kvblock.KvbError) as e:
                kvblock.take_fault(*args)
            assert not isinstance(e.value, kvblock.KernelFault)
            if built_with_cuda:  # a CUDA build on a machine without a usable device
                assert e.value.status == kvblock.Status.DEVICE, e.value
            else:
                assert e.value.status == kvblock.Status.UNSUPPORTED, e.value
                assert "without CUDA" in e.value.message, e.value
    cpu_cache = kvblock.KVCache(1, 4, BS, KVH, D)
    for bad, what in [(cpu_cache, "CUDA kernels only"), (-1, "out of range"), (True, "device must be"),
                      ("cuda:0", "device must be"), (1.0, "device must be")]:
        with pytest.raises(kvblock.KvbArgumentError, match=what):
            kvblock.take_fault(bad)
    with pytest.raises(kvblock.KvbArgumentError, match="stream"):
        kvblock.take_fault(0, stream="default")


def test_kernel_fault_carries_the_record():
    """KernelFault from a filled kvb_kernel_fault (what take_fault raises after a CUDA kernel met bad input):
    the header's kinds and kernels by name, the position and value, and the library's message."""
    assert kvblock.FaultKind.QUERY_START == kvblock.ffi.typeof("kvb_fault_kind").relements["KVB_FAULT_QUERY_START"]
    assert kvblock.KernelId.PREFILL_ATTENTION == 3 and kvblock.FaultKind.NONE == 0
    f = kvblock.ffi.new("kvb_kernel_fault*")
    kvblock._lib.lib.kvb_kernel_fault_init(f)
    assert f.kind == kvblock.FaultKind.NONE and f.struct_size == kvblock.ffi.sizeof("kvb_kernel_fault")
    f.kind, f.kernel, f.index, f.column, f.value, f.count = 2, 2, 5, 3, 99, 4
    err = kvblock.KernelFault(f, "block_tables[5][3] = 99")
    assert isinstance(err, kvblock.KvbError) and err.status == kvblock.Status.INVALID_ARGUMENT
    assert (err.kind, err.kernel, err.index, err.column, err.value, err.count) == (
        kvblock.FaultKind.BLOCK_ID, kvblock.KernelId.PAGED_ATTENTION, 5, 3, 99, 4)
    assert str(err) == "KVB_ERR_INVALID_ARGUMENT: block_tables[5][3] = 99"
    f.kind, f.kernel = 77, 9  # from a newer library: kept as numbers
    err = kvblock.KernelFault(f, "?")
    assert (err.kind, err.kernel) == (77, 9)
