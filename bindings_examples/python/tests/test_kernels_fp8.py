"""FP8 KV caches from Python: numpy uint8 caches with the dtype named and torch float8 tensors; write_kv
quantizes (x / scale, round to nearest even, saturated), decode and prefill read them with q in float16 /
float32, against float64 numpy on the dequantized cache; the argument checks."""
import numpy as np
import pytest

import kvblock
from test_kernels import BS, KVH, QH, D, reference

torch = pytest.importorskip("torch")

TORCH_FP8 = {"float8_e4m3": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}


def dequantize(raw, fmt, scales):
    """uint8 [..., KVH, D] -> float64 values times the per-head scales (torch decodes the bytes, exactly)."""
    t = torch.from_numpy(np.ascontiguousarray(raw)).view(getattr(torch, TORCH_FP8[fmt]))
    return t.to(torch.float64).numpy() * np.asarray(scales, np.float64)[:, None]


@pytest.mark.parametrize("fmt", ["float8_e4m3", "float8_e5m2"])
@pytest.mark.parametrize("qdtype,tol", [("float32", 2e-5), ("float16", 3e-3)])
def test_numpy_fp8_cache_decode_and_prefill(fmt, qdtype, tol):
    rng = np.random.default_rng(1)
    lens = [40, 17, 1]
    k_heads = np.array([0.01, 0.02], np.float32)
    with kvblock.Manager(num_blocks=16, block_size=BS) as m:
        cache = kvblock.KVCache(1, 16, BS, KVH, D, fmt, k_head_scales=k_heads, v_scale=0.02)
        assert cache.k[0].dtype == np.uint8 and cache.dtype == fmt
        for sid, n in enumerate(lens):
            m.allocate(sid, range(sid * 1000, sid * 1000 + n))
        batch = m.batch_export(np.arange(len(lens)))
        k = rng.uniform(-2, 2, (batch.num_slots, KVH, D)).astype(np.float32)
        v = rng.uniform(-2, 2, (batch.num_slots, KVH, D)).astype(np.float32)
        kvblock.write_kv(cache, 0, k, v, batch.slot_mapping)
        # the bytes: torch's conversion agrees with the library's rule inside the finite range
        slots = np.asarray(batch.slot_mapping)
        raw_k = cache.k[0].reshape(-1, KVH, D)[slots]
        want = (torch.from_numpy(k / k_heads[:, None])).to(getattr(torch, TORCH_FP8[fmt])).view(torch.uint8).numpy()
        np.testing.assert_array_equal(raw_k, want)
        kd = dequantize(raw_k, fmt, k_heads)
        vd = dequantize(cache.v[0].reshape(-1, KVH, D)[slots], fmt, [0.02, 0.02])
        q = rng.standard_normal((len(lens), QH, D)).astype(qdtype)
        out = np.full_like(q, np.nan)
        kvblock.paged_attention(cache, 0, q, batch.block_tables, batch.seq_lens, out)
        starts = np.asarray(batch.query_start)
        for s, n in enumerate(lens):
            rows = slice(starts[s], starts[s] + n)
            ref = reference(q[s:s + 1], kd[rows], vd[rows], np.array([n - 1]))
            np.testing.assert_allclose(out[s:s + 1], ref, rtol=tol, atol=tol)
        # prefill: every token of every sequence is a query row
        qp = rng.standard_normal((batch.num_slots, QH, D)).astype(qdtype)
        outp = np.full_like(qp, np.nan)
        kvblock.prefill_attention(cache, 0, qp, batch.query_start, batch.seq_lens, batch.block_tables, outp)
        for s, n in enumerate(lens):
            rows = slice(starts[s], starts[s] + n)
            ref = reference(qp[rows], kd[rows], vd[rows], np.arange(n))
            np.testing.assert_allclose(outp[rows], ref, rtol=tol, atol=tol)


def test_torch_float8_tensors_and_saturation():
    shape = (4, BS, KVH, D)
    ks = [torch.zeros(shape, dtype=torch.float8_e5m2)]
    vs = [torch.zeros(shape, dtype=torch.float8_e5m2)]
    cache = kvblock.KVCache.wrap(ks, vs, k_scale=2.0)
    assert cache.dtype == "float8_e5m2"
    key = torch.full((2, KVH, D), 1.0, dtype=torch.bfloat16)
    key[0, 0, :4] = torch.tensor([float("inf"), -1e30, float("nan"), 3.0])
    kvblock.write_kv(cache, 0, key, key.clone(), np.array([0, 17], np.int64))
    got = ks[0].view(torch.uint8)[0, 0, 0, :4].tolist()
    assert [got[0], got[1], got[2] & 0x7f, got[3]] == [0x7b, 0xfb, 0x7f, 0x3e]  # +-57344 (saturated), NaN, 1.5
    assert vs[0].view(torch.uint8)[0, 0, 0, 3].item() == 0x42  # v_scale 1: 3.0 = 0x42
    assert ks[0][1, 1].to(torch.float32).eq(0.5).all()  # 1.0 / 2


