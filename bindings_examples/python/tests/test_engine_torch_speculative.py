"""Token-tree speculative decoding in the torch engine (CPU tensors; the library's CPU kernels): greedy outputs
with trees equal plain greedy decoding of the same engine, with prefix hits, chunked prefill, preemption
(recompute and swap), forks (n = 2) and the CUDA graphs' replay path (emulated) for the steps without trees;
a draft as deep as the target accepts every level. Without torch or safetensors these tests SKIP, visibly."""
from __future__ import annotations

import pytest

from test_engine_torch import _prompts as torch_prompts
from test_engine_torch import _run as run_torch_engine

try:
    import safetensors  # noqa: F401
    import torch  # noqa: F401
    HAVE_TORCH, WHY = True, ""
except Exception as e:  # ImportError, or a torch whose CUDA libraries are missing (OSError)
    HAVE_TORCH, WHY = False, f"torch or safetensors not importable ({type(e).__name__}: {e})"

pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason=f"SKIP torch engine speculation: {WHY}")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from kvblock.engine.checkpoint import write_tiny_checkpoint
    d, _ = write_tiny_checkpoint(str(tmp_path_factory.mktemp("spec") / "m"), "llama", num_layers=3, seed=11)
    return str(d)


def _prompts(vocab: int, n: int, shared: int, seed: int = 0) -> list:
    return torch_prompts(vocab, n, shared, seed, own=5, step=4)


def _run(model_dir: str, prompts: list, max_tokens: int, n: int = 1, cuda_graph: object = False,
         draft_dir: str = "", **cfg) -> tuple:
    out, eng = run_torch_engine(model_dir, prompts, max_tokens, n, cuda_graph, max_len=256, draft_dir=draft_dir, **cfg)
    eng.mgr.check_invariants()
    assert eng.mgr.stats()["used_blocks"] == 0
    return {i: [s.output for s in sorted(v, key=lambda s: s.index)] for i, v in out.items()}, eng


RUNS = {  # (shared prefix, max_tokens, engine config)
    "prefix hits, chunks": (20, 10, dict(num_blocks=96, block_size=8, max_batched_tokens=24)),
    "tiny pool, recompute": (8, 16, dict(num_blocks=14, block_size=4, max_num_seqs=4, max_batched_tokens=40)),
    "tiny pool, swap, n=2": (8, 16, dict(num_blocks=14, block_size=4, max_num_seqs=4, max_batched_tokens=40,
                                         num_host_blocks=64, preemption="swap", n=2)),
}


@pytest.mark.parametrize("draft_layers", [1, 3])
@pytest.mark.parametrize("name", list(RUNS))
def test_torch_tree_speculation_is_token_exact_with_plain_greedy(model_dir, name, draft_layers):
    shared, max_tokens, cfg = RUNS[name]
    cfg = dict(cfg)
    n = cfg.pop("n", 1)
    prompts = _prompts(512, 4, shared, seed=3)
    plain, _ = _run(model_dir, prompts, max_tokens, n=n, **cfg)
    spec, eng = _run(model_dir, prompts, max_tokens, n=n, speculative_tree=(3, 2), draft_layers=draft_layers, **cfg)
    assert spec == plain
    st = eng.speculator.stats
    assert st.verified > 0
    if draft_layers == 3:
        assert st.accepted == st.drafted and st.tokens_per_target_step > 2
    if "tiny" in name:  # and some trees found no room: those sequences decoded plainly in the same steps
        assert eng.metrics.preemptions + eng.metrics.swaps_out > 0 and st.fallbacks > 0
    assert eng.mgr.stats()["hit_tokens"] > 0


def test_torch_speculation_with_emulated_graphs(model_dir):
    """Steps without trees (here: a request's last token, which drafts nothing) replay the decode graphs."""
    prompts = _prompts(512, 3, 16, seed=4)
    plain, _ = _run(model_dir, prompts, 7, cuda_graph="emulate", num_blocks=64, block_size=8)
    spec, eng = _run(model_dir, prompts, 7, cuda_graph="emulate", num_blocks=64, block_size=8,
                     speculative_tree=(2, 2), draft_layers=2)
    assert spec == plain and eng.speculator.stats.verified > 0 and eng.runner.graph_replays > 0
