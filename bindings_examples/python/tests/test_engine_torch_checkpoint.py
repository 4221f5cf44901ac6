"""Checkpoints the torch engine must serve as transformers does, or refuse at load with a CheckpointError
that names the file, the key or tensor, and what was expected: Llama's attention and MLP biases and
transformers' common activations served token-exact; other architectures, an untied checkpoint without
lm_head, unknown activations, RoPE variants and quantized weights refused by name; wrong tensor shapes or
dtypes, missing config keys and factors, unreadable files and missing shards refused before the first step,
and the CLI reporting each as one line with exit status 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import pytest

from kvblock.engine.checkpoint import HFConfig
from kvblock.engine.checkpoint_check import ACTIVATIONS, CheckpointError
from test_engine_torch import HAVE_HF, _prompts, _run, needs_hf, needs_torch

BASE = dict(model_type="llama", vocab_size=100, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2)


def _tiny(tmp_path: Path, arch: str = "llama", **kw: Any) -> Path:
    from kvblock.engine.checkpoint import write_tiny_checkpoint
    d, _ = write_tiny_checkpoint(str(tmp_path / "m"), arch, num_layers=2, seed=11, **kw)
    return d


def _edit(d: Path, config: Optional[Callable[[Dict[str, Any]], None]] = None,
          tensors: Optional[Callable[[Dict[str, Any]], None]] = None) -> None:
    if config is not None:
        c = json.loads((d / "config.json").read_text())
        config(c)
        (d / "config.json").write_text(json.dumps(c))
    if tensors is not None:
        from safetensors.torch import load_file, save_file
        t = load_file(str(d / "model.safetensors"))
        tensors(t)
        save_file({k: v.contiguous() for k, v in t.items()}, str(d / "model.safetensors"))


def _shard(d: Path) -> None:
    """model.safetensors split into two shards and model.safetensors.index.json, as transformers writes them."""
    from safetensors.torch import load_file, save_file
    t = load_file(str(d / "model.safetensors"))
    (d / "model.safetensors").unlink()
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    parts: Dict[str, Dict[str, Any]] = {n: {} for n in names}
    for k, v in t.items():
        parts[names[1] if k.startswith("model.layers.1.") or k == "lm_head.weight" else names[0]][k] = v
    for n, p in parts.items():
        save_file(p, str(d / n), metadata={"format": "pt"})
    weight_map = {k: n for n, p in parts.items() for k in p}
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def _hf_exact(d: Path, prompts: list, max_tokens: int) -> None:
    from kvblock.engine.hf_reference import hf_greedy, load_hf
    out, _ = _run(str(d), prompts, max_tokens, num_blocks=48, block_size=8, max_num_seqs=3, max_batched_tokens=24)
    hf = load_hf(str(d), "cpu", "float32")
    for i, p in enumerate(prompts):
        assert out[i][0].output == hf_greedy(hf, p, max_tokens), f"request {i}"


# --- served as transformers serves them ------------------------------------------------------------------------

@needs_hf
@pytest.mark.parametrize("flags", [dict(attention_bias=True), dict(mlp_bias=True),
                                   dict(attention_bias=True, mlp_bias=True)])
def test_llama_biases_match_transformers(tmp_path, flags: dict) -> None:
    d = _tiny(tmp_path, **flags)
    _hf_exact(d, _prompts(512, 3, 20, seed=3), 10)


@needs_hf
@pytest.mark.parametrize("act", [a for a in ACTIVATIONS if a != "silu"])
def test_activations_match_transformers(tmp_path, act: str) -> None:
    d = _tiny(tmp_path, hidden_act=act)
    _hf_exact(d, _prompts(512, 2, 16, seed=4), 8)


@needs_hf
def test_activation_functions_equal_transformers() -> None:
    """Bit for bit on fp32 and bf16 values over the range where variants differ (greedy tokens alone may not
    tell gelu from its tanh approximations)."""
    import torch
    from transformers.activations import ACT2FN

    from kvblock.engine.torch_model import ACTIVATION_FNS
    x = torch.linspace(-8, 8, 20001)
    for dtype in (torch.float32, torch.bfloat16):
        for name, fn in ACTIVATION_FNS.items():
            assert torch.equal(fn(x.to(dtype)), ACT2FN[name](x.to(dtype))), (name, dtype)
    assert not torch.equal(ACTIVATION_FNS["gelu"](x), ACTIVATION_FNS["gelu_new"](x))


@needs_hf
def test_sharded_checkpoint_reads_its_index(tmp_path) -> None:
    d = _tiny(tmp_path, "qwen2")
    _shard(d)
    _hf_exact(d, _prompts(512, 2, 16, seed=5), 6)


def test_config_defaults_follow_transformers() -> None:
    """Keys a config.json leaves out take the family's transformers default, not one default for all."""
    m = HFConfig.from_dict(dict(BASE, model_type="mistral", num_key_value_heads=None))
    assert m.window == 4096 and m.num_kv_heads == 4  # sliding_window absent: Mistral's 4096; None: the q heads
    bare = {k: v for k, v in BASE.items() if k != "num_key_value_heads"}
    assert HFConfig.from_dict(dict(bare, model_type="mistral", num_attention_heads=8)).num_kv_heads == 8
    assert HFConfig.from_dict(dict(bare, model_type="qwen2", num_attention_heads=32)).num_kv_heads == 32
    assert HFConfig.from_dict(dict(BASE, model_type="qwen2")).window == 0  # no use_sliding_window
    assert HFConfig.from_dict(bare).num_kv_heads == 4 and HFConfig.from_dict(bare).max_positions == 2048
    ll3 = HFConfig.from_dict(dict(BASE, max_position_embeddings=8192, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}))
    assert ll3.rope_scaling["original_max_position_embeddings"] == 8192  # absent: max_position_embeddings
    # Only Llama reads attention_bias / mlp_bias; Qwen2 has q, k, v biases whatever it says.
    for mt in ("qwen2", "mistral"):
        c = HFConfig.from_dict(dict(BASE, model_type=mt, attention_bias=True, mlp_bias=True))
        assert (c.qkv_bias, c.o_bias, c.mlp_bias) == (mt == "qwen2", False, False)
    if HAVE_HF:
        from transformers import AutoConfig
        for mt, kw in (("mistral", dict(num_attention_heads=8)), ("qwen2", dict(num_attention_heads=32))):
            hf = AutoConfig.for_model(**dict(bare, model_type=mt, **kw))
            ours = HFConfig.from_dict(dict(bare, model_type=mt, **kw))
            assert ours.num_kv_heads == hf.num_key_value_heads
            assert ours.window == (hf.sliding_window or 0)


