"""What the torch engine refuses in a Hugging Face checkpoint, before it computes anything: config.json keys
missing or of the wrong kind, flags that would change the model's arithmetic in ways the engine does not
implement (named, never ignored), and tensors missing or of the wrong shape or dtype (checked from the
safetensors headers, before any weight is read). Every refusal is one CheckpointError whose message names the
file, the key or tensor, and what was expected against what was found."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Tuple

if TYPE_CHECKING:
    from .checkpoint import HFConfig

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}
# hidden_act names the torch model implements exactly as transformers' ACT2FN does (torch_model.ACTIVATION_FNS)
ACTIVATIONS = ("silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_new", "gelu_fast", "quick_gelu", "relu",
               "relu2")
ROPE_TYPES = ("default", "linear", "llama3")
# What transformers' config classes use for keys a config.json leaves out (num_key_value_heads None: as many as
# the query heads; sliding_window: Mistral's only, Qwen2's needs use_sliding_window).
FAMILY_DEFAULTS: Dict[str, Dict[str, Any]] = {
    "llama": {"num_key_value_heads": None, "max_position_embeddings": 2048},
    "qwen2": {"num_key_value_heads": 32, "max_position_embeddings": 32768, "sliding_window": 4096},
    "mistral": {"num_key_value_heads": 8, "max_position_embeddings": 4096 * 32, "sliding_window": 4096},
}
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")  # safetensors' names; weights are cast to the model's dtype
INDEX_FILE = "model.safetensors.index.json"
_MISSING = object()


class CheckpointError(ValueError):
    """A checkpoint the engine cannot serve as transformers would; the message names the file, the key or
    tensor, and what was expected against what was found."""


class ConfigReader:
    """Typed reads of config.json's keys, each refusal naming the file and the key."""

    def __init__(self, c: Dict[str, Any], where: str = "config.json") -> None:
        self.c, self.where = c, where

    def fail(self, what: str) -> CheckpointError:
        return CheckpointError(f"{self.where}: {what}")

    def get(self, key: str, default: Any = None) -> Any:
        return self.c.get(key, default)

    def int(self, key: str, default: Any = _MISSING, minimum: int = 1) -> int:
        """config[key]; absent or null: default (none: refused as missing)."""
        v = self.c.get(key)
        v = default if v is None else v
        if v is _MISSING:
            raise self.fail(f"'{key}' is missing (an integer >= {minimum})")
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self.fail(f"'{key}' must be an integer >= {minimum}, found {v!r}")
        return v

    def float(self, key: str, default: Any = _MISSING, within: Optional[Dict[str, Any]] = None) -> float:
        src = self.c if within is None else within
        v = src.get(key, default)
        if v is _MISSING:
            raise self.fail(f"'{key}' is missing (a number)")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(f"'{key}' must be a number, found {v!r}")
        return float(v)


def check_model_flags(r: ConfigReader, model_type: str) -> None:
    """Refuses, by name, what would make transformers' model compute something the engine does not."""
    arch = r.get("architectures")
    if arch is not None:
        want = ARCHITECTURES[model_type]
        if not isinstance(arch, list) or any(a != want for a in arch):
            raise r.fail(f"architectures {arch!r}: only [{want!r}] is served for model_type {model_type!r} "
                         f"(a causal language model; other heads such as *ForSequenceClassification are not)")
    q = r.get("quantization_config")
    if q is not None:
        method = q.get("quant_method", "?") if isinstance(q, dict) else q
        raise r.fail(f"quantization_config (quant_method {method!r}): quantized checkpoints are not supported "
                     f"(the engine reads plain floating-point weights)")
    act = r.get("hidden_act", "silu")
    if act not in ACTIVATIONS:
        raise r.fail(f"hidden_act {act!r} is not supported (one of {', '.join(ACTIVATIONS)})")


