"""A Llama / Qwen2 / Mistral decoder in torch (RMSNorm, RoPE, GQA attention, gated MLP with transformers'
common activations, optional attention and MLP biases and tied embeddings) over a flat batch of new tokens.
Attention is a callback, as in the numpy model: the runner plugs in libkvblock's write_kv and paged / prefill
attention on the KV cache. The arithmetic follows
transformers' modeling code operation by operation (fp32 norms, cos/sin cast to the model dtype) so that fp32
generation is token-exact against it and fp16 / bf16 logits stay close."""
from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, ContextManager, Dict, Optional, Sequence

import torch
import torch.nn.functional as F

from .checkpoint import HFConfig, load_config, load_weights, rope_inv_freq
from .checkpoint_check import ACTIVATIONS, check_tensors, in_memory_infos

Attention = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # (layer, q, k, v) -> out
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _gelu_new(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _gelu_fast(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


# hidden_act -> the function transformers' ACT2FN gives for it, written with the same operations in the same
# order (so that fp32 results are bit-identical).
ACTIVATION_FNS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu, "swish": F.silu, "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"), "gelu_new": _gelu_new, "gelu_fast": _gelu_fast,
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x), "relu": F.relu,
    "relu2": lambda x: torch.square(F.relu(x)),
}
assert set(ACTIVATION_FNS) == set(ACTIVATIONS)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [n, heads, head_dim] rotated (rotate-half form); cos, sin [n, 1, head_dim]."""
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


class TorchModel:
    """Weights as plain tensors on one device in one dtype (q/k/v and gate/up fused: one matmul each)."""

    def __init__(self, cfg: HFConfig, weights: Dict[str, torch.Tensor], device: str = "cpu",
                 dtype: str = "float32", max_len: Optional[int] = None) -> None:
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        self.cfg, self.device, self.dtype_name = cfg, torch.device(device), dtype
        self.dtype = DTYPES[dtype]
        # Where the engine times the matmuls and the elementwise work (norms, RoPE, activations, residuals)
        # when profiling; no-ops otherwise.
        self.matmul_clock: ContextManager[Any] = contextlib.nullcontext()
        self.elementwise_clock: ContextManager[Any] = contextlib.nullcontext()

        check_tensors(cfg, in_memory_infos(weights), "weights")  # a CheckpointError names the tensor
        self.act = ACTIVATION_FNS[cfg.activation]

        def get(name: str) -> torch.Tensor:
            return weights[name].to(device=self.device, dtype=self.dtype)

        def fused(names: Sequence[str], present: bool = True) -> Optional[torch.Tensor]:
            return torch.cat([get(n) for n in names]) if present else None

        self.embed = get("model.embed_tokens.weight")
        self.final_norm = get("model.norm.weight")
        self.lm_head = self.embed if cfg.tie_embeddings else get("lm_head.weight")
        self.layers = []
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            a, m = p + "self_attn.", p + "mlp."
            self.layers.append(dict(
                attn_norm=get(p + "input_layernorm.weight"), mlp_norm=get(p + "post_attention_layernorm.weight"),
                qkv=fused([a + f"{x}_proj.weight" for x in "qkv"]),
                qkv_bias=fused([a + f"{x}_proj.bias" for x in "qkv"], cfg.qkv_bias),
                o=get(a + "o_proj.weight"), o_bias=get(a + "o_proj.bias") if cfg.o_bias else None,
                gate_up=fused([m + "gate_proj.weight", m + "up_proj.weight"]),
                gate_up_bias=fused([m + "gate_proj.bias", m + "up_proj.bias"], cfg.mlp_bias),
                down=get(m + "down_proj.weight"), down_bias=get(m + "down_proj.bias") if cfg.mlp_bias else None))
        # cos / sin of every position up to max_len, fp32 as transformers computes them, then cast.
        n = min(cfg.max_positions, max_len) if max_len else cfg.max_positions
        inv = rope_inv_freq(cfg).to(self.device)
        ang = torch.arange(n, device=self.device, dtype=torch.int64).float()[:, None] * inv[None, :]
        emb = torch.cat((ang, ang), dim=-1)
        self.cos, self.sin = emb.cos().to(self.dtype), emb.sin().to(self.dtype)
        self.max_len = n

    @classmethod
    def from_pretrained(cls, model_dir: str, device: str = "cpu", dtype: str = "float32",
                        max_len: Optional[int] = None) -> "TorchModel":
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        cfg = load_config(model_dir)
        return cls(cfg, load_weights(model_dir, device, DTYPES[dtype], cfg), device, dtype, max_len)

    def _linear(self, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor] = None) -> torch.Tensor:
        with self.matmul_clock:
            return F.linear(x, w, b)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attention: Attention) -> torch.Tensor:
        """Final hidden states [n, hidden] (normed) of the new tokens (tokens, positions: [n] int64)."""
        cfg = self.cfg
        n, hq, hk, d = tokens.shape[0], cfg.num_q_heads, cfg.num_kv_heads, cfg.head_dim
        ew = self.elementwise_clock
        with ew:
            cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)
            x = F.embedding(tokens, self.embed)
        for layer, p in enumerate(self.layers):
            with ew:
                h = rms_norm(x, p["attn_norm"], cfg.rms_eps)
            qkv = self._linear(h, p["qkv"], p["qkv_bias"])
            with ew:
                q, k, v = qkv.split([hq * d, hk * d, hk * d], dim=-1)
                q, k = rotate(q.view(n, hq, d), cos, sin), rotate(k.view(n, hk, d), cos, sin)
            o = attention(layer, q, k, v.view(n, hk, d))  # v stays a strided view of qkv: no copy
            o = self._linear(o.view(n, hq * d), p["o"], p["o_bias"])
            with ew:
                x = x + o
                h = rms_norm(x, p["mlp_norm"], cfg.rms_eps)
            gate, up = self._linear(h, p["gate_up"], p["gate_up_bias"]).chunk(2, dim=-1)
            with ew:
                h = self.act(gate) * up
            h = self._linear(h, p["down"], p["down_bias"])
            with ew:
                x = x + h
        with ew:
            return rms_norm(x, self.final_norm, cfg.rms_eps)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self._linear(hidden, self.lm_head)

    @torch.no_grad()
    def dense_logits(self, tokens: Sequence[int],
                     observe: Optional[Callable[[int, torch.Tensor, torch.Tensor], None]] = None) -> torch.Tensor:
        """fp32 logits [vocab] of the last position by one dense causal prefill of `tokens` (no KV cache;
        each layer's window and sinks applied). observe(layer, k, v), when given, sees every layer's K and V
        [len(tokens), num_kv_heads, head_dim] in the model's dtype (fp8 scale calibration, kv_quant.py)."""
        cfg = self.cfg
        t = torch.as_tensor(list(tokens), dtype=torch.int64, device=self.device)
        pos = torch.arange(t.shape[0], device=self.device)
        group = cfg.num_q_heads // cfg.num_kv_heads

        def full_attention(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            if observe is not None:
                observe(layer, k, v)
            kk, vv = (x.float().repeat_interleave(group, dim=1) for x in (k, v))
            scores = torch.einsum("nhd,thd->hnt", q.float(), kk) * cfg.head_dim ** -0.5
            allowed = pos[None, :] <= pos[:, None]
            window, sink = cfg.layer_window(layer)
            if window:
                allowed &= (pos[None, :] > pos[:, None] - window) | (pos[None, :] < sink)
            probs = torch.softmax(scores.masked_fill(~allowed[None], float("-inf")), dim=-1)
            return torch.einsum("hnt,thd->nhd", probs, vv).to(q.dtype).contiguous()

        return self.logits(self.forward(t, pos, full_attention)[-1:])[0].float()
