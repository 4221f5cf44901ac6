"""Token-tree speculation with a separate draft model (Engine's draft_model, `--draft-model DIR`): a draft of
its own shape on its own KV cache over the target's manager. Greedy outputs are token-exact with plain greedy
decoding (numpy engine: prefix hits, chunks, preemption by recompute and by swap, the host cache, forks; torch
engine on two random tiny checkpoints likewise); a draft with the target's weights accepts every level, which
holds only if the draft's cache has the right K/V after every prefix hit, swap, host-cache load,
copy-on-write and slot copy; a smaller draft rejects some. Refused: another vocabulary (size, or with
tokenizers another token map), a draft beside draft_layers, a store; the command line's flags."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kvblock
from kvblock.engine.engine import Engine, EngineConfig
from kvblock.engine.model import Model, ModelConfig, reference_generate
from kvblock.engine.sequence import Request
from kvblock.engine.speculative import draft_vocab_error
from test_engine_speculative import RUNS, requests, run
from test_engine_torch_speculative import RUNS as TORCH_RUNS
from test_engine_torch_speculative import _prompts, _run

try:
    import safetensors  # noqa: F401
    import torch  # noqa: F401
    HAVE_TORCH, WHY = True, ""
except Exception as e:  # ImportError, or a torch whose CUDA libraries are missing (OSError)
    HAVE_TORCH, WHY = False, f"torch or safetensors not importable ({type(e).__name__}: {e})"
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason=f"SKIP torch engine draft model: {WHY}")

TARGET = ModelConfig(num_layers=3, seed=7)
DRAFTS = {  # the target's weights (another object, another cache); a smaller model of other shapes
    "same weights": TARGET,
    "small": ModelConfig(num_layers=1, num_q_heads=2, num_kv_heads=1, ffn=128, seed=5),
}


@pytest.fixture(scope="module")
def model():
    return Model(TARGET)


@pytest.mark.parametrize("draft", list(DRAFTS))
@pytest.mark.parametrize("name", list(RUNS))
def test_draft_model_is_token_exact_with_plain_greedy(model, name, draft):
    prefix, max_tokens, cfg = RUNS[name]
    reqs = requests(model.cfg.vocab, prefix=prefix, max_tokens=max_tokens, temperature=0.8)
    plain, plain_eng = run(model, reqs, **cfg)
    spec, eng = run(model, reqs, Model(DRAFTS[draft]), speculative_tree=(3, 2), **cfg)
    assert spec == plain
    for r in reqs[::2]:
        assert spec[r.req_id][0] == reference_generate(model, r.prompt, r.max_tokens)[0], f"request {r.req_id}"
    st = eng.speculator.stats
    assert st.verified > 0 and st.emitted == st.accepted + st.verified
    assert eng.speculator.draft_cache is not None and eng.speculator.draft_cache.num_layers == DRAFTS[draft].num_layers
    if draft == "same weights":  # every draft K/V right: every drafted level accepted
        assert st.accepted == st.drafted and st.tokens_per_target_step > 2
        assert eng.metrics.steps < plain_eng.metrics.steps
    else:
        assert st.accepted < st.drafted
    assert eng.mgr.stats()["hit_tokens"] > 0
    if "tiny" in name:
        assert eng.metrics.preemptions + eng.metrics.swaps_out > 0 and st.fallbacks > 0
    if "host cache" in name:
        assert eng.metrics.loaded_blocks > 0


def test_draft_model_forks_after_copy_on_write(model):
    reqs = [Request(i, r.prompt, 8, n=2) for i, r in enumerate(requests(model.cfg.vocab, count=3))]
    plain, _ = run(model, reqs, num_blocks=64, block_size=8)
    spec, eng = run(model, reqs, Model(TARGET), num_blocks=64, block_size=8, speculative_tree=(2, 3))
    st = eng.speculator.stats
    assert spec == plain and eng.metrics.cow_copies > 0 and st.verified > 0 and st.accepted == st.drafted


def test_draft_model_refusals(model):
    with pytest.raises(ValueError, match=r"vocabulary \(256 tokens\) is not the target's \(512 tokens\)"):
        Engine(model, EngineConfig(speculative_tree=(2, 2)), Model(ModelConfig(vocab=256, num_layers=1)))
    with pytest.raises(ValueError, match="draft_layers 1 and a draft model"):
        Engine(model, EngineConfig(speculative_tree=(2, 2), draft_layers=1), Model(ModelConfig(num_layers=1)))
    with pytest.raises(ValueError, match="store 'memory:' with a draft model"):
        Engine(model, EngineConfig(speculative_tree=(2, 2), num_host_blocks=8, host_cache=True, store="memory:"),
               Model(ModelConfig(num_layers=1)))
    with pytest.raises(ValueError, match="without speculative_tree"):
        Engine(model, EngineConfig(), Model(ModelConfig(num_layers=1)))
    with pytest.raises(ValueError, match="sliding-window draft"):
        Engine(model, EngineConfig(speculative_tree=(2, 2)), Model(ModelConfig(num_layers=1, window=8)))


def _write_tokenizer(d: Path, order: list) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    Tokenizer(WordLevel({f"w{t}": i for i, t in enumerate(order)}, unk_token="w0")).save(str(d / "tokenizer.json"))


def test_tokenizer_mismatch_is_named(tmp_path, model):
    pytest.importorskip("tokenizers")
    a, b, c = (tmp_path / x for x in "abc")
    for d in (a, b, c):
        d.mkdir()
    _write_tokenizer(a, list(range(512)))
    _write_tokenizer(b, list(range(512)))
    _write_tokenizer(c, [1, 0] + list(range(2, 512)))
    draft = Model(ModelConfig(num_layers=1))
    assert draft_vocab_error(model, draft, str(a), str(b)) is None
    why = draft_vocab_error(model, draft, str(a), str(c))
    assert why is not None and "tokenizer" in why and str(c) in why and str(a) in why
    assert draft_vocab_error(model, draft, str(a), str(tmp_path)) is None  # a draft without a tokenizer: sizes only


# -- torch engine ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    if not HAVE_TORCH:
        pytest.skip(f"SKIP torch engine draft model: {WHY}")
    from kvblock.engine.checkpoint import write_tiny_checkpoint
    root = tmp_path_factory.mktemp("draft")
    target, _ = write_tiny_checkpoint(str(root / "target"), "llama", num_layers=3, seed=11)
    same, _ = write_tiny_checkpoint(str(root / "same"), "llama", num_layers=3, seed=11)
    small, _ = write_tiny_checkpoint(str(root / "small"), "llama", hidden=128, ffn=128, num_layers=1,
                                     num_q_heads=2, num_kv_heads=1, seed=5)
    other, _ = write_tiny_checkpoint(str(root / "other"), "llama", vocab=300, num_layers=1, seed=5)
    return {k: str(v) for k, v in dict(target=target, same=same, small=small, other=other).items()}


@needs_torch
@pytest.mark.parametrize("draft,name", [("small", n) for n in TORCH_RUNS] + [("same", "tiny pool, swap, n=2")])
def test_torch_draft_model_is_token_exact_with_plain_greedy(checkpoints, draft, name):
    shared, max_tokens, cfg = TORCH_RUNS[name]
    cfg = dict(cfg)
    n = cfg.pop("n", 1)
    prompts = _prompts(512, 4, shared, seed=3)
    plain, _ = _run(checkpoints["target"], prompts, max_tokens, n=n, **cfg)
    spec, eng = _run(checkpoints["target"], prompts, max_tokens, n=n, draft_dir=checkpoints[draft],
                     speculative_tree=(3, 2), **cfg)
    assert spec == plain
    st = eng.speculator.stats
    assert st.verified > 0 and eng.mgr.stats()["hit_tokens"] > 0
    if draft == "same":
        assert st.accepted == st.drafted and st.tokens_per_target_step > 2
    else:
        assert st.accepted < st.drafted
    if "tiny" in name:
        assert eng.metrics.preemptions + eng.metrics.swaps_out > 0


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=str(Path(kvblock.__file__).resolve().parent.parent))
    return subprocess.run([sys.executable, "-m", "kvblock.engine", *args], capture_output=True, text=True, env=env,
                          timeout=300)


@needs_torch
def test_command_line_draft_model(checkpoints):
    base = ["--model", checkpoints["target"], "--device", "cpu", "--ids", "1,2,3,4,5,6,7,8,9", "--max-tokens", "8",
            "--num-blocks", "32", "--block-size", "8", "--speculative-tree", "3x2"]
    r = _cli(*base, "--draft-model", checkpoints["same"])
    assert r.returncode == 0, r.stderr
    m = re.search(r"drafted by a 3-layer draft model: acceptance rate ([0-9.]+) .*, ([0-9.]+) tokens per target step",
                  r.stdout)
    assert m and float(m.group(1)) == 1.0 and float(m.group(2)) > 2, r.stdout
    plain = _cli(*base[:-2])
    assert plain.returncode == 0, plain.stderr
    ids = re.search(r"request 0 sample 0: ids (\[.*?\])", r.stdout)
    assert ids and ids.group(1) in plain.stdout, (r.stdout, plain.stdout)
    r = _cli(*base, "--draft-model", checkpoints["other"])
    assert r.returncode == 2 and "vocabulary (300 tokens) is not the target's (512 tokens)" in r.stderr, r.stderr
    r = _cli(*base, "--draft-model", checkpoints["small"], "--draft-layers", "1")
    assert r.returncode == 2 and "not allowed with argument" in r.stderr, r.stderr
    r = _cli(*base[:-2], "--draft-model", checkpoints["small"])
    assert r.returncode == 2 and "--speculative-tree" in r.stderr, r.stderr
    r = _cli("--requests", "1", "--speculative-tree", "2x2", "--draft-model", checkpoints["small"])
    assert r.returncode == 2 and "torch engine" in r.stderr, r.stderr