def rope_settings(r: ConfigReader, max_positions: int) -> Tuple[float, Optional[Dict[str, Any]]]:
    """(rope_theta, scaling) as transformers resolves them: rope_scaling (older files) or rope_parameters
    (transformers 5), theta from there or the top level; scaling None for the default type. Unsupported types,
    per-layer-type parameters, partial rotation and missing factors are refused."""
    key = "rope_scaling" if r.get("rope_scaling") else "rope_parameters"
    scaling = r.get(key) or {}
    if not isinstance(scaling, dict):
        raise r.fail(f"'{key}' must be an object, found {scaling!r}")
    nested = [k for k, v in scaling.items() if isinstance(v, dict)]
    if nested:
        raise r.fail(f"'{key}' has per-layer-type parameters ({', '.join(nested)}): not supported")
    theta = r.float("rope_theta", 10000.0, within=scaling if "rope_theta" in scaling else None)
    partial = scaling.get("partial_rotary_factor", r.get("partial_rotary_factor"))
    if partial is not None and partial != 1.0:
        raise r.fail(f"partial_rotary_factor {partial!r} is not supported (RoPE over the whole head only: 1.0)")
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise r.fail(f"rope type {rope_type!r} is not supported ({', '.join(ROPE_TYPES)})")
    if rope_type == "default":
        return theta, None
    out = dict(scaling, rope_type=rope_type)
    keys = ["factor"] + (["low_freq_factor", "high_freq_factor"] if rope_type == "llama3" else [])
    for k in keys:
        if k not in scaling:
            raise r.fail(f"rope type {rope_type!r} needs '{k}' in '{key}'")
        out[k] = r.float(k, within=scaling)
    if rope_type == "llama3":
        if out["high_freq_factor"] == out["low_freq_factor"]:
            raise r.fail(f"rope type 'llama3': high_freq_factor equals low_freq_factor ({out['low_freq_factor']})")
        # transformers: a top-level original_max_position_embeddings first, then the RoPE dict's, then
        # max_position_embeddings
        old = r.get("original_max_position_embeddings") or scaling.get("original_max_position_embeddings")
        out["original_max_position_embeddings"] = float(old or max_positions)
    return theta, out


# --- tensors ---------------------------------------------------------------------------------------------------

class TensorInfo(NamedTuple):
    shape: Tuple[int, ...]
    dtype: str   # safetensors' name: F32, BF16, F8_E4M3, I64...
    file: str    # where it is (a file name, or "weights" for tensors handed over in memory)


def expected_tensors(cfg: "HFConfig") -> Dict[str, Tuple[Tuple[int, ...], str]]:
    """Every tensor the model reads: name -> (shape, the config keys the shape comes from)."""
    V, H, F = cfg.vocab, cfg.hidden, cfg.ffn
    q, kv = cfg.num_q_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    why = {"V": f"vocab_size {V}", "H": f"hidden_size {H}", "F": f"intermediate_size {F}",
           "Q": f"num_attention_heads {cfg.num_q_heads} x head_dim {cfg.head_dim}",
           "K": f"num_key_value_heads {cfg.num_kv_heads} x head_dim {cfg.head_dim}"}

    def spec(*dims: str) -> Tuple[Tuple[int, ...], str]:
        size = {"V": V, "H": H, "F": F, "Q": q, "K": kv}
        return tuple(size[d] for d in dims), ", ".join(why[d] for d in dims)

    out = {"model.embed_tokens.weight": spec("V", "H"), "model.norm.weight": spec("H")}
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = spec("V", "H")
    for i in range(cfg.num_layers):
        p, a = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
        out[p + "input_layernorm.weight"] = out[p + "post_attention_layernorm.weight"] = spec("H")
        out[a + "q_proj.weight"] = spec("Q", "H")
        out[a + "k_proj.weight"] = out[a + "v_proj.weight"] = spec("K", "H")
        out[a + "o_proj.weight"] = spec("H", "Q")
        if cfg.qkv_bias:
            out[a + "q_proj.bias"] = spec("Q")
            out[a + "k_proj.bias"] = out[a + "v_proj.bias"] = spec("K")
        if cfg.o_bias:
            out[a + "o_proj.bias"] = spec("H")
        out[p + "mlp.gate_proj.weight"] = out[p + "mlp.up_proj.weight"] = spec("F", "H")
        out[p + "mlp.down_proj.weight"] = spec("H", "F")
        if cfg.mlp_bias:
            out[p + "mlp.gate_proj.bias"] = out[p + "mlp.up_proj.bias"] = spec("F")
            out[p + "mlp.down_proj.bias"] = spec("H")
    return out


