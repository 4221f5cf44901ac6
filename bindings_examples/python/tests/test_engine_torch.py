"""The torch engine on a Hugging Face format checkpoint written here (random weights): greedy generation is
token-exact against transformers in fp32, with prefix hits, chunked prefill, preemption (recompute and
swap), the host cache, fork (n > 1) and a sliding window in the runs. Without torch (or transformers for
the reference) these tests SKIP, visibly (CI installs both: tools/install_deps.sh)."""
from __future__ import annotations

import numpy as np
import pytest

from kvblock.engine.checkpoint import HFConfig

try:
    import torch
    HAVE_TORCH, WHY = True, ""
except Exception as e:  # ImportError, or a torch whose CUDA libraries are missing (OSError)
    HAVE_TORCH, WHY = False, f"torch not importable ({type(e).__name__}: {e})"
try:
    import safetensors  # noqa: F401
except ImportError as e:
    HAVE_TORCH, WHY = False, f"safetensors not importable ({e})"
try:
    import transformers  # noqa: F401
    HAVE_HF, WHY_HF = HAVE_TORCH, WHY
except Exception as e:
    HAVE_HF, WHY_HF = False, f"transformers not importable ({type(e).__name__}: {e})"

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason=f"SKIP torch engine: {WHY}")
needs_hf = pytest.mark.skipif(not HAVE_HF, reason=f"SKIP torch engine vs transformers: {WHY_HF}")


def test_config_reads_both_rope_layouts() -> None:
    base = dict(model_type="llama", vocab_size=100, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2)
    old = HFConfig.from_dict(dict(base, rope_theta=5e5, rope_scaling={"type": "linear", "factor": 2.0}))
    new = HFConfig.from_dict(dict(base, rope_parameters={"rope_theta": 5e5, "rope_type": "linear", "factor": 2.0}))
    assert old.rope_theta == new.rope_theta == 5e5
    assert old.rope_scaling["rope_type"] == new.rope_scaling["rope_type"] == "linear"
    assert (old.head_dim, old.num_kv_heads, old.qkv_bias) == (64, 2, False)
    assert HFConfig.from_dict(dict(base, model_type="qwen2")).qkv_bias
    assert HFConfig.from_dict(dict(base, model_type="mistral", sliding_window=32)).window == 32
    with pytest.raises(ValueError, match="model_type 'gpt2'"):
        HFConfig.from_dict(dict(base, model_type="gpt2"))
    with pytest.raises(ValueError, match="rope type 'yarn'"):
        HFConfig.from_dict(dict(base, rope_scaling={"rope_type": "yarn", "factor": 4.0}))


def _prompts(vocab: int, n: int, shared: int, seed: int = 0, own: int = 7, step: int = 5) -> list:
    """n prompts after one shared prefix of `shared` tokens, own + step * i tokens of their own each."""
    rng = np.random.default_rng(seed)
    prefix = rng.integers(0, vocab, shared).tolist()
    return [prefix + rng.integers(0, vocab, own + step * i).tolist() for i in range(n)]


def _check_greedy_against_hf(model_dir: object, prompts: list, out: dict, max_tokens: int) -> object:
    """Every request's first output is transformers' greedy continuation; returns the reference model."""
    from kvblock.engine.hf_reference import hf_greedy, load_hf
    hf = load_hf(str(model_dir), "cpu", "float32")
    for i, p in enumerate(prompts):
        assert out[i][0].output == hf_greedy(hf, p, max_tokens), f"request {i}"
    return hf


def _run(model_dir: str, prompts: list, max_tokens: int, n: int = 1, cuda_graph: object = True, max_len: int = 512,
         draft_dir: str = "", **cfg) -> tuple:
    """draft_dir: a separate draft model's checkpoint (test_engine_draft_model.py)."""
    from kvblock.engine import EngineConfig, Request
    from kvblock.engine.torch_engine import TorchEngine
    from kvblock.engine.torch_model import TorchModel

    def load(d: str) -> TorchModel:
        return TorchModel.from_pretrained(d, "cpu", "float32", max_len=max_len)
    eng = TorchEngine(load(model_dir), EngineConfig(**cfg), cuda_graph=cuda_graph,
                      draft_model=load(draft_dir) if draft_dir else None)
    for i, p in enumerate(prompts):
        eng.add_request(Request(i, p, max_tokens, n=n))
    return eng.run(), eng


