"""The engine's store tier (EngineConfig.store, --store): engines that share a store serve prompts from each
other's blocks with outputs token-exact with one engine on its own, also when the store's bytes are
corrupted or its server dies (they recompute); the two-engine demo (examples/two_engines.py) run small."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kvblock.engine import Engine, EngineConfig, Model, ModelConfig, Request

PKG = Path(__file__).resolve().parent.parent
BS = 8


def reqs(max_tokens, n=6, seed=3):
    rng = np.random.default_rng(seed)
    shared = [rng.integers(0, 500, 3 * BS).tolist() for _ in range(2)]
    return [Request(r, shared[r % 2] + rng.integers(0, 500, 2 * BS + 3).tolist(), max_tokens) for r in range(n)]


def run(store, max_tokens, flush=True, num_blocks=64, before_run=None):
    eng = Engine(Model(ModelConfig(num_layers=2, seed=1)),
                 EngineConfig(num_blocks=num_blocks, block_size=BS, num_host_blocks=8, host_cache=True, store=store,
                              max_num_seqs=4, max_batched_tokens=64))
    for r in reqs(max_tokens):
        eng.add_request(r)
    if before_run is not None:
        before_run()
    out = {r: [s.output for s in seqs] for r, seqs in eng.run().items()}
    st = eng.mgr.stats()
    if flush:
        eng.flush_to_store()
    eng.mgr.check_invariants()
    eng.close()
    return out, st


@pytest.fixture(scope="module")
def reference():
    return run(None, 5)[0]


def test_decode_engine_served_from_prefill_engines_blocks(tmp_path, reference):
    store = f"dir:{tmp_path}"
    _, st = run(store, 1)
    assert st["store_hit_tokens"] == 0
    out, st = run(store, 5)
    assert out == reference
    # every request's full prompt blocks but the last: 6 requests x 5 blocks, shared prefixes counted once
    # per request that looked them up in the store (the rest hit the device)
    assert st["store_hit_tokens"] >= 2 * 5 * BS and st["store_get_failures"] == 0
    assert st["computed_tokens"] < run(None, 5)[1]["computed_tokens"]


def test_corrupted_store_files_are_recomputed(tmp_path, reference):
    run(f"dir:{tmp_path}", 1)
    files = sorted(tmp_path.glob("*.kvb"))
    assert len(files) >= 10
    for f in files[::2]:  # every other block: one payload byte changed
        data = bytearray(f.read_bytes())
        data[-5] ^= 0x10
        f.write_bytes(bytes(data))
    out, st = run(f"dir:{tmp_path}", 5)
    assert out == reference
    assert st["store_get_failures"] > 0 and st["store_recomputed_tokens"] > 0


def test_engines_on_redis(redis_server, reference):
    run(redis_server.url, 1)
    out, st = run(redis_server.url, 5)
    assert out == reference and st["store_get_blocks"] > 0


def test_engine_survives_redis_dying(redis_server, reference):
    run(redis_server.url, 1)
    out, st = run(redis_server.url, 5, flush=False, before_run=redis_server.kill)
    assert out == reference
    assert st["store_hit_tokens"] == 0  # its lookups failed: nothing found, everything computed


def _demo(*args):
    env = dict(os.environ, PYTHONPATH=str(PKG) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    small = ["--requests", "4", "--shared-prefix", "32", "--prompt", "20", "--max-tokens", "3", "--layers", "1",
             "--num-blocks", "64", "--host-blocks", "16"]
    return subprocess.run([sys.executable, str(PKG / "examples" / "two_engines.py"), *small, *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_two_engines_demo_small():
    r = _demo()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "outputs token-exact with the single engine's" in r.stdout
    assert "outputs token-exact with the earlier run's" in r.stdout and r.stdout.rstrip().endswith("OK")


def test_two_engines_demo_on_redis(redis_server):
    r = _demo("--store", redis_server.url)
    assert r.returncode == 0, r.stdout + r.stderr


def test_cli_store_restart(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(PKG) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [sys.executable, "-m", "kvblock.engine", "--requests", "4", "--shared-prefix", "32", "--prompt", "8",
            "--max-tokens", "2", "--layers", "1", "--num-blocks", "64", "--host-cache", "--host-blocks", "8",
            "--store", f"dir:{tmp_path}"]
    lines = []
    for _ in range(2):
        r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        lines.append(next(x for x in r.stdout.splitlines() if x.startswith("store:")))
    assert " 0 hit tokens" in lines[0] and " 0 hit tokens" not in lines[1], lines
    r = subprocess.run(argv[:-5] + ["--store", "dir:x"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "needs the host cache" in r.stderr


def test_torch_engine_on_a_store(tmp_path):
    """The torch engine (CPU here; the GPU path syncs the device around the store's host reads, untested
    here): a decode engine served from a prefill engine's store blocks, token-exact with transformers."""
    try:
        import safetensors  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except Exception as e:
        pytest.skip(f"SKIP torch engine on a store: torch, safetensors or transformers not importable ({e})")
    from kvblock.engine.checkpoint import write_tiny_checkpoint
    from kvblock.engine.hf_reference import hf_greedy, load_hf
    from kvblock.engine.torch_engine import TorchEngine
    from kvblock.engine.torch_model import TorchModel
    d, cfg = write_tiny_checkpoint(str(tmp_path / "m"), "llama", seed=7)
    rng = np.random.default_rng(2)
    prefix = rng.integers(0, cfg.vocab, 24).tolist()
    prompts = [prefix + rng.integers(0, cfg.vocab, 13 + 3 * i).tolist() for i in range(3)]
    store = f"dir:{tmp_path / 'store'}"

    def run_torch(max_tokens):
        eng = TorchEngine(TorchModel.from_pretrained(str(d), "cpu", "float32", max_len=256),
                          EngineConfig(num_blocks=32, block_size=8, num_host_blocks=16, host_cache=True, store=store,
                                       max_num_seqs=4, max_batched_tokens=64))
        for i, p in enumerate(prompts):
            eng.add_request(Request(i, p, max_tokens))
        out = eng.run()
        st = eng.mgr.stats()
        eng.flush_to_store()
        eng.close()
        return out, st

    run_torch(1)
    out, st = run_torch(6)
    assert st["store_get_blocks"] > 0 and st["store_get_failures"] == 0
    hf = load_hf(str(d), "cpu", "float32")
    for i, p in enumerate(prompts):
        assert out[i][0].output == hf_greedy(hf, p, 6), f"request {i}"