def check_tensors(cfg: "HFConfig", found: Dict[str, TensorInfo], where: str) -> None:
    """Each tensor the model reads is there, floating point, and of the shape config.json implies."""
    for name, (shape, why) in expected_tensors(cfg).items():
        t = found.get(name)
        if t is None:
            hint = ""
            if name == "lm_head.weight":
                hint = (" (tie_word_embeddings is false, so the output projection is its own tensor; the "
                        "embedding is not used in its place)")
            raise CheckpointError(f"{where}: tensor {name!r} is missing{hint}")
        if t.dtype not in FLOAT_DTYPES:
            raise CheckpointError(f"{t.file}: tensor {name!r} has dtype {t.dtype}, expected a floating-point "
                                  f"one ({', '.join(FLOAT_DTYPES)})")
        if tuple(t.shape) != shape:
            raise CheckpointError(f"{t.file}: tensor {name!r} has shape {list(t.shape)}, expected {list(shape)} "
                                  f"({why} in config.json)")


def scan_checkpoint(model_dir: str) -> Dict[str, TensorInfo]:
    """Every tensor's shape, dtype and file, from the safetensors headers alone. With
    model.safetensors.index.json, the shards it names (each must exist and hold the tensors it lists);
    without, every *.safetensors file of the directory."""
    from safetensors import safe_open
    d = Path(model_dir)
    index = d / INDEX_FILE
    listed: Dict[str, List[str]] = {}
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError("weight_map is not an object")
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index}: not a safetensors index ({type(e).__name__}: {e})") from None
        for name, shard in weight_map.items():
            listed.setdefault(str(shard), []).append(name)
        files = [d / s for s in sorted(listed)]
        for f in files:
            if not f.is_file():
                names = listed[f.name]
                raise CheckpointError(f"{index}: shard {f.name!r} is missing ({len(names)} tensors are listed "
                                      f"there, e.g. {names[0]!r})")
    else:
        files = sorted(d.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"--model {model_dir}: no *.safetensors file there")
    found: Dict[str, TensorInfo] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt", device="cpu") as st:
                for name in st.keys():
                    s = st.get_slice(name)
                    if name in found:
                        raise CheckpointError(f"{f}: tensor {name!r} is also in {found[name].file}")
                    found[name] = TensorInfo(tuple(s.get_shape()), s.get_dtype(), str(f))
        except CheckpointError:
            raise
        except Exception as e:  # safetensors' SafetensorError (a bad header, a truncated file), OSError
            raise CheckpointError(f"{f}: not a readable safetensors file ({type(e).__name__}: {e})") from None
        for name in listed.get(f.name, []):
            if name not in found or found[name].file != str(f):
                raise CheckpointError(f"{index}: tensor {name!r} is listed in shard {f.name!r}, which does not "
                                      f"hold it")
    return found


def in_memory_infos(weights: Dict[str, Any]) -> Dict[str, TensorInfo]:
    """TensorInfo of torch tensors handed to the model directly (dtype in safetensors' names)."""
    names = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64"}
    return {k: TensorInfo(tuple(v.shape), names.get(str(v.dtype).replace("torch.", ""), str(v.dtype)), "weights")
            for k, v in weights.items()}
