"""The torch engine on fp8 K/V caches (torch float8_e4m3fn / float8_e5m2 tensors through kvblock.KVCache),
CPU torch: per-layer scales from a dense calibration prefill (kv_quant.py), write_kv quantizing, the logits
against a 16-bit-K/V run of the same requests; the CLI's --kv-dtype and --store on the torch engine."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="SKIP torch engine fp8: torch not importable")
pytest.importorskip("safetensors", reason="SKIP torch engine fp8: safetensors not importable")

from kvblock.engine import EngineConfig, Request  # noqa: E402
from kvblock.engine.checkpoint import write_tiny_checkpoint  # noqa: E402
from kvblock.engine.kv_quant import FP8_MAX, calibrate_kv_scales, compare_logits  # noqa: E402
from kvblock.engine.torch_engine import TorchEngine  # noqa: E402
from kvblock.engine.torch_model import TorchModel  # noqa: E402

# Documented tolerance: max |logit diff| of the fp8-K/V run against the fp16-K/V run, as a fraction of the
# fp16 run's largest |logit| (measured on this model: e4m3 0.9%, e5m2 1.3%; e4m3 keeps 3 mantissa bits,
# e5m2 2, each K/V element is off by up to 2^-4 / 2^-3 relative).
TOLERANCE = {"float8_e4m3": 0.03, "float8_e5m2": 0.05}


def _prompts(vocab: int) -> list:
    rng = np.random.default_rng(0)
    prefix = rng.integers(0, vocab, 24).tolist()  # a shared prefix: later requests hit its cached fp8 blocks
    return [prefix + rng.integers(0, vocab, 7 + 5 * i).tolist() for i in range(4)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d, cfg = write_tiny_checkpoint(str(tmp_path_factory.mktemp("fp8") / "m"), "llama", seed=3)
    return d, cfg, TorchModel.from_pretrained(str(d), "cpu", "float32", max_len=256)


def _run(model, prompts, kv_dtype, scales=None, **cfg):
    eng = TorchEngine(model, EngineConfig(num_blocks=64, block_size=8, max_batched_tokens=32, kv_dtype=kv_dtype,
                                          kv_scales=scales, record_logits=True, **cfg), cuda_graph="emulate")
    for i, p in enumerate(prompts):
        eng.add_request(Request(i, p, 8))
    out = eng.run()
    eng.close()
    return out, eng


def test_dense_prefill_matches_the_engine(tiny):
    """The calibration's dense prefill (TorchModel.dense_logits) is the model the engine runs: its last
    position's logits are the engine's first generated position's (fp32 K/V)."""
    _, cfg, model = tiny
    p = _prompts(cfg.vocab)[0]
    out, _ = _run(model, [p], "float32")
    np.testing.assert_allclose(model.dense_logits(p).numpy(), out[0][0].logits[0], atol=1e-4)
    seen = {}
    model.dense_logits(p, observe=lambda layer, k, v: seen.setdefault(layer, (k.shape, v.shape)))
    assert seen == {i: ((len(p), cfg.num_kv_heads, cfg.head_dim),) * 2 for i in range(cfg.num_layers)}


@pytest.mark.parametrize("fmt", ["float8_e4m3", "float8_e5m2"])
def test_fp8_kv_against_16bit_kv(tiny, fmt):
    _, cfg, model = tiny
    prompts = _prompts(cfg.vocab)
    k, v = calibrate_kv_scales(model, prompts[0], fmt)
    # the scales: max |K| (|V|) of each layer over the calibration prefill / the format's largest value
    kmax = [0.0] * cfg.num_layers
    model.dense_logits(prompts[0], observe=lambda i, kk, vv: kmax.__setitem__(i, float(kk.abs().max())))
    assert k == pytest.approx([m / FP8_MAX[fmt] for m in kmax], rel=1e-6)
    ref, _ = _run(model, prompts, "float16")
    test, eng = _run(model, prompts, fmt, (k, v))
    assert eng.cache.k[0].dtype == {"float8_e4m3": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}[fmt]
    assert [eng.cache.descs[i].k_scale for i in range(cfg.num_layers)] == pytest.approx(k)
    assert eng.mgr.stats()["hit_tokens"] > 0 and eng.runner.graph_replays > 0  # cached fp8 blocks, replay path
    cmp = compare_logits(ref, test)
    largest = max(float(np.abs(x).max()) for seqs in ref.values() for s in seqs for x in s.logits)
    print(f"{fmt} vs fp16 K/V: top-1 agreement {cmp['top1_agreement']:.4f} over {cmp['positions']} positions, "
          f"max |logit diff| {cmp['max_abs_diff']:.4g} ({cmp['max_abs_diff'] / largest:.2%} of max |logit|)")
    assert cmp["positions"] == 4 * 8
    assert 0 < cmp["max_abs_diff"] <= TOLERANCE[fmt] * largest
    assert cmp["top1_agreement"] >= 0.9
    # A scale ignored anywhere (a write, a read, the graph replay's cache) would put K/V off by 1 / scale,
    # over 10x here: far outside the tolerance.
    assert all(x < 0.1 for x in k + v)