# --- refused by name before the first step ---------------------------------------------------------------------

def _set(**kv: Any) -> Callable[[Dict[str, Any]], None]:
    return lambda c: c.update(kv)


def _drop(key: str) -> Callable[[Dict[str, Any]], None]:
    return lambda c: c.pop(key)


def _resize(name: str, rows: Optional[int] = None, cols: Optional[int] = None) -> Callable[[Dict[str, Any]], None]:
    def f(t: Dict[str, Any]) -> None:
        x = t[name]
        t[name] = x[:rows] if cols is None else x[:, :cols]
    return f


def _retype(name: str) -> Callable[[Dict[str, Any]], None]:
    def f(t: Dict[str, Any]) -> None:
        import torch
        t[name] = t[name].to(torch.float8_e4m3fn)
    return f


def _drop_tensor(name: str) -> Callable[[Dict[str, Any]], None]:
    return lambda t: t.pop(name)


def _overwrite(d: Path, keep: Optional[int]) -> None:
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[:keep] if keep is not None else b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")


L1 = "model.layers.1."
# (case, config edit, tensor edit, file edit, words the message must contain)
REFUSALS = [
    ("sequence classification", _set(architectures=["LlamaForSequenceClassification"]), None, None,
     ["config.json", "architectures", "LlamaForSequenceClassification"]),
    ("untied without lm_head", None, _drop_tensor("lm_head.weight"), None,
     ["'lm_head.weight' is missing", "tie_word_embeddings"]),
    ("unknown activation", _set(hidden_act="xielu"), None, None, ["config.json", "hidden_act 'xielu'"]),
    ("yarn rope", _set(rope_scaling={"rope_type": "yarn", "factor": 4.0}), None, None, ["rope type 'yarn'"]),
    ("dynamic rope", _set(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), None, None, ["rope type 'dynamic'"]),
    ("partial rotary", _set(partial_rotary_factor=0.5), None, None, ["partial_rotary_factor 0.5"]),
    ("per-layer rope", _set(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e4}}),
     None, None, ["per-layer-type", "full_attention"]),
    ("quantized", _set(quantization_config={"quant_method": "fp8"}), None, None, ["quantization_config", "'fp8'"]),
    ("k_proj rows", None, _resize(L1 + "self_attn.k_proj.weight", rows=96), None,
     ["model.safetensors", L1 + "self_attn.k_proj.weight", "[96, 256]", "expected [128, 256]",
      "num_key_value_heads 2 x head_dim 64"]),
    ("down_proj columns", None, _resize(L1 + "mlp.down_proj.weight", cols=200), None,
     [L1 + "mlp.down_proj.weight", "[256, 200]", "expected [256, 256]", "intermediate_size 256"]),
    ("norm size", None, _resize("model.layers.0.post_attention_layernorm.weight", rows=255), None,
     ["post_attention_layernorm.weight", "[255]", "expected [256]"]),
    ("embedding below vocab", None, _resize("model.embed_tokens.weight", rows=500), None,
     ["model.embed_tokens.weight", "[500, 256]", "expected [512, 256]", "vocab_size 512"]),
    ("heads vs kv heads", _set(num_key_value_heads=3), None, None,
     ["config.json", "num_attention_heads 4 is not a multiple of num_key_value_heads 3"]),
    ("head_dim vs weights", _set(head_dim=32), None, None,
     ["model.layers.0.self_attn.q_proj.weight", "[256, 256]", "expected [128, 256]", "head_dim 32"]),
    ("missing hidden_size", _drop("hidden_size"), None, None, ["config.json", "'hidden_size' is missing"]),
    ("missing vocab_size", _drop("vocab_size"), None, None, ["config.json", "'vocab_size' is missing"]),
    ("llama3 without factors", _set(rope_scaling={"rope_type": "llama3", "factor": 8.0}), None, None,
     ["config.json", "'llama3' needs 'low_freq_factor'"]),
    ("linear without factor", _set(rope_scaling={"rope_type": "linear"}), None, None,
     ["config.json", "'linear' needs 'factor'"]),
    ("fp8 weight", None, _retype(L1 + "mlp.up_proj.weight"), None,
     [L1 + "mlp.up_proj.weight", "dtype F8_E4M3", "floating-point"]),
    ("corrupted file", None, None, None, ["model.safetensors", "not a readable safetensors file"]),
    ("truncated file", None, None, -100, ["model.safetensors", "not a readable safetensors file"]),
]


