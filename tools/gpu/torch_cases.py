"""One shape of the torch GPU bench (bench_torch.py): a paged cache of random data behind random block
tables, libkvblock's kernel checked against the fp32 reference and timed, then torch SDPA's backends on
contiguous tensors of the same shape."""
from __future__ import annotations

import math
import random
import warnings
from typing import Any, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch_timing import attention_ref, rel_err, time_gpu

# "cuda"; "cpu" for --cpu-smoke, a run of the same code paths on small shapes without a GPU (libkvblock's
# CPU kernels, the reference, the table), so that the script is tested where no GPU is, and for --cpu,
# libkvblock's CPU kernels against torch's CPU SDPA (CPU_TIMED: torch is timed too).
DEV = "cuda"
CPU_TIMED = False

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def _stream() -> Any:
    """The stream torch is using now (the capture stream inside a CUDA graph capture); None on the CPU."""
    return torch.cuda.current_stream() if DEV == "cuda" else None


def _take_fault(kvb: Any, cache: Any) -> None:
    """Raises KernelFault when the CUDA kernel recorded bad input (a fault would leave rows NaN)."""
    if DEV == "cuda":
        kvb.take_fault(cache)


class Paged:
    """A one-layer cache holding `copies` independent sets of the sequences (disjoint random blocks),
    so that a small working set can be rotated out of L2; tables[c] are copy c's block tables."""

    def __init__(self, kvb: Any, s: Any, lens: List[int], copies: int) -> None:
        bs = s.bs
        nb = [(n + bs - 1) // bs for n in lens]
        total = sum(nb) * copies
        # torch tensors wrapped (KVCache on "cpu" would allocate numpy arrays, which have no bfloat16)
        shape = (total, bs, s.hkv, s.d)
        k = torch.randn(shape, dtype=getattr(torch, s.dtype), device=DEV)
        v = torch.randn(shape, dtype=getattr(torch, s.dtype), device=DEV)
        self.cache = kvb.KVCache.wrap([k], [v])
        perm = torch.randperm(total, device="cpu").tolist()
        width = max(nb)
        self.tables = []
        it = iter(perm)
        for _ in range(copies):
            t = torch.full((len(lens), width), -1, dtype=torch.int32)
            for i, n in enumerate(nb):
                t[i, :n] = torch.tensor([next(it) for _ in range(n)], dtype=torch.int32)
            self.tables.append(t.to(DEV))
        self.lens = lens
        self.seq_lens = torch.tensor(lens, dtype=torch.int32, device=DEV)

    def kv(self, seq: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Sequence seq's K and V of copy 0, [len, Hkv, D], gathered through its block table."""
        n = self.lens[seq]
        ids = self.tables[0][seq, : (n + self.cache.block_size - 1) // self.cache.block_size].long()
        k = self.cache.k[0][ids].reshape(-1, self.cache.num_kv_heads, self.cache.head_dim)[:n]
        v = self.cache.v[0][ids].reshape(-1, self.cache.num_kv_heads, self.cache.head_dim)[:n]
        return k, v


def run_shape(kvb: Any, s: Any, row: Any, tol: float, rotate_bytes: int) -> None:
    random.seed(hash(s.name) & 0xFFFF)
    torch.manual_seed(hash(s.name) & 0xFFFF)
    if s.kind == "decode":
        _decode(kvb, s, row, tol, rotate_bytes)
    else:
        _prefill(kvb, s, row, tol)


def _backends() -> dict:
    """The SDPA backends compared with: flash and cuDNN exist on CUDA only; on the CPU torch's flash kernel
    (its fastest CPU attention), or none in the smoke run."""
    if DEV == "cuda":
        return BACKENDS
    return {"flash": SDPBackend.FLASH_ATTENTION} if CPU_TIMED else {}


def _rate(work: float, seconds: float, unit: str) -> str:
    """work per second: "B/s" (bytes) or "FLOP/s", in T on the GPU and G on the CPU."""
    if DEV == "cuda":
        return f"{work / seconds / 1e12:.{2 if unit == 'B/s' else 1}f} T{unit}"
    return f"{work / seconds / 1e9:.1f} G{unit}"


def _elem(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def _decode(kvb: Any, s: Any, row: Any, tol: float, rotate_bytes: int) -> None:
    dt = getattr(torch, s.dtype)
    # Partial last blocks: every sequence after the first is up to a block shorter.
    lens = [s.tokens] + [s.tokens - random.randrange(s.bs) for _ in range(s.seqs - 1)]
    kv_bytes = sum(lens) * s.hkv * s.d * _elem(s.dtype) * 2
    copies = 1 if kv_bytes >= rotate_bytes else math.ceil(rotate_bytes / kv_bytes)
    _decode_kvb(kvb, s, row, tol, lens, copies, kv_bytes)  # its cache is freed before torch's tensors
    # torch on contiguous K/V of the full length (as many copies as were rotated above)
    q4 = [torch.randn(s.seqs, s.hq, 1, s.d, dtype=dt, device=DEV) for _ in range(copies)]
    ks = [torch.randn(s.seqs, s.tokens, s.hkv, s.d, dtype=dt, device=DEV).transpose(1, 2) for _ in range(copies)]
    vs = [torch.randn_like(k) for k in ks]
    row.torch_us = {name: _sdpa_time(be, q4, ks, vs, causal=False, mask=None) for name, be in _backends().items()}
    row.torch_work = s.seqs * s.tokens * s.hkv * s.d * _elem(s.dtype) * 2
    if copies > 1:
        row.note = (row.note + "; " if row.note else "") + f"rotated over {copies} copies"


def _decode_kvb(kvb: Any, s: Any, row: Any, tol: float, lens: List[int], copies: int, kv_bytes: int) -> None:
    """libkvblock's paged decode: checked against the fp32 reference, then timed over the copies."""
    dt = getattr(torch, s.dtype)
    pc = Paged(kvb, s, lens, copies)
    qs = [torch.randn(s.seqs, s.hq, s.d, dtype=dt, device=DEV) for _ in range(copies)]
    outs = [torch.empty_like(qs[0]) for _ in range(copies)]

    outs[0].fill_(float("nan"))
    kvb.paged_attention(pc.cache, 0, qs[0], pc.tables[0], pc.seq_lens, outs[0],
                        stream=_stream())
    _take_fault(kvb, pc.cache)
    errs = []
    for i in range(s.seqs):
        k, v = pc.kv(i)
        ref = attention_ref(qs[0][i:i + 1], k, v, torch.tensor([lens[i] - 1], device=DEV))
        errs.append((rel_err(outs[0][i:i + 1], ref), float(torch.linalg.vector_norm(ref.double()))))
    row.err = _combine(errs)
    row.ok = row.err < tol

    def call() -> None:
        st = _stream()
        for c in range(copies):
            kvb.paged_attention(pc.cache, 0, qs[c], pc.tables[c], pc.seq_lens, outs[c], stream=st)

    t, how = time_gpu(call)
    row.kvb_us = t / copies * 1e6
    row.work = kv_bytes
    row.rate = _rate(kv_bytes, t / copies, "B/s")
    if how == "eager":  # capture failed: launch overhead included
        row.note = "kvb timed eager"


def _combine(errs: List[Tuple[float, float]]) -> float:
    """Overall ||out-ref|| / ||ref|| from per-piece relative errors and reference norms."""
    num = sum((e * r) ** 2 for e, r in errs)
    den = sum(r * r for _, r in errs)
    return math.sqrt(num / den) if den > 0 else float("inf")


def _prefill(kvb: Any, s: Any, row: Any, tol: float) -> None:
    dt = getattr(torch, s.dtype)
    _prefill_kvb(kvb, s, row, tol)  # its cache is freed before torch's tensors
    if s.decodes:  # a ragged mixed batch: SDPA has no such call
        row.torch_us = {}
        return
    L = s.cached + s.tokens
    qt = [torch.randn(s.seqs, s.tokens, s.hq, s.d, dtype=dt, device=DEV).transpose(1, 2)]
    kt = [torch.randn(s.seqs, L, s.hkv, s.d, dtype=dt, device=DEV).transpose(1, 2)]
    vt = [torch.randn_like(kt[0])]
    mask = None
    if s.cached:  # extend: the new rows sit at the end of their sequence (causal, lower-right aligned)
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(s.tokens, L)
    row.torch_us = {name: _sdpa_time(be, qt, kt, vt, causal=not s.cached, mask=mask)
                    for name, be in _backends().items()}
    row.torch_work = row.work  # the same prompts and lengths


def _prefill_kvb(kvb: Any, s: Any, row: Any, tol: float) -> None:
    """libkvblock's prefill over a ragged batch (prompts, then decode rows): checked, then timed."""
    dt = getattr(torch, s.dtype)
    seq_q = [s.tokens] * s.seqs + [1] * s.decodes
    lens = [s.cached + s.tokens] * s.seqs + [s.decode_ctx + 1] * s.decodes
    pc = Paged(kvb, s, lens, 1)
    starts = [0]
    for n in seq_q:
        starts.append(starts[-1] + n)
    query_start = torch.tensor(starts, dtype=torch.int32, device=DEV)
    q = torch.randn(starts[-1], s.hq, s.d, dtype=dt, device=DEV)
    out = torch.empty_like(q)
    flops = sum((n * (L - n) + n * (n + 1) / 2) * s.hq * s.d * 4 for n, L in zip(seq_q, lens))

    out.fill_(float("nan"))
    tf32 = getattr(s, "tf32", False)
    kvb.prefill_attention(pc.cache, 0, q, query_start, pc.seq_lens, pc.tables[0], out, allow_tf32=tf32,
                          stream=_stream())
    _take_fault(kvb, pc.cache)
    errs = []
    for i, (n, L) in enumerate(zip(seq_q, lens)):
        k, v = pc.kv(i)
        a, b = starts[i], starts[i + 1]
        ref = attention_ref(q[a:b], k, v, torch.arange(L - n, L, device=DEV))
        errs.append((rel_err(out[a:b], ref), float(torch.linalg.vector_norm(ref.double()))))
    row.err = _combine(errs)
    row.ok = row.err < tol

    def call() -> None:
        kvb.prefill_attention(pc.cache, 0, q, query_start, pc.seq_lens, pc.tables[0], out, allow_tf32=tf32,
                              stream=_stream())

    t, how = time_gpu(call)
    row.kvb_us = t * 1e6
    row.work = flops
    row.rate = _rate(flops, t, "FLOP/s")
    if how == "eager":  # capture failed: launch overhead included
        row.note = "kvb timed eager"


def _sdpa_time(backend: Any, qs: List[torch.Tensor], ks: List[torch.Tensor], vs: List[torch.Tensor], *,
               causal: bool, mask: Optional[Any]) -> Optional[Tuple[float, str]]:
    """Median us per call of SDPA on one backend over the copies, GQA native where the backend takes it,
    else K/V repeated to Hq heads ("rep"); None when the backend refuses the shape or dtype."""
    for repeat in (False, True):
        ks_, vs_ = ks, vs
        group = qs[0].shape[1] // ks[0].shape[1]
        if repeat:
            if group == 1:
                return None
            ks_ = [k.repeat_interleave(group, dim=1) for k in ks]
            vs_ = [v.repeat_interleave(group, dim=1) for v in vs]

        extra = {"enable_gqa": True} if group > 1 and not repeat else {}

        def call(ks_: List[torch.Tensor] = ks_, vs_: List[torch.Tensor] = vs_, extra: dict = extra) -> None:
            with sdpa_kernel([backend]):
                for q, k, v in zip(qs, ks_, vs_):
                    F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None, **extra)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t, how = time_gpu(call)
        except Exception:  # noqa: BLE001 - the backend refuses: try the repeated K/V, then give up
            if DEV == "cuda":
                torch.cuda.synchronize()
            continue
        finally:
            if repeat:
                del ks_, vs_
        tag = how if not repeat else ("rep" if how == "graph" else f"rep, {how}")
        return t / len(qs) * 1e6, tag
    return None