def test_alias_keeps_the_fp8_dtype_and_scales():
    """KVCache.alias (the torch engine's CUDA-graph cache) reads and writes the same bytes with the same scales:
    a write through the alias reads back through the original as the same values."""
    shape = (2, BS, KVH, D)
    heads = np.array([0.5, 0.25], np.float32)
    cache = kvblock.KVCache.wrap([torch.zeros(shape, dtype=torch.float8_e4m3fn) for _ in range(2)],
                                 [torch.zeros(shape, dtype=torch.float8_e4m3fn) for _ in range(2)],
                                 k_scale=[0.01, 0.02], v_scale=0.03, v_head_scales=heads)
    alias = cache.alias()
    assert alias.dtype == "float8_e4m3" and alias.k[1] is cache.k[1]
    for layer in range(2):
        a, c = alias.descs[layer], cache.descs[layer]
        assert (a.k_scale, a.v_scale, a.dtype) == (c.k_scale, c.v_scale, c.dtype)
        assert [a.v_head_scales[h] for h in range(KVH)] == [0.5, 0.25] and a.k_head_scales == kvblock.kernels.ffi.NULL
    plain = kvblock.KVCache(1, 2, BS, KVH, D).alias()
    assert plain.dtype == "float32" and not plain.fp8
    with pytest.raises(kvblock.KvbArgumentError, match="k_scale: a float or one per layer \\(2\\), got shape \\(3,\\)"):
        kvblock.KVCache.wrap(cache.k, cache.v, k_scale=[1.0, 2.0, 3.0])


def test_fp8_argument_checks():
    with pytest.raises(kvblock.KvbArgumentError, match="uint8"):
        kvblock.KVCache.wrap([np.zeros((2, BS, KVH, D), np.float32)], [np.zeros((2, BS, KVH, D), np.float32)],
                             "float8_e4m3")
    with pytest.raises(kvblock.KvbArgumentError, match="float16, bfloat16 or float32"):
        kvblock.KVCache.wrap([np.zeros((2, BS, KVH, D), np.uint8)], [np.zeros((2, BS, KVH, D), np.uint8)])
    with pytest.raises(kvblock.KvbArgumentError, match="fp8 caches"):
        kvblock.KVCache(1, 2, BS, KVH, D, "float32", k_scale=0.5)
    with pytest.raises(kvblock.KvbArgumentError, match="k_head_scales"):
        kvblock.KVCache(1, 2, BS, KVH, D, "float8_e4m3", k_head_scales=[1.0, 1.0, 1.0])
    cache = kvblock.KVCache(1, 2, BS, KVH, D, "float8_e4m3", v_scale=-1.0)
    with pytest.raises(kvblock.KvbError, match="v_scale"):
        kvblock.write_kv(cache, 0, np.zeros((1, KVH, D), np.float32), np.zeros((1, KVH, D), np.float32),
                         np.array([0], np.int64))
    cache = kvblock.KVCache(1, 2, BS, KVH, D, "float8_e4m3")
    with pytest.raises(kvblock.KvbArgumentError, match="value"):
        kvblock.write_kv(cache, 0, np.zeros((1, KVH, D), np.float32), np.zeros((1, KVH, D), np.float16),
                         np.array([0], np.int64))
    q = np.zeros((1, QH, D), np.int32)
    with pytest.raises(kvblock.KvbArgumentError, match="q: dtype"):
        kvblock.paged_attention(cache, 0, q, np.zeros((1, 1), np.int32), np.ones(1, np.int32), q)


def test_engine_fp8_kv_against_fp16_kv():
    from kvblock.engine import Engine, EngineConfig
    from kvblock.engine.kv_quant import calibrate_kv_scales, compare_logits
    from kvblock.engine.model import Model, ModelConfig
    from kvblock.engine.sequence import Request

    model = Model(ModelConfig(num_layers=2, seed=3))
    rng = np.random.default_rng(3)
    prompts = [rng.integers(0, model.cfg.vocab, 40).tolist() for _ in range(3)]
    k, v = calibrate_kv_scales(model, prompts[0])
    assert len(k) == 2 and all(0 < x < 1 for x in k + v)
    runs = {}
    for dtype, scales in (("float16", None), ("float8_e4m3", (k, v))):
        eng = Engine(model, EngineConfig(num_blocks=64, kv_dtype=dtype, kv_scales=scales, record_logits=True))
        for i, p in enumerate(prompts):
            eng.add_request(Request(i, p, 4))
        runs[dtype] = eng.run()
        eng.close()
    cmp = compare_logits(runs["float16"], runs["float8_e4m3"])
    assert cmp["positions"] == 12
    # e4m3 keeps 3 mantissa bits: the logits move, but by a small fraction of their spread
    first = max(float(np.abs(runs["float16"][i][0].logits[0] - runs["float8_e4m3"][i][0].logits[0]).max())
                for i in range(3))
    spread = float(np.ptp(runs["float16"][0][0].logits[0]))
    assert 0 < first < 0.1 * spread, (first, spread)
