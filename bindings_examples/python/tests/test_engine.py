"""The mini engine against its dense reference: for requests sharing prefixes, the engine's tokens equal
those of the same model recomputing full attention at every step with no cache, and its logits agree, in
each run: a large pool (with chunked prefill), a pool so small that sequences are preempted and recomputed,
swapping instead of recompute, n = 2 parallel sampling (fork + copy-on-write), a sliding window, and a
hybrid model whose layers alternate window and full attention, served as two KV cache groups.
Prefix caching must reduce the tokens computed."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kvblock
from kvblock.engine.engine import Engine, EngineConfig
from kvblock.engine.model import Model, ModelConfig, reference_generate
from kvblock.engine.sequence import Request

MAX_TOKENS = 6


def requests(model, count=6, prefix=40, seed=1, n=1, temperature=0.0, max_tokens=MAX_TOKENS):
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, model.cfg.vocab, prefix).tolist()
    return [Request(r, shared[: prefix - 8 * (r % 3)] + rng.integers(0, model.cfg.vocab, 4 + 3 * r).tolist(),
                    max_tokens, n=n, temperature=temperature, seed=seed) for r in range(count)]


def run_and_check(model, reqs, cfg, on_export=None):
    eng = Engine(model, cfg)
    if on_export:  # look at every step's kernel inputs
        export = eng.mgr.batch_export
        eng.mgr.batch_export = lambda *a, **kw: on_export(export(*a, **kw))
    for r in reqs:
        eng.add_request(r)
    finished = eng.run()
    assert sorted(finished) == [r.req_id for r in reqs]
    for r in reqs:
        samples = sorted(finished[r.req_id], key=lambda s: s.index)
        assert [s.index for s in samples] == list(range(r.n))
        for s in samples:
            ref_tokens, ref_logits = reference_generate(model, r.prompt, r.max_tokens, r.temperature, r.seed,
                                                        r.req_id, s.index)
            assert s.output == ref_tokens, f"request {r.req_id} sample {s.index}"
            np.testing.assert_allclose(np.array(s.logits), np.array(ref_logits), atol=2e-3, rtol=1e-3)
    eng.mgr.check_invariants()
    st = eng.mgr.stats()
    assert st["used_blocks"] == 0 and st["num_seqs"] == 0
    return eng


@pytest.fixture(scope="module")
def model():
    return Model(ModelConfig(seed=3))


def test_large_pool_chunked_prefill(model):
    eng = run_and_check(model, requests(model), EngineConfig(num_blocks=256, block_size=8, max_batched_tokens=32,
                                                             record_logits=True))
    assert eng.metrics.preemptions == 0 and eng.mgr.stats()["hit_tokens"] > 0


def test_tiny_pool_preempts_and_recomputes(model):
    eng = run_and_check(model, requests(model, count=4, prefix=16, max_tokens=20),
                        EngineConfig(num_blocks=10, block_size=8, max_batched_tokens=64, record_logits=True))
    assert eng.metrics.preemptions > 0


def test_swap_instead_of_recompute(model):
    eng = run_and_check(model, requests(model, count=4, prefix=16, max_tokens=20),
                        EngineConfig(num_blocks=10, block_size=8, num_host_blocks=64,
                                                             max_batched_tokens=64, preemption="swap",
                                                             record_logits=True))
    assert eng.metrics.swaps_out > 0 and eng.metrics.swaps_in == eng.metrics.swaps_out


def test_parallel_sampling_fork_copy_on_write(model):
    eng = run_and_check(model, requests(model, count=4, n=2, temperature=1.0),
                        EngineConfig(num_blocks=128, block_size=8, max_batched_tokens=64, record_logits=True))
    assert eng.metrics.cow_copies > 0


def test_sliding_window():
    model = Model(ModelConfig(seed=4, window=16, sink=4))
    released = []

    def count_released(batch):  # table slots the window released: -1 before a sequence's last block
        for row, n in zip(batch.block_tables, batch.seq_lens):
            released.append(int((row[: (int(n) + 7) // 8] == -1).sum()))
        return batch

    eng = run_and_check(model, requests(model, count=4, prefix=48),
                        EngineConfig(num_blocks=128, block_size=8, max_batched_tokens=64, record_logits=True),
                        on_export=count_released)
    assert eng.mgr.stats()["hit_tokens"] > 0 and max(released) >= 4
    # the window changes the model: without it the reference generates other logits
    full = Model(ModelConfig(seed=4))
    r = requests(model, count=1, prefix=48)[0]
    assert not np.allclose(reference_generate(full, r.prompt, 2)[1], reference_generate(model, r.prompt, 2)[1])


def test_window_prompt_longer_than_the_pool():
    """A sliding-window model's prompts of 4-5 times the pool are served (admitted in part, each chunk's
    tokens appended before it runs, the window releasing the rest) and generate the dense reference's tokens."""
    model = Model(ModelConfig(seed=4, window=16, sink=4))
    rng = np.random.default_rng(7)
    shared = rng.integers(0, model.cfg.vocab, 150).tolist()
    reqs = [Request(r, shared + rng.integers(0, model.cfg.vocab, 20 * r + 5).tolist(), MAX_TOKENS)
            for r in range(3)]
    cfg = EngineConfig(num_blocks=10, block_size=8, max_batched_tokens=16, record_logits=True)
    assert all(len(r.prompt) > cfg.num_blocks * cfg.block_size * 1.8 for r in reqs)
    eng = run_and_check(model, reqs, cfg)
    assert eng.metrics.steps > sum(len(r.prompt) for r in reqs) // cfg.max_batched_tokens


