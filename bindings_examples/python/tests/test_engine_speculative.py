"""Token-tree speculative decoding in the numpy engine (engine/speculative.py, engine/draft.py): greedy outputs
with trees are token-exact with plain greedy decoding of the same engine and with the dense reference, with
prefix hits, chunked prefill, preemption (recompute and swap, a tiny pool), the host cache, forks (n = 2) and
sampled requests (which decode plainly) in the runs; a draft as deep as the target accepts every level, a
shallow one rejects some; the prefix cache's STORED events and block hashes equal those of plain decoding (no
rejected token is ever hashed); the draft tree's expansion and acceptance; what is refused."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kvblock
from kvblock.engine import engine as engine_module
from kvblock.engine.draft import DraftTree, accept
from kvblock.engine.engine import Engine, EngineConfig
from kvblock.engine.model import Model, ModelConfig, reference_generate
from kvblock.engine.sequence import Request


def requests(vocab, count=5, prefix=24, seed=1, n=1, max_tokens=9, temperature=0.0):
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, vocab, prefix).tolist()
    return [Request(r, shared[: prefix - 8 * (r % 2)] + rng.integers(0, vocab, 3 + 4 * r).tolist(), max_tokens, n=n,
                    temperature=temperature if r % 2 else 0.0, seed=seed) for r in range(count)]


def run(model, reqs, draft_model=None, **cfg):
    eng = Engine(model, EngineConfig(**cfg), draft_model)
    for r in reqs:
        eng.add_request(r)
    out = eng.run()
    eng.mgr.check_invariants()
    st = eng.mgr.stats()
    assert st["used_blocks"] == 0 and st["num_seqs"] == 0
    return {i: [s.output for s in sorted(v, key=lambda s: s.index)] for i, v in out.items()}, eng


@pytest.fixture(scope="module")
def model():
    return Model(ModelConfig(num_layers=3, seed=7))


RUNS = {  # (shared prefix, max_tokens, engine config)
    "large pool, prefix hits, chunks": (24, 9, dict(num_blocks=128, block_size=8, max_batched_tokens=24)),
    "tiny pool, recompute": (8, 16, dict(num_blocks=16, block_size=4, max_num_seqs=4, max_batched_tokens=40)),
    "tiny pool, swap": (8, 16, dict(num_blocks=16, block_size=4, max_num_seqs=4, max_batched_tokens=40,
                                    num_host_blocks=64, preemption="swap")),
    # a tree's blocks evicted from the prefix cache are offloaded before a draft or verify pass writes them
    "tiny pool, host cache": (8, 16, dict(num_blocks=16, block_size=4, max_num_seqs=4, max_batched_tokens=40,
                                          num_host_blocks=32, host_cache=True)),
}


@pytest.mark.parametrize("draft_layers", [1, 3])
@pytest.mark.parametrize("name", list(RUNS))
def test_tree_speculation_is_token_exact_with_plain_greedy(model, name, draft_layers):
    prefix, max_tokens, cfg = RUNS[name]
    # odd requests sample (temperature 0.8): they decode plainly, in the same steps as the trees
    reqs = requests(model.cfg.vocab, prefix=prefix, max_tokens=max_tokens, temperature=0.8)
    plain, plain_eng = run(model, reqs, **cfg)
    spec, eng = run(model, reqs, speculative_tree=(3, 2), draft_layers=draft_layers, **cfg)
    assert spec == plain
    for r in reqs[::2]:  # greedy requests against the dense reference too
        assert spec[r.req_id][0] == reference_generate(model, r.prompt, r.max_tokens)[0], f"request {r.req_id}"
    st = eng.speculator.stats
    assert st.verified > 0 and st.emitted == st.accepted + st.verified
    if draft_layers == 3:  # the draft is the target: every drafted level is accepted
        assert st.accepted == st.drafted and st.tokens_per_target_step > 2
    else:
        assert st.accepted < st.drafted
    assert eng.metrics.steps < plain_eng.metrics.steps
    assert eng.mgr.stats()["hit_tokens"] > 0
    if "tiny" in name:  # and some trees found no room: those sequences decoded plainly in the same steps
        assert eng.metrics.preemptions + eng.metrics.swaps_out > 0 and st.fallbacks > 0
    if "host cache" in name:
        assert eng.metrics.offloaded_blocks > 0 and eng.metrics.loaded_blocks > 0


@pytest.mark.parametrize("draft_layers", [1, 3])
def test_forks_speculate_after_copy_on_write(model, draft_layers):
    """n = 2 greedy samples fork after the prompt and share its partial last block until each copies it."""
    reqs = [Request(i, r.prompt, 8, n=2) for i, r in enumerate(requests(model.cfg.vocab, count=3))]
    plain, _ = run(model, reqs, num_blocks=64, block_size=8)
    spec, eng = run(model, reqs, num_blocks=64, block_size=8, speculative_tree=(2, 3), draft_layers=draft_layers)
    assert spec == plain and all(a == b for a, b in plain.values())
    assert eng.metrics.cow_copies > 0 and eng.speculator.stats.verified > 0


def test_prefix_cache_never_sees_a_rejected_token(model, monkeypatch):
    """The manager's STORED events (hash, parent, tokens) and the cached blocks' hashes after a run with trees
    (a one-layer draft: many rejected nodes, several of them in full blocks) equal those of plain decoding."""
    class EventsManager(kvblock.Manager):
        def __init__(self, *a, **kw):
            kw["events"] = True
            super().__init__(*a, **kw)

    monkeypatch.setattr(engine_module, "Manager", EventsManager)

    def stored(**spec):
        eng = Engine(model, EngineConfig(num_blocks=256, block_size=4, **spec))
        for r in requests(model.cfg.vocab, max_tokens=14):
            eng.add_request(r)
        events = []
        while eng.has_work():
            eng.step()
            evs, dropped = eng.mgr.drain_events()
            assert dropped == 0
            events += evs
        assert all(e.type == "stored" for e in events)  # the pool never evicts
        hashes = sorted(h for h in (eng.mgr.block_hash(b) for b in range(256)) if h is not None)
        return sorted((e.block_hash, e.parent_hash, tuple(e.tokens)) for e in events), hashes, eng

    plain_events, plain_hashes, _ = stored()
    spec_events, spec_hashes, eng = stored(speculative_tree=(4, 3), draft_layers=1)
    assert eng.speculator.stats.accepted < eng.speculator.stats.drafted - 10
    assert spec_events == plain_events and len(plain_events) > 20
    assert spec_hashes == plain_hashes


def test_draft_tree_expands_the_likeliest_paths_and_accepts_the_targets_choice():
    t = DraftTree.root(5, depth=2)
    logp = np.log(np.array([[0.5, 0.3, 0.2, 0.0]]) + 1e-12)
    t.expand(logp, 2)  # the root's two likeliest: tokens 0 (0.5) and 1 (0.3)
    assert (t.tokens, t.parents, t.frontier) == ([5, 0, 1], [-1, 0, 0], [1, 2])
    # Under token 0 (the greedy chain): 2 (0.4), 3 (0.35); under token 1: 3 (0.9). The chain's greedy child
    # (0.5 * 0.4) comes first, then the likeliest other path (0.3 * 0.9 > 0.5 * 0.35).
    t.expand(np.log(np.array([[0.1, 0.15, 0.4, 0.35], [0.05, 0.03, 0.02, 0.9]]) + 1e-12), 2)
    assert (t.tokens, t.parents, t.frontier) == ([5, 0, 1, 2, 3], [-1, 0, 0, 1, 2], [3, 4])
    t.expand(np.log(np.array([[0.1, 0.2, 0.3, 0.4], [0.9, 0.05, 0.03, 0.02]]) + 1e-12), 2)
    assert (t.tokens[5:], t.parents[5:], t.frontier) == ([3, 0], [3, 4], [5, 6])
    # Target: after the root 1, after node 2 (token 1) 3, after node 4 (token 3) 0: the whole right path.
    assert accept(t, [1, 9, 3, 7, 0, 9, 9]) == [0, 2, 4, 6]
    assert accept(t, [0, 2, 9, 1, 9, 9, 9]) == [0, 1, 3]  # node 3's children: none with token 1
    assert accept(t, [4, 0, 0, 0, 0, 0, 0]) == [0]


def test_what_speculation_refuses(model):
    with pytest.raises(ValueError, match="1 \\+ depth \\* width <= 64"):
        Engine(model, EngineConfig(speculative_tree=(8, 8)))
    with pytest.raises(ValueError, match="draft_layers must be in \\[1, 3\\]"):
        Engine(model, EngineConfig(speculative_tree=(2, 2), draft_layers=4))
    with pytest.raises(ValueError, match="sliding-window"):
        Engine(Model(ModelConfig(num_layers=1, window=16)), EngineConfig(speculative_tree=(2, 2)))


def test_command_line_prints_acceptance():
    env = dict(os.environ, PYTHONPATH=str(Path(kvblock.__file__).resolve().parent.parent))
    args = ["--requests", "3", "--shared-prefix", "16", "--prompt", "8", "--max-tokens", "8", "--num-blocks", "64",
            "--block-size", "8", "--layers", "2", "--speculative-tree", "3x2", "--draft-layers", "2"]
    r = subprocess.run([sys.executable, "-m", "kvblock.engine", *args], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    m = re.search(r"acceptance rate ([0-9.]+) .*, ([0-9.]+) tokens per target step", r.stdout)
    assert m and float(m.group(1)) == 1.0 and float(m.group(2)) > 2, r.stdout
    r = subprocess.run([sys.executable, "-m", "kvblock.engine", *args[:-4], "--speculative-tree", "9x9"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode != 0 and "DEPTHxWIDTH" in r.stderr
