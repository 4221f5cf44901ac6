"""FP8 KV caches in the engines (numpy and torch): per-layer scales from a calibration prefill, and how far
an fp8-KV run's logits move from a 16-bit-KV run of the same requests."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from .step import ModelShape

FP8_MAX = {"float8_e4m3": 448.0, "float8_e5m2": 57344.0}


class DensePrefill(Protocol):
    """A model with a dense (cacheless) prefill that shows each layer's K and V to `observe`: the numpy
    model.Model and torch_model.TorchModel (K/V as numpy arrays or torch tensors)."""

    @property
    def cfg(self) -> ModelShape: ...

    def dense_logits(self, tokens: Sequence[int], observe: Optional[Callable[[int, Any, Any], None]] = None) -> Any:
        ...


def _abs_max(x: Any) -> float:
    """max |x| of a numpy array or a torch tensor (0 for no tokens)."""
    return float(abs(x).max()) if x.shape[0] else 0.0


def calibrate_kv_scales(model: DensePrefill, prompt: Sequence[int],
                        kv_dtype: str = "float8_e4m3") -> Tuple[List[float], List[float]]:
    """Per-tensor (per layer) K and V scales: max |x| over a dense prefill of `prompt`, divided by the
    format's largest finite value (448 for e4m3), so the calibration prompt's values use the whole range."""
    if kv_dtype not in FP8_MAX:
        raise ValueError(f"kv_dtype must be one of {sorted(FP8_MAX)} to calibrate fp8 scales, got {kv_dtype!r}")
    n = model.cfg.num_layers
    kmax, vmax = [0.0] * n, [0.0] * n

    def observe(layer: int, k: Any, v: Any) -> None:
        kmax[layer] = max(kmax[layer], _abs_max(k))
        vmax[layer] = max(vmax[layer], _abs_max(v))

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


def report(kv_dtype: str, scales: Tuple[List[float], List[float]], cmp: Dict[str, float], ref_dtype: str,
           calibration: str = "request 0") -> List[str]:
    """The engine CLIs' lines on an fp8 run: the calibrated scales and the comparison with the 16-bit run."""
    return [f"fp8 K/V:           {kv_dtype}, scales from a calibration prefill of {calibration} (max |x| / "
            f"{FP8_MAX[kv_dtype]:g} per layer): k {', '.join(f'{x:.4g}' for x in scales[0])}; "
            f"v {', '.join(f'{x:.4g}' for x in scales[1])}",
            f"vs {ref_dtype} K/V run: top-1 agreement {cmp['top1_agreement']:.4f} over {cmp['positions']} generated "
            f"positions; max |logit diff| {cmp['max_abs_diff']:.4g} (positions before the tokens first differ)"]