def test_hybrid_window_and_full_layers_as_kv_cache_groups():
    """Layers alternate window (even) and full attention (odd): the engine serves them as two KV cache
    groups of one manager. Token-exact against the dense reference (which masks each layer by its own
    kind), with prefix hits, chunked prefill and a pool small enough to preempt; the window group holds
    fewer blocks than the full group once sequences are long, and its tables read -1 where released."""
    model = Model(ModelConfig(seed=5, num_layers=4, window=16, sink=4, hybrid=True))
    released = []

    def run_hybrid(cfg):
        eng = Engine(model, cfg)
        export = eng.mgr.batch_export

        def spy(ids, bufs, group=0, **kw):
            b = export(ids, bufs, group=group, **kw)
            if group == 0:  # the window group: slots it released read -1 before a sequence's last block
                for row, n in zip(b.block_tables, b.seq_lens):
                    nb = -(-int(n) // cfg.block_size)
                    released.append(int((row[:nb - 1] < 0).sum()))
            return b

        eng.mgr.batch_export = spy
        reqs = requests(model, count=5, prefix=40, seed=3, max_tokens=8)
        for r in reqs:
            eng.add_request(r)
        finished = eng.run()
        for r in reqs:
            (s,) = finished[r.req_id]
            ref_tokens, ref_logits = reference_generate(model, r.prompt, r.max_tokens)
            assert s.output == ref_tokens, f"request {r.req_id}"
            np.testing.assert_allclose(np.array(s.logits), np.array(ref_logits), atol=2e-3, rtol=1e-3)
        eng.mgr.check_invariants()
        return eng

    eng = run_hybrid(EngineConfig(num_blocks=256, block_size=8, max_batched_tokens=24, record_logits=True))
    assert sum(released) > 0 and eng.mgr.stats()["hit_tokens"] > 0
    small = run_hybrid(EngineConfig(num_blocks=24, block_size=8, max_batched_tokens=24, record_logits=True))
    assert small.metrics.preemptions > 0 and small.mgr.stats()["evictions"] > 0
    # the hybrid model differs from its all-window and all-full versions
    seq = requests(model, count=1, prefix=40, seed=3)[0].prompt
    lg = model.dense_logits(seq)
    for other in (ModelConfig(seed=5, num_layers=4, window=16, sink=4),
                  ModelConfig(seed=5, num_layers=4)):
        assert not np.allclose(lg, Model(other).dense_logits(seq), atol=1e-3)


@pytest.mark.parametrize("preemption,host_cache", [("swap", False), ("recompute", True), ("swap", True)])
def test_hybrid_model_swaps_and_host_caches(preemption, host_cache):
    """A hybrid model (window and full layers as two KV cache groups) with swap preemption and the host prefix
    cache, which the manager supports for groups (a sequence swaps all its groups as one; each group's
    blocks offload and load under their own key) and the engine once refused: token-exact against the dense
    reference, with swaps and host hits actually happening."""
    model = Model(ModelConfig(seed=5, num_layers=4, window=16, sink=4, hybrid=True))
    rng = np.random.default_rng(7)
    families = [rng.integers(0, model.cfg.vocab, 32).tolist() for _ in range(3)]
    reqs = [Request(r, families[r % 3] + rng.integers(0, model.cfg.vocab, 3 + r).tolist(), 16, seed=1)
            for r in range(9)]
    cfg = EngineConfig(num_blocks=28, block_size=8, num_host_blocks=48, host_cache=host_cache, max_num_seqs=3,
                       max_batched_tokens=32, preemption=preemption, record_logits=True)
    eng = run_and_check(model, reqs, cfg)
    st = eng.mgr.stats()
    if preemption == "swap":
        assert eng.metrics.swaps_out > 0 and eng.metrics.swaps_in == eng.metrics.swaps_out, eng.metrics
    if host_cache:
        assert st["host_hit_tokens"] > 0 and eng.metrics.loaded_blocks == st["loaded_blocks"] > 0, st
        assert eng.metrics.offloaded_blocks == st["offloaded_blocks"] > 0


def test_prefix_caching_reduces_computed_tokens(model):
    computed = {}
    for caching in (True, False):
        eng = Engine(model, EngineConfig(num_blocks=256, block_size=8, max_batched_tokens=48, prefix_caching=caching))
        for r in requests(model, count=6, prefix=48):
            eng.add_request(r)
        outputs = {k: [s.output for s in v] for k, v in eng.run().items()}
        computed[caching] = eng.mgr.stats()["computed_tokens"]
        if caching:
            cached_outputs = outputs
    assert outputs == cached_outputs
    assert computed[True] < 0.75 * computed[False], computed


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_host_cache_small_device_pool(model, preemption):
    """Three prompt families cycled through a device pool that holds about two requests: each family's prefix
    is evicted from the device (offloaded) before it comes back, so its next request hits on the host and
    the engine loads those blocks before the forward step; the pool is small enough to preempt (recompute
    or swap, which shares the host blocks with the cache) and the host small enough to evict. Tokens and
    logits equal the dense reference (the run fails if loads are skipped or run before the offloads); the
    same run without the host cache computes more tokens."""
    rng = np.random.default_rng(5)
    families = [rng.integers(0, model.cfg.vocab, 32).tolist() for _ in range(3)]
    reqs = [Request(r, families[r % 3] + rng.integers(0, model.cfg.vocab, 3 + r).tolist(), 16, seed=1)
            for r in range(9)]
    computed = {}
    for host_cache in (True, False):
        cfg = EngineConfig(num_blocks=14, block_size=8, num_host_blocks=24, host_cache=host_cache, max_num_seqs=3,
                           max_batched_tokens=32, preemption=preemption, record_logits=True)
        eng = run_and_check(model, reqs, cfg)
        st = eng.mgr.stats()
        computed[host_cache] = st["computed_tokens"]
        if host_cache:
            assert st["host_hit_tokens"] > 0 and eng.metrics.loaded_blocks == st["loaded_blocks"] > 0
            assert eng.metrics.offloaded_blocks == st["offloaded_blocks"] > 0
            assert st["device_hit_tokens"] + st["host_hit_tokens"] == st["hit_tokens"]
            assert st["host_evictions"] > 0 and eng.metrics.preemptions + eng.metrics.swaps_out > 0
        else:
            assert st["host_hit_tokens"] == 0 and eng.metrics.offloaded_blocks == 0
    assert computed[True] < computed[False], computed


def test_host_cache_needs_host_blocks(model):
    with pytest.raises(ValueError, match="num_host_blocks"):
        Engine(model, EngineConfig(num_blocks=16, block_size=8, host_cache=True))


def test_command_line_host_cache():
    """python -m kvblock.engine --host-cache: prefix families that the device pool cannot hold all at once
    come back from the host (the report splits hits by tier)."""
    env = dict(os.environ, PYTHONPATH=str(Path(kvblock.__file__).resolve().parent.parent))
    args = ["--requests", "8", "--shared-prefix", "32", "--prefix-families", "4", "--prompt", "8", "--max-tokens", "2",
            "--num-blocks", "16", "--block-size", "8", "--host-blocks", "64", "--max-seqs", "2", "--layers", "1"]
    r = subprocess.run([sys.executable, "-m", "kvblock.engine", *args, "--host-cache"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    m = re.search(r"host cache: +(\d+) hit tokens on device, (\d+) on host; (\d+) blocks offloaded, (\d+) loaded",
                  r.stdout)
    assert m and int(m.group(2)) > 0 and int(m.group(4)) > 0, r.stdout
    r = subprocess.run([sys.executable, "-m", "kvblock.engine", *args[:-6], "--host-cache"], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode != 0 and "--host-cache needs --host-blocks" in r.stderr