def test_fp8_kv_with_swap_and_host_cache(tiny):
    """fp8 host blocks (swap preemption, host prefix cache): the bytes move as they are, the same tokens."""
    _, cfg, model = tiny
    prompts = _prompts(cfg.vocab)
    scales = calibrate_kv_scales(model, prompts[0])
    plain, _ = _run(model, prompts, "float8_e4m3", scales)
    moved, eng = _run(model, prompts, "float8_e4m3", scales, num_host_blocks=16, host_cache=True,
                      preemption="swap")
    assert eng.host is not None and eng.host.k[0].dtype == torch.float8_e4m3fn
    for i in range(len(prompts)):
        assert moved[i][0].output == plain[i][0].output


def test_bad_kv_dtype_combinations(tiny):
    _, cfg, model = tiny
    with pytest.raises(ValueError, match="kv_dtype 'int8'.*float8_e4m3"):
        TorchEngine(model, EngineConfig(num_blocks=16, kv_dtype="int8"))
    with pytest.raises(ValueError, match="kv_scales: scales are for fp8 K/V caches, kv_dtype is 'float16'"):
        TorchEngine(model, EngineConfig(num_blocks=16, kv_dtype="float16", kv_scales=([1.0] * 2, [1.0] * 2)))
    with pytest.raises(ValueError, match="float8_e4m3"):
        calibrate_kv_scales(model, [1, 2, 3], "float16")
    import kvblock
    with pytest.raises(kvblock.KvbArgumentError, match="k_scale: a float or one per layer"):
        TorchEngine(model, EngineConfig(num_blocks=16, kv_dtype="float8_e4m3", kv_scales=([1.0] * 3, [1.0] * 3)))


def _cli(*args: str) -> subprocess.CompletedProcess:
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=pkg + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "kvblock.engine", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_cli_fp8_report_and_refusals(tiny):
    d, cfg, _ = tiny
    ids = ",".join(str(x) for x in _prompts(cfg.vocab)[1])
    r = _cli("--model", str(d), "--ids", ids, "--ids", "5,9,300,7", "--max-tokens", "6", "--device", "cpu",
             "--num-blocks", "64", "--kv-dtype", "fp8_e4m3")
    assert r.returncode == 0, r.stderr
    assert "float8_e4m3 K/V" in r.stdout and "fp8 K/V:           float8_e4m3, scales" in r.stdout, r.stdout
    line = next(x for x in r.stdout.splitlines() if x.startswith("vs float16 K/V run"))
    assert "over 12 generated positions" in line, line
    r = _cli("--kv-dtype", "bf16", "--requests", "1")
    assert r.returncode != 0 and "the numpy engine has no bfloat16" in r.stderr
    r = _cli("--bench", "--store", "dir:/nonexistent", "--host-cache", "--host-blocks", "4")
    assert r.returncode != 0 and "not --bench" in r.stderr
    r = _cli("--model", str(d), "--ids", "1", "--store", "dir:/nonexistent")
    assert r.returncode != 0 and "needs the host cache" in r.stderr


@pytest.mark.parametrize("kv", [[], ["--kv-dtype", "fp8_e4m3"]], ids=["model-dtype", "fp8_e4m3"])
def test_cli_store_on_the_torch_engine(tiny, tmp_path, kv):
    """--store dir:PATH on the torch engine: the second run finds the first one's prompt blocks in the store
    (flushed at exit) and generates the same tokens; fp8 blocks too (the same calibration, the same scales,
    the same key namespace)."""
    d, cfg, _ = tiny
    ids = ",".join(str(x) for x in _prompts(cfg.vocab)[3])
    args = ["--model", str(d), "--ids", ids, "--max-tokens", "5", "--device", "cpu", "--num-blocks", "32",
            "--block-size", "8", "--host-blocks", "8", "--host-cache", "--store", f"dir:{tmp_path / 'store'}", *kv]
    runs = [_cli(*args), _cli(*args)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    stores = [next(x for x in r.stdout.splitlines() if x.startswith("store:")) for r in runs]
    assert " 0 hit tokens" in stores[0] and "blocks put" in stores[0], stores[0]
    assert " 0 hit tokens" not in stores[1] and "0 failed" in stores[1], stores[1]
    outs = [[x for x in r.stdout.splitlines() if x.startswith("request ")] for r in runs]
    assert outs[0] == outs[1] and len(outs[0]) == 1
