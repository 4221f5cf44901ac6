"""Timing and references for the torch GPU bench (bench_torch.py): CUDA-graph timing with an eager
fallback, the device's ceilings measured through torch, and fp32 attention references on upcast inputs."""
from __future__ import annotations

import math
import time
from typing import Callable, Optional, Tuple

import torch

REPLAYS = 5            # timed replays per measurement; the median is reported
TARGET_S = 3e-3        # one replay runs about this long (calls per graph chosen from a first timing)
CPU_RUNS = 3           # timed calls on the CPU; the best is reported (the others lost time to other work)


def _events_time(fn: Callable[[], None], calls: int) -> float:
    """Seconds per call of `calls` back-to-back calls of fn, CUDA events around them."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e-3 / calls


def time_gpu(fn: Callable[[], None]) -> Tuple[float, str]:
    """(median seconds per call, how): fn captured in a CUDA graph of n calls and replayed REPLAYS times
    (kernel time without the Python call), or, when capture fails, n eager calls between events. Without
    CUDA (the CPU runs): one warm-up call, then the best of CPU_RUNS calls on the host clock."""
    if not torch.cuda.is_available():
        fn()
        times = []
        for _ in range(CPU_RUNS):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times), "cpu"
    fn()
    fn()
    torch.cuda.synchronize()
    first = _events_time(fn, 1)
    n = max(1, min(20, int(round(TARGET_S / max(first, 1e-6)))))
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # a warm-up on the capture stream, as torch's docs ask
            fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                fn()
        g.replay()
        torch.cuda.synchronize()
        times = sorted(_events_time(g.replay, 1) / n for _ in range(REPLAYS))
        return times[len(times) // 2], "graph"
    except Exception:  # a backend that cannot be captured: eager calls (includes launch overhead)
        torch.cuda.synchronize()
        times = sorted(_events_time(fn, n) for _ in range(REPLAYS))
        return times[len(times) // 2], "eager"


def copy_ceiling_gbps() -> float:
    """Device-to-device copy of 1 GiB, read + write counted."""
    n = 1 << 30
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t, _ = time_gpu(lambda: dst.copy_(src))
    return 2 * n / t / 1e9


def gemm_ceiling_tflops(n: int = 8192) -> float:
    """Dense fp16 GEMM n^3 (torch.mm: cuBLAS, fp32 accumulation), 2 n^3 flops."""
    a = torch.randn(n, n, dtype=torch.float16, device="cuda")
    b = torch.randn(n, n, dtype=torch.float16, device="cuda")
    c = torch.empty(n, n, dtype=torch.float16, device="cuda")
    t, _ = time_gpu(lambda: torch.mm(a, b, out=c))
    return 2 * n ** 3 / t / 1e12


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                  scale: Optional[float] = None) -> torch.Tensor:
    """fp32 attention of query rows q [N, Hq, D] at absolute positions over k, v [S, Hkv, D] (key t is
    seen by a row at position p when t <= p); chunks of rows keep the logits small. TF32 is off."""
    n, hq, d = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    scale = scale if scale is not None else 1.0 / math.sqrt(d)
    kf, vf = k.float(), v.float()
    out = torch.empty(n, hq, d, dtype=torch.float32, device=q.device)
    t = torch.arange(k.shape[0], device=q.device)
    step = max(1, (1 << 28) // max(1, hq * k.shape[0]))  # ~1 GiB of fp32 logits per chunk
    for a in range(0, n, step):
        qa = q[a:a + step].float().view(-1, hkv, g, d)
        logits = torch.einsum("nhgd,thd->nhgt", qa, kf) * scale
        allowed = t[None, :] <= positions[a:a + step, None]
        logits.masked_fill_(~allowed[:, None, None, :], float("-inf"))
        p = torch.softmax(logits, dim=-1)
        out[a:a + step] = torch.einsum("nhgt,thd->nhgd", p, vf).reshape(-1, hq, d)
    return out


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in fp64; NaN anywhere (a row left poisoned) gives inf."""
    o = out.double()
    if not torch.isfinite(o).all():
        return float("inf")
    r = ref.double()
    return float(torch.linalg.vector_norm(o - r) / torch.linalg.vector_norm(r))
