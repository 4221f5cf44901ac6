"""Hugging Face format checkpoints from a local directory (config.json, *.safetensors, optional tokenizer.json):
Llama, Qwen2 and Mistral decoders. Nothing is ever downloaded. `write_tiny_checkpoint` writes a small one with
random weights (tests and the GPU check make their own model this way)."""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .checkpoint_check import (
    ARCHITECTURES,
    FAMILY_DEFAULTS,
    CheckpointError,
    ConfigReader,
    check_model_flags,
    check_tensors,
    expected_tensors,
    rope_settings,
    scan_checkpoint,
)


@dataclass(frozen=True)
class HFConfig:
    """What the torch model needs from config.json, plus the fields the engine's scheduler reads from a model
    config (num_layers, num_kv_heads, head_dim, window, sink, hybrid, layer_window)."""
    model_type: str
    vocab: int
    hidden: int
    ffn: int
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    rms_eps: float
    rope_theta: float
    rope_scaling: Optional[Dict[str, Any]]  # None, or {"rope_type": "linear" | "llama3", ...}
    qkv_bias: bool
    tie_embeddings: bool
    max_positions: int
    o_bias: bool = False     # Llama's attention_bias: o_proj too
    mlp_bias: bool = False   # Llama's mlp_bias: gate, up and down projections
    activation: str = "silu"  # hidden_act (one of checkpoint_check.ACTIVATIONS)
    window: int = 0          # sliding_window (0 = full attention): every layer's, or window_layers' only
    sink: int = 0
    hybrid: bool = False     # only window_layers slide (Qwen2's max_window_layers): two KV cache groups
    window_layers: Tuple[int, ...] = ()

    def layer_window(self, layer: int) -> Tuple[int, int]:
        """(window, sink) of a layer; (0, 0) = full attention."""
        if self.hybrid and layer not in self.window_layers:
            return 0, 0
        return self.window, 0

    @classmethod
    def from_dict(cls, c: Dict[str, Any], where: str = "config.json") -> "HFConfig":
        """The config as transformers' LlamaConfig / Qwen2Config / MistralConfig read it (their defaults for
        missing optional keys); anything the torch model would compute differently is a CheckpointError."""
        r = ConfigReader(c, where)
        mt = c.get("model_type")
        if mt not in ARCHITECTURES:
            raise r.fail(f"model_type {mt!r} is not supported (one of {sorted(ARCHITECTURES)})")
        defaults = FAMILY_DEFAULTS[mt]
        check_model_flags(r, mt)
        hidden, heads, layers = r.int("hidden_size"), r.int("num_attention_heads"), r.int("num_hidden_layers")
        # absent: the family's default; null (or a null default): as many as the query heads
        kv_heads = r.int("num_key_value_heads", heads if "num_key_value_heads" in c
                         else defaults["num_key_value_heads"] or heads)
        if heads % kv_heads:
            raise r.fail(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
        if c.get("head_dim") is None and hidden % heads:
            raise r.fail(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads} (and there is "
                         f"no head_dim)")
        head_dim = r.int("head_dim", hidden // heads)
        if head_dim % 2:
            raise r.fail(f"head_dim {head_dim} is odd (RoPE rotates halves of each head)")
        max_positions = r.int("max_position_embeddings", defaults["max_position_embeddings"])
        theta, scaling = rope_settings(r, max_positions)
        window, sliding = 0, []
        if mt == "mistral":
            w = c.get("sliding_window", defaults["sliding_window"])
            if w:
                window, sliding = r.int("sliding_window", w), list(range(layers))
        if mt == "qwen2" and c.get("use_sliding_window"):
            w = c.get("sliding_window", defaults["sliding_window"])
            # transformers' rule: layer_types if given, else the layers from max_window_layers on slide.
            types = c.get("layer_types") or ["sliding_attention" if i >= int(c.get("max_window_layers", 28))
                                             else "full_attention" for i in range(layers)]
            sliding = [i for i, t in enumerate(types) if t == "sliding_attention"] if w else []
            window = r.int("sliding_window", w) if sliding else 0
        # Only Llama reads attention_bias (q, k, v and o projections) and mlp_bias; Qwen2 always has q, k, v
        # biases and no others; Mistral none.
        llama = mt == "llama"
        return cls(model_type=mt, vocab=r.int("vocab_size"), hidden=hidden, ffn=r.int("intermediate_size"),
                   num_layers=layers, num_q_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                   rms_eps=r.float("rms_norm_eps", 1e-6), rope_theta=theta, rope_scaling=scaling,
                   qkv_bias=mt == "qwen2" or (llama and bool(c.get("attention_bias", False))),
                   o_bias=llama and bool(c.get("attention_bias", False)),
                   mlp_bias=llama and bool(c.get("mlp_bias", False)), activation=c.get("hidden_act", "silu"),
                   tie_embeddings=bool(c.get("tie_word_embeddings", False)),
                   max_positions=max_positions, window=window,
                   hybrid=0 < len(sliding) < layers, window_layers=tuple(sliding))


def rope_inv_freq(cfg: HFConfig) -> Any:
    """Inverse frequencies [head_dim / 2] (fp32 torch tensor on the CPU), with linear or Llama-3 scaling."""
    import torch
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    sc = cfg.rope_scaling
    if sc is None:
        return inv
    if sc["rope_type"] == "linear":
        return inv / float(sc["factor"])
    # llama3: long wavelengths are divided by factor, short ones kept, the band between interpolated.
    factor, lo, hi = float(sc["factor"]), float(sc["low_freq_factor"]), float(sc["high_freq_factor"])
    old_len = float(sc["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old_len / lo, inv / factor, inv)
    smooth = (old_len / wavelen - lo) / (hi - lo)
    mid = (1 - smooth) * scaled / factor + smooth * scaled
    is_mid = ~(wavelen < old_len / hi) & ~(wavelen > old_len / lo)
    return torch.where(is_mid, mid, scaled)


def load_config(model_dir: str) -> HFConfig:
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"--model {model_dir}: no config.json there (a Hugging Face format directory)")
    try:
        c = json.loads(path.read_text())
    except ValueError as e:
        raise CheckpointError(f"{path}: not JSON ({e})") from None
    if not isinstance(c, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    return HFConfig.from_dict(c, str(path))


def load_weights(model_dir: str, device: str, dtype: Any, cfg: Optional[HFConfig] = None) -> Dict[str, Any]:
    """The tensors the model reads (by Hugging Face name), on `device` in `dtype`, after every one of them is
    checked against the config from the safetensors headers (checkpoint_check: a CheckpointError names the
    file and the tensor). Tensors the model does not read are not loaded."""
    from safetensors import safe_open
    found = scan_checkpoint(model_dir)
    cfg = cfg or load_config(model_dir)
    check_tensors(cfg, found, model_dir)
    by_file: Dict[str, list] = {}
    for name in expected_tensors(cfg):
        by_file.setdefault(found[name].file, []).append(name)
    out: Dict[str, Any] = {}
    for f, names in by_file.items():
        try:
            with safe_open(f, framework="pt", device="cpu") as st:
                for name in names:
                    try:
                        t = st.get_tensor(name)
                    except Exception as e:  # the data part of a file whose header was readable
                        raise CheckpointError(f"{f}: reading tensor {name!r} failed ({type(e).__name__}: {e})") \
                            from None
                    out[name] = t.to(device=device, dtype=dtype)
        except OSError as e:
            raise CheckpointError(f"{f}: not readable ({e})") from None
    return out


def checkpoint_id(model_dir: str) -> int:
    """A u64 naming the checkpoint for store keys: a hash of config.json and of the first MiB of each
    *.safetensors file (its header: names, shapes, offsets; then the first weights), so that two checkpoints
    of one architecture (a model and its fine-tune) get different keys without reading every weight."""
    h = hashlib.blake2b(digest_size=8)
    for f in [Path(model_dir) / "config.json"] + sorted(Path(model_dir).glob("*.safetensors")):
        with open(f, "rb") as fh:
            h.update(f.name.encode() + b"\0" + fh.read(1 << 20))
    return int.from_bytes(h.digest(), "little")


def load_tokenizer(model_dir: str) -> Optional[Any]:
    """The checkpoint's tokenizer (the `tokenizers` package and tokenizer.json), or None."""
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    return Tokenizer.from_file(str(path))


def write_tiny_checkpoint(model_dir: str, model_type: str = "llama", *, vocab: int = 512, hidden: int = 256,
                          ffn: int = 256, num_layers: int = 2, num_q_heads: int = 4, num_kv_heads: int = 2,
                          rope_theta: float = 10000.0, tie_embeddings: bool = False, max_positions: int = 2048,
                          seed: int = 0, logit_scale: float = 3.0, attention_bias: bool = False,
                          mlp_bias: bool = False, hidden_act: str = "silu") -> Tuple[Path, HFConfig]:
    """A random-weight checkpoint in Hugging Face format (fp32 safetensors + config.json). The weights are
    scaled so that activations keep unit size through the layers and greedy choices are clear (a real
    checkpoint's 0.02 init would give near-ties that fp32 rounding could flip). attention_bias and mlp_bias
    (Llama only) add those biases."""
    import torch
    from safetensors.torch import save_file
    if model_type not in ARCHITECTURES:
        raise ValueError(f"model_type must be one of {sorted(ARCHITECTURES)}, got {model_type!r}")
    if (attention_bias or mlp_bias) and model_type != "llama":
        raise ValueError(f"attention_bias and mlp_bias are Llama's options, not {model_type!r}'s")
    g = torch.Generator().manual_seed(seed)
    D = hidden // num_q_heads

    def w(out_f: int, in_f: int, scale: float = 1.0) -> Any:
        return torch.randn(out_f, in_f, generator=g) * (scale / math.sqrt(in_f))

    def norm(n: int) -> Any:
        return 1 + 0.1 * torch.randn(n, generator=g)

    t: Dict[str, Any] = {"model.embed_tokens.weight": torch.randn(vocab, hidden, generator=g),
                         "model.norm.weight": norm(hidden)}
    for i in range(num_layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = norm(hidden)
        t[p + "post_attention_layernorm.weight"] = norm(hidden)
        t[p + "self_attn.q_proj.weight"] = w(num_q_heads * D, hidden)
        t[p + "self_attn.k_proj.weight"] = w(num_kv_heads * D, hidden)
        t[p + "self_attn.v_proj.weight"] = w(num_kv_heads * D, hidden)
        t[p + "self_attn.o_proj.weight"] = w(hidden, num_q_heads * D, 0.5)
        if model_type == "qwen2" or attention_bias:
            t[p + "self_attn.q_proj.bias"] = 0.1 * torch.randn(num_q_heads * D, generator=g)
            t[p + "self_attn.k_proj.bias"] = 0.1 * torch.randn(num_kv_heads * D, generator=g)
            t[p + "self_attn.v_proj.bias"] = 0.1 * torch.randn(num_kv_heads * D, generator=g)
        t[p + "mlp.gate_proj.weight"] = w(ffn, hidden)
        t[p + "mlp.up_proj.weight"] = w(ffn, hidden)
        t[p + "mlp.down_proj.weight"] = w(hidden, ffn, 0.5)
        if attention_bias:
            t[p + "self_attn.o_proj.bias"] = 0.1 * torch.randn(hidden, generator=g)
        if mlp_bias:
            t[p + "mlp.gate_proj.bias"] = 0.1 * torch.randn(ffn, generator=g)
            t[p + "mlp.up_proj.bias"] = 0.1 * torch.randn(ffn, generator=g)
            t[p + "mlp.down_proj.bias"] = 0.1 * torch.randn(hidden, generator=g)
    if not tie_embeddings:  # tied: the unit-variance embedding is the output projection (sharp logits already)
        t["lm_head.weight"] = w(vocab, hidden, logit_scale)
    out = Path(model_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in t.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": [ARCHITECTURES[model_type]], "model_type": model_type, "vocab_size": vocab,
              "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": num_layers,
              "num_attention_heads": num_q_heads, "num_key_value_heads": num_kv_heads, "head_dim": D,
              "rms_norm_eps": 1e-6, "rope_theta": rope_theta, "max_position_embeddings": max_positions,
              "tie_word_embeddings": tie_embeddings, "hidden_act": hidden_act, "torch_dtype": "float32",
              "attention_dropout": 0.0, "bos_token_id": None, "eos_token_id": None}
    if model_type == "llama":
        config["attention_bias"] = attention_bias
        config["mlp_bias"] = mlp_bias
    if model_type == "qwen2":
        config["use_sliding_window"] = False
    if model_type == "mistral":
        config["sliding_window"] = None
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return out, HFConfig.from_dict(config)