@needs_torch
@pytest.mark.parametrize("case,config,tensors,keep,words", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_checkpoint_refused_at_load_naming_what(tmp_path, case: str, config, tensors, keep, words: list) -> None:
    from kvblock.engine.torch_model import TorchModel
    d = _tiny(tmp_path)
    _edit(d, config, tensors)
    if case in ("corrupted file", "truncated file"):
        _overwrite(d, keep)
    with pytest.raises(CheckpointError) as err:
        TorchModel.from_pretrained(str(d), "cpu", "float32", max_len=256)
    for w in words:
        assert w in str(err.value), f"{w!r} not in {str(err.value)!r}"


@needs_torch
def test_missing_shard_is_named(tmp_path) -> None:
    from kvblock.engine.torch_model import TorchModel
    d = _tiny(tmp_path)
    _shard(d)
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model\.safetensors\.index\.json: shard "
                                              r"'model-00002-of-00002\.safetensors' is missing"):
        TorchModel.from_pretrained(str(d), "cpu", "float32", max_len=256)


@needs_torch
def test_weights_in_memory_are_checked(tmp_path) -> None:
    import torch

    from kvblock.engine.checkpoint import load_config, load_weights
    from kvblock.engine.torch_model import TorchModel
    d = _tiny(tmp_path)
    cfg = load_config(str(d))
    w = load_weights(str(d), "cpu", torch.float32)
    w["model.norm.weight"] = w["model.norm.weight"][:10]
    with pytest.raises(CheckpointError, match=r"weights: tensor 'model.norm.weight' has shape \[10\], "
                                              r"expected \[256\]"):
        TorchModel(cfg, w)


@needs_torch
@pytest.mark.parametrize("case", ["k_proj rows", "missing hidden_size", "corrupted file", "sequence classification"])
def test_cli_reports_a_bad_checkpoint_in_one_line(tmp_path, case: str) -> None:
    _, config, tensors, keep, words = next(r for r in REFUSALS if r[0] == case)
    d = _tiny(tmp_path)
    _edit(d, config, tensors)
    if case == "corrupted file":
        _overwrite(d, keep)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=pkg + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "kvblock.engine", "--model", str(d), "--ids", "1,2,3", "--device",
                        "cpu"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("python -m kvblock.engine: error: ") and all(w in r.stderr for w in words), r.stderr
