"""FP8 KV caches in the engine: per-layer scales from a calibration prefill, and how far an fp8-KV run's
logits move from an fp16-KV run of the same requests."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from .model import Model

FP8_MAX = {"float8_e4m3": 448.0, "float8_e5m2": 57344.0}


def calibrate_kv_scales(model: Model, prompt: Sequence[int],
                        kv_dtype: str = "float8_e4m3") -> Tuple[List[float], List[float]]:
    """Per-tensor (per layer) K and V scales: max |x| over a dense prefill of `prompt`, divided by the
    format's largest finite value (448 for e4m3), so the calibration prompt's values use the whole range."""
    n = model.cfg.num_layers
    kmax, vmax = [0.0] * n, [0.0] * n

    def observe(layer: int, k: np.ndarray, v: np.ndarray) -> None:
        kmax[layer] = max(kmax[layer], float(np.abs(k).max(initial=0.0)))
        vmax[layer] = max(vmax[layer], float(np.abs(v).max(initial=0.0)))

    model.dense_logits(prompt, observe=observe)
    top = FP8_MAX[kv_dtype]
    # (a layer with all-zero K or V keeps scale 1: any positive scale stores zeros exactly)
    return [m / top if m > 0 else 1.0 for m in kmax], [m / top if m > 0 else 1.0 for m in vmax]


def compare_logits(ref: Dict[int, list], test: Dict[int, list]) -> Dict[str, float]:
    """Top-1 agreement over every generated position both runs have (per request and sample), and the max
    |logit difference| over the positions before their tokens first differ (after that the contexts differ)."""
    agree = total = 0
    max_diff = 0.0
    for req, seqs in ref.items():
        for a, b in zip(sorted(seqs, key=lambda s: s.index), sorted(test.get(req, []), key=lambda s: s.index)):
            same_context = True
            for la, lb in zip(a.logits, b.logits):
                total += 1
                top_same = int(np.argmax(la)) == int(np.argmax(lb))
                agree += top_same
                if same_context:
                    max_diff = max(max_diff, float(np.abs(la.astype(np.float64) - lb).max()))
                same_context = same_context and top_same
    return {"positions": total, "top1_agreement": agree / max(1, total), "max_abs_diff": max_diff}
