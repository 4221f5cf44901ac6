"""The reference for the torch engine: transformers' own model on the same checkpoint, recomputing the whole
sequence at every step (no cache), and the comparison of the engine's logits with it."""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import torch

from .model import sample
from .torch_model import DTYPES


def load_hf(model_dir: str, device: str, dtype: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype], attn_implementation="eager",
                                             local_files_only=True)
    return m.to(device).eval()


@torch.no_grad()
def hf_greedy(model: torch.nn.Module, prompt: Sequence[int], max_tokens: int, temperature: float = 0.0,
              seed: int = 0, request: int = 0, index: int = 0) -> List[int]:
    """Tokens by full recomputation at every step: greedy, or at temperature > 0 drawn by the engine's own
    sampler (kvblock.engine.model.sample: noise fixed by seed, request, sample index and position)."""
    dev = next(model.parameters()).device
    seq = list(prompt)
    for _ in range(max_tokens):
        logits = model(torch.tensor([seq], device=dev), use_cache=False).logits[0, -1]
        if temperature > 0:
            seq.append(sample(logits.float().cpu().numpy(), temperature, seed, request, index, len(seq)))
        else:
            seq.append(int(logits.argmax()))
    return seq[len(prompt):]


@torch.no_grad()
def hf_logits(model: torch.nn.Module, tokens: Sequence[int], first: int) -> np.ndarray:
    """fp32 logits [len(tokens) - first, vocab] that predict tokens[first:] (teacher forcing, one pass)."""
    dev = next(model.parameters()).device
    out = model(torch.tensor([list(tokens)], device=dev), use_cache=False).logits[0]
    return out[first - 1:len(tokens) - 1].float().cpu().numpy()


def compare_logits(engine_logits: Sequence[np.ndarray], ref: np.ndarray) -> Dict[str, float]:
    """max |diff|, that relative to the reference's largest |logit|, and top-1 agreement."""
    e = np.stack([np.asarray(x, np.float32) for x in engine_logits])
    diff = np.abs(e - ref)
    return {"max_abs": float(diff.max()), "rel": float(diff.max() / max(1e-6, np.abs(ref).max())),
            "top1": float(np.mean(e.argmax(-1) == ref.argmax(-1))), "rows": int(e.shape[0])}
