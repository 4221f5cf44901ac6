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

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}


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
    def from_dict(cls, c: Dict[str, Any]) -> "HFConfig":
        mt = c.get("model_type")
        if mt not in ARCHITECTURES:
            raise ValueError(f"config.json: model_type {mt!r} is not supported (one of {sorted(ARCHITECTURES)})")
        heads = int(c["num_attention_heads"])
        head_dim = int(c.get("head_dim") or c["hidden_size"] // heads)
        # transformers 5 writes rope_parameters {rope_theta, rope_type, ...}; older files rope_theta and
        # rope_scaling at the top level.
        params = dict(c.get("rope_parameters") or {})
        theta = float(params.get("rope_theta", c.get("rope_theta", 10000.0)))
        scaling = dict(c.get("rope_scaling") or params)
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
        if rope_type not in ("default", "linear", "llama3"):
            raise ValueError(f"config.json: rope type {rope_type!r} is not supported (default, linear, llama3)")
        layers = int(c["num_hidden_layers"])
        window, sliding = 0, []
        if mt == "mistral" and c.get("sliding_window"):
            window, sliding = int(c["sliding_window"]), list(range(layers))
        if mt == "qwen2" and c.get("use_sliding_window") and c.get("sliding_window"):
            # transformers' rule: layer_types if given, else the layers from max_window_layers on slide.
            types = c.get("layer_types") or ["sliding_attention" if i >= int(c.get("max_window_layers", 28))
                                             else "full_attention" for i in range(layers)]
            sliding = [i for i, t in enumerate(types) if t == "sliding_attention"]
            window = int(c["sliding_window"]) if sliding else 0
        return cls(model_type=mt, vocab=int(c["vocab_size"]), hidden=int(c["hidden_size"]),
                   ffn=int(c["intermediate_size"]), num_layers=int(c["num_hidden_layers"]), num_q_heads=heads,
                   num_kv_heads=int(c.get("num_key_value_heads") or heads), head_dim=head_dim,
                   rms_eps=float(c.get("rms_norm_eps", 1e-6)), rope_theta=theta,
                   rope_scaling=None if rope_type == "default" else dict(scaling, rope_type=rope_type),
                   qkv_bias=mt == "qwen2" or bool(c.get("attention_bias", False)),
                   tie_embeddings=bool(c.get("tie_word_embeddings", False)),
                   max_positions=int(c.get("max_position_embeddings", 4096)), window=window,
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
    return HFConfig.from_dict(json.loads(path.read_text()))


def load_weights(model_dir: str, device: str, dtype: Any) -> Dict[str, Any]:
    """Every tensor of the directory's *.safetensors files, on `device` in `dtype`, by Hugging Face name."""
    from safetensors import safe_open
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"--model {model_dir}: no *.safetensors file there")
    out: Dict[str, Any] = {}
    for f in files:
        with safe_open(str(f), framework="pt", device="cpu") as st:
            for name in st.keys():
                out[name] = st.get_tensor(name).to(device=device, dtype=dtype)
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
                          seed: int = 0, logit_scale: float = 3.0) -> Tuple[Path, HFConfig]:
    """A random-weight checkpoint in Hugging Face format (fp32 safetensors + config.json). The weights are
    scaled so that activations keep unit size through the layers and greedy choices are clear (a real
    checkpoint's 0.02 init would give near-ties that fp32 rounding could flip)."""
    import torch
    from safetensors.torch import save_file
    if model_type not in ARCHITECTURES:
        raise ValueError(f"model_type must be one of {sorted(ARCHITECTURES)}, got {model_type!r}")
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
        if model_type == "qwen2":
            t[p + "self_attn.q_proj.bias"] = 0.1 * torch.randn(num_q_heads * D, generator=g)
            t[p + "self_attn.k_proj.bias"] = 0.1 * torch.randn(num_kv_heads * D, generator=g)
            t[p + "self_attn.v_proj.bias"] = 0.1 * torch.randn(num_kv_heads * D, generator=g)
        t[p + "mlp.gate_proj.weight"] = w(ffn, hidden)
        t[p + "mlp.up_proj.weight"] = w(ffn, hidden)
        t[p + "mlp.down_proj.weight"] = w(hidden, ffn, 0.5)
    if not tie_embeddings:  # tied: the unit-variance embedding is the output projection (sharp logits already)
        t["lm_head.weight"] = w(vocab, hidden, logit_scale)
    out = Path(model_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in t.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": [ARCHITECTURES[model_type]], "model_type": model_type, "vocab_size": vocab,
              "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": num_layers,
              "num_attention_heads": num_q_heads, "num_key_value_heads": num_kv_heads, "head_dim": D,
              "rms_norm_eps": 1e-6, "rope_theta": rope_theta, "max_position_embeddings": max_positions,
              "tie_word_embeddings": tie_embeddings, "hidden_act": "silu", "torch_dtype": "float32",
              "attention_dropout": 0.0, "bos_token_id": None, "eos_token_id": None}
    if model_type == "llama":
        config["attention_bias"] = False
        config["mlp_bias"] = False
    if model_type == "qwen2":
        config["use_sliding_window"] = False
    if model_type == "mistral":
        config["sliding_window"] = None
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return out, HFConfig.from_dict(config)
