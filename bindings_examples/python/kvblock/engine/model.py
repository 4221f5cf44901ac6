"""A small Llama-style decoder in numpy fp32 (RMSNorm, RoPE, GQA attention, SwiGLU MLP) with random weights
from a seed, and its dense reference: the same model recomputing full causal attention over the whole
sequence, with no cache. The attention of `forward` is a callback, so the engine plugs in the paged cache
and libkvblock's kernels while the reference plugs in plain numpy."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

Attention = Callable[[int, np.ndarray, np.ndarray, np.ndarray], np.ndarray]  # (layer, q, k, v) -> out


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = 512
    num_layers: int = 2
    num_q_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    ffn: int = 512
    rope_theta: float = 10000.0
    window: int = 0        # sliding-window attention (0 = full), with `sink` attention-sink tokens
    sink: int = 0
    # Hybrid (Gemma-2 style): even layers use the window above, odd layers full attention. The engine then
    # serves the two kinds as two KV cache groups of one manager (one block table each).
    hybrid: bool = False
    seed: int = 0

    def layer_window(self, layer: int) -> Tuple[int, int]:
        """(window, sink) of a layer; (0, 0) = full attention."""
        if self.hybrid and layer % 2 == 1:
            return 0, 0
        return self.window, self.sink

    @property
    def hidden(self) -> int:
        return self.num_q_heads * self.head_dim


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w).astype(np.float32)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


class Model:
    def __init__(self, cfg: ModelConfig) -> None:
        self.cfg = cfg
        rng = np.random.default_rng(cfg.seed)
        H, D, F = cfg.hidden, cfg.head_dim, cfg.ffn

        def w(*shape: int) -> np.ndarray:
            return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

        self.embed = rng.standard_normal((cfg.vocab, H)).astype(np.float32)
        self.layers = []
        for _ in range(cfg.num_layers):
            self.layers.append(dict(
                attn_norm=(1 + 0.1 * rng.standard_normal(H)).astype(np.float32),
                wq=w(H, cfg.num_q_heads * D), wk=w(H, cfg.num_kv_heads * D), wv=w(H, cfg.num_kv_heads * D),
                wo=w(cfg.num_q_heads * D, H),
                mlp_norm=(1 + 0.1 * rng.standard_normal(H)).astype(np.float32),
                w_gate=w(H, F), w_up=w(H, F), w_down=w(F, H)))
        self.final_norm = (1 + 0.1 * rng.standard_normal(H)).astype(np.float32)
        self.lm_head = (3.0 * w(H, cfg.vocab)).astype(np.float32)  # sharper logits: clear greedy choices
        half = D // 2
        self.inv_freq = (1.0 / cfg.rope_theta ** (np.arange(half, dtype=np.float64) / half))

    def rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Rotary embedding (rotate-half form) of x [n, heads, head_dim] at the given positions."""
        ang = positions.astype(np.float64)[:, None] * self.inv_freq[None, :]
        cos, sin = np.cos(ang)[:, None, :].astype(np.float32), np.sin(ang)[:, None, :].astype(np.float32)
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def forward(self, tokens: np.ndarray, positions: np.ndarray, attention: Attention,
                logit_rows: Optional[np.ndarray] = None) -> np.ndarray:
        """Logits [len(logit_rows), vocab] (every row if None) of a ragged batch of new tokens."""
        cfg = self.cfg
        n = tokens.shape[0]
        x = self.embed[tokens]
        for layer, p in enumerate(self.layers):
            h = rms_norm(x, p["attn_norm"])
            q = (h @ p["wq"]).reshape(n, cfg.num_q_heads, cfg.head_dim)
            k = (h @ p["wk"]).reshape(n, cfg.num_kv_heads, cfg.head_dim)
            v = np.ascontiguousarray((h @ p["wv"]).reshape(n, cfg.num_kv_heads, cfg.head_dim))
            q, k = self.rope(q, positions), self.rope(k, positions)
            o = attention(layer, np.ascontiguousarray(q, np.float32), np.ascontiguousarray(k, np.float32), v)
            x = x + o.reshape(n, -1) @ p["wo"]
            h = rms_norm(x, p["mlp_norm"])
            x = x + (silu(h @ p["w_gate"]) * (h @ p["w_up"])) @ p["w_down"]
        if logit_rows is not None:
            x = x[logit_rows]
        return rms_norm(x, self.final_norm) @ self.lm_head

    # -- the dense reference ------------------------------------------------------------------------
    def dense_logits(self, tokens: Sequence[int],
                     observe: Optional[Callable[[int, np.ndarray, np.ndarray], None]] = None) -> np.ndarray:
        """Logits of the last position, recomputing causal attention over the whole sequence (no cache).
        observe(layer, k, v), when given, sees every layer's K and V (fp8 scale calibration)."""
        t = np.asarray(tokens, np.int64)
        pos = np.arange(t.shape[0])
        cfg = self.cfg

        def full_attention(layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
            if observe is not None:
                observe(layer, k, v)
            group = cfg.num_q_heads // cfg.num_kv_heads
            kk = np.repeat(k.astype(np.float64), group, axis=1)
            vv = np.repeat(v.astype(np.float64), group, axis=1)
            logits = np.einsum("nhd,thd->hnt", q.astype(np.float64), kk) / np.sqrt(cfg.head_dim)
            allowed = pos[None, :] <= pos[:, None]
            window, sink = cfg.layer_window(layer)
            if window:
                allowed &= (pos[None, :] > pos[:, None] - window) | (pos[None, :] < sink)
            logits = np.where(allowed[None], logits, -np.inf)
            pr = np.exp(logits - logits.max(-1, keepdims=True))
            pr /= pr.sum(-1, keepdims=True)
            return np.einsum("hnt,thd->nhd", pr, vv).astype(np.float32)

        return self.forward(t, pos, full_attention, logit_rows=np.array([t.shape[0] - 1]))[0]


def sample(logits: np.ndarray, temperature: float, seed: int, request: int, index: int, position: int) -> int:
    """Greedy at temperature 0; else Gumbel-max sampling with noise fixed by (seed, request, sample, position),
    so that the engine and the dense reference draw the same token from the same logits."""
    if temperature <= 0:
        return int(np.argmax(logits))
    g = np.random.default_rng([seed, request, index, position]).gumbel(size=logits.shape[0])
    return int(np.argmax(logits.astype(np.float64) / temperature + g))


def reference_generate(model: Model, prompt: Sequence[int], max_tokens: int, temperature: float = 0.0,
                       seed: int = 0, request: int = 0, index: int = 0) -> tuple:
    """(tokens, logits per generated token) by full recomputation at every step."""
    seq: List[int] = list(prompt)
    out, logits = [], []
    for _ in range(max_tokens):
        lg = model.dense_logits(seq)
        tok = sample(lg, temperature, seed, request, index, len(seq))
        out.append(tok)
        logits.append(lg)
        seq.append(tok)
    return out, logits