@needs_hf
@pytest.mark.parametrize("arch,tied", [("llama", False), ("qwen2", True), ("mistral", False)])
def test_greedy_matches_transformers_with_hits_chunks_and_preemption(tmp_path, arch: str, tied: bool) -> None:
    from kvblock.engine.checkpoint import write_tiny_checkpoint
    d, cfg = write_tiny_checkpoint(str(tmp_path / arch), arch, tie_embeddings=tied, seed=3)
    prompts = _prompts(cfg.vocab, 6, 40)
    # 20 blocks of 8 tokens cannot hold 4 running sequences of ~70 tokens: decode runs out and preempts;
    # a 32-token budget chunks every prompt; the shared 40-token prefix is a prefix hit after the first.
    out, eng = _run(str(d), prompts, 14, num_blocks=20, block_size=8, max_num_seqs=4, max_batched_tokens=32)
    st = eng.mgr.stats()
    assert st["hit_tokens"] > 0 and eng.metrics.preemptions > 0
    assert eng.metrics.steps > sum(-(-len(p) // 32) for p in prompts) // 4  # chunked
    _check_greedy_against_hf(d, prompts, out, 14)


@needs_hf
def test_swap_host_cache_and_fork_match_transformers(tmp_path) -> None:
    from kvblock.engine.checkpoint import write_tiny_checkpoint
    from kvblock.engine.hf_reference import hf_greedy, load_hf
    d, cfg = write_tiny_checkpoint(str(tmp_path / "m"), "llama", seed=5)
    prompts = _prompts(cfg.vocab, 5, 24, seed=1)
    out, eng = _run(str(d), prompts, 12, n=2, num_blocks=24, block_size=8, max_num_seqs=6,
                    max_batched_tokens=48, num_host_blocks=64, preemption="swap")
    assert eng.metrics.swaps_out > 0 and eng.metrics.cow_copies > 0
    hf = load_hf(str(d), "cpu", "float32")
    for i, p in enumerate(prompts):
        ref = hf_greedy(hf, p, 12)
        assert [s.output for s in out[i]] == [ref, ref], f"request {i}"
    # The host cache: a device pool smaller than the prompts' prefixes, reloaded from host blocks.
    prompts = [_prompts(cfg.vocab, 1, 48, seed=10 + f)[0] for f in range(3)] * 2
    out, eng = _run(str(d), prompts, 6, num_blocks=16, block_size=8, max_num_seqs=1, max_batched_tokens=64,
                    num_host_blocks=64, host_cache=True)
    assert eng.metrics.loaded_blocks > 0
    for i, p in enumerate(prompts):
        assert out[i][0].output == hf_greedy(hf, p, 6), f"request {i}"


@needs_hf
def test_sampling_with_fork_matches_transformers(tmp_path) -> None:
    """n = 3 samples at temperature 1: each sample follows its own noise (seed, request, index, position)
    from the shared prompt, and equals transformers' logits put through the same sampler."""
    from kvblock.engine import EngineConfig, Request
    from kvblock.engine.checkpoint import write_tiny_checkpoint
    from kvblock.engine.hf_reference import hf_greedy, load_hf
    from kvblock.engine.torch_engine import TorchEngine
    from kvblock.engine.torch_model import TorchModel
    d, cfg = write_tiny_checkpoint(str(tmp_path / "s"), "llama", seed=4, logit_scale=1.0)
    prompts = _prompts(cfg.vocab, 2, 20, seed=7)
    eng = TorchEngine(TorchModel.from_pretrained(str(d), max_len=256),
                      EngineConfig(num_blocks=64, block_size=8, max_num_seqs=8), cuda_graph="emulate")
    for i, p in enumerate(prompts):
        eng.add_request(Request(i, p, 10, n=3, temperature=1.0, seed=11))
    out = eng.run()
    hf = load_hf(str(d), "cpu", "float32")
    for i, p in enumerate(prompts):
        got = sorted((s.index, s.output) for s in out[i])
        want = [(k, hf_greedy(hf, p, 10, 1.0, 11, i, k)) for k in range(3)]
        assert got == want, f"request {i}"
        assert len({tuple(o) for _, o in got}) > 1  # the samples differ


@needs_hf
def test_sliding_window_matches_transformers(tmp_path) -> None:
    import json

    from kvblock.engine.checkpoint import write_tiny_checkpoint
    d, _ = write_tiny_checkpoint(str(tmp_path / "w"), "mistral", seed=7)
    c = json.loads((d / "config.json").read_text())
    c["sliding_window"] = 16
    (d / "config.json").write_text(json.dumps(c))
    prompts = _prompts(c["vocab_size"], 3, 30, seed=2)
    out, eng = _run(str(d), prompts, 10, num_blocks=64, block_size=8, max_num_seqs=4, max_batched_tokens=24)
    _check_greedy_against_hf(d, prompts, out, 10)


@needs_hf
@pytest.mark.parametrize("window", [0, 16])
def test_graph_replay_path_matches_transformers(tmp_path, window: int) -> None:
    """The decode steps' graph path (static buffers padded to a bucket, padding rows with slot -1 and
    seq_len 0, only the used block-table columns copied), with replays run eagerly (cuda_graph="emulate"),
    through swap preemption and a sliding window."""
    import json

    from kvblock.engine.checkpoint import write_tiny_checkpoint
    d, cfg = write_tiny_checkpoint(str(tmp_path / "g"), "mistral", seed=9)
    c = json.loads((d / "config.json").read_text())
    c["sliding_window"] = window or None
    (d / "config.json").write_text(json.dumps(c))
    prompts = _prompts(cfg.vocab, 7, 24, seed=4)
    out, eng = _run(str(d), prompts, 12, cuda_graph="emulate", num_blocks=24, block_size=8, max_num_seqs=6,
                    max_batched_tokens=40, num_host_blocks=64, preemption="swap")
    assert eng.runner.graph_replays > 0 and (window or eng.metrics.swaps_out > 0)  # a window frees blocks
    _check_greedy_against_hf(d, prompts, out, 12)


@needs_hf
def test_qwen2_window_layers_run_as_two_groups(tmp_path) -> None:
    """Qwen2 with use_sliding_window: layers from max_window_layers on slide, the others attend fully. The
    engine serves them as two KV cache groups of one manager (the window group releases blocks)."""
    import json

    from kvblock.engine.checkpoint import load_config, write_tiny_checkpoint
    d, _ = write_tiny_checkpoint(str(tmp_path / "h"), "qwen2", num_layers=3, seed=8)
    c = json.loads((d / "config.json").read_text())
    c.update(use_sliding_window=True, sliding_window=16, max_window_layers=1)
    (d / "config.json").write_text(json.dumps(c))
    cfg = load_config(str(d))
    assert cfg.hybrid and cfg.window_layers == (1, 2) and cfg.layer_window(0) == (0, 0)
    prompts = _prompts(c["vocab_size"], 4, 30, seed=5)
    out, eng = _run(str(d), prompts, 12, num_blocks=48, block_size=8, max_num_seqs=3, max_batched_tokens=24)
    assert eng.groups is not None
    _check_greedy_against_hf(d, prompts, out, 12)


@needs_hf
@pytest.mark.parametrize("scaling", [{"rope_type": "linear", "factor": 4.0},
                                     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64}])
def test_rope_scaling_matches_transformers(tmp_path, scaling: dict) -> None:
    import json

    from kvblock.engine.checkpoint import write_tiny_checkpoint
    d, _ = write_tiny_checkpoint(str(tmp_path / "r"), "llama", num_layers=1, rope_theta=5e5, seed=2)
    c = json.loads((d / "config.json").read_text())
    c["rope_scaling"] = scaling
    (d / "config.json").write_text(json.dumps(c))
    prompts = _prompts(c["vocab_size"], 2, 90, seed=6)  # positions past the original 64
    out, _ = _run(str(d), prompts, 8, num_blocks=64, block_size=8, max_num_seqs=2, max_batched_tokens=128)
    _check_greedy_against_hf(d, prompts, out, 8)


@needs_torch
def test_engine_refuses_what_the_model_cannot_take(tmp_path) -> None:
    from kvblock.engine import EngineConfig, Request
    from kvblock.engine.checkpoint import write_tiny_checkpoint
    from kvblock.engine.torch_engine import TorchEngine
    from kvblock.engine.torch_model import TorchModel
    d, cfg = write_tiny_checkpoint(str(tmp_path / "m"), "llama", num_layers=1)
    eng = TorchEngine(TorchModel.from_pretrained(str(d), max_len=64), EngineConfig(num_blocks=16, block_size=8))
    with pytest.raises(ValueError, match="at most 64"):
        eng.add_request(Request(0, [1] * 60, 5))
    with pytest.raises(ValueError, match=f"token id {cfg.vocab}"):
        eng.add_request(Request(1, [cfg.vocab], 5))
    assert not eng.has_work()
    with pytest.raises(FileNotFoundError, match="config.json"):
        TorchModel.from_pretrained(str(tmp_path / "nothing"))


@needs_torch
@pytest.mark.skipif(not HAVE_TORCH or not torch.cuda.is_available(), reason="SKIP CUDA graphs: no CUDA device")
def test_cuda_graph_decode_matches_eager(tmp_path) -> None:
    from kvblock.engine import EngineConfig, Request
    from kvblock.engine.checkpoint import write_tiny_checkpoint
    from kvblock.engine.torch_engine import TorchEngine
    from kvblock.engine.torch_model import TorchModel
    d, cfg = write_tiny_checkpoint(str(tmp_path / "m"), "qwen2")
    prompts = _prompts(cfg.vocab, 12, 20)
    outs = []
    for graph in (False, True):
        eng = TorchEngine(TorchModel.from_pretrained(str(d), "cuda", "float32", max_len=256),
                          EngineConfig(num_blocks=256, block_size=16, max_num_seqs=8), cuda_graph=graph)
        for i, p in enumerate(prompts):
            eng.add_request(Request(i, p, 10))
        res = eng.run()
        assert (eng.runner.graph_replays > 0) == graph
        outs.append([res[i][0].output for i in range(len(prompts))])
    assert outs[0] == outs[1]


@needs_torch
def test_cli_serves_text_and_ids(tmp_path) -> None:
    """python -m kvblock.engine --model DIR: a text prompt (through tokenizer.json) and the same prompt as
    ids give the same tokens; the text comes back decoded."""
    import os
    import subprocess
    import sys
    tokenizers = pytest.importorskip("tokenizers", reason="SKIP --text: the tokenizers package is missing")
    from kvblock.engine.checkpoint import write_tiny_checkpoint
    d, cfg = write_tiny_checkpoint(str(tmp_path / "m"), "qwen2", num_layers=1)
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"w{i}": i for i in range(cfg.vocab)}, unk_token="w0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(d / "tokenizer.json"))
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=pkg + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "kvblock.engine", "--model", str(d), "--text", "w5 w9 w300 w7",
                        "--ids", "5,9,300,7", "--max-tokens", "6", "--device", "cpu", "--num-blocks", "64"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    ids = [line.split("ids ")[1] for line in r.stdout.splitlines() if line.startswith("request ")]
    assert len(ids) == 2 and ids[0] == ids[1], r.stdout
    texts = [line for line in r.stdout.splitlines() if line.strip().startswith("text: 'w")]
    assert len(texts) == 2, r.stdout
    r = subprocess.run([sys.executable, "-m", "kvblock.engine", "--model", str(tmp_path / "none"), "--ids", "1"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode != 0 and "config.json" in r.stderr


def test_graph_buckets_cover_every_batch_size() -> None:
    if not HAVE_TORCH:
        pytest.skip(f"SKIP graph buckets: {WHY}")
    from kvblock.engine.runner import graph_buckets
    assert graph_buckets(64) == [1, 2, 4, 8, 16, 32, 48, 64]
    assert graph_buckets(5) == [1, 2, 4, 5]
    for n in (1, 3, 17, 100):
        b = graph_buckets(n)
        assert b[-1] == n and all(any(x >= k for x in b) for k in range(1, n + 1))
