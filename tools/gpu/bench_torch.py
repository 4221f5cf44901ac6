"""libkvblock's CUDA kernels through the Python package against torch SDPA on the same card and shapes.

    python3 tools/gpu/bench_torch.py [--quick] [--out summary.md]
    python3 tools/gpu/bench_torch.py --cpu [--out table.md]      (no GPU needed: see cpu_shapes)

For each shape of the H100 table of 2026-11-25: libkvblock's paged decode or prefill kernel (through the
package's torch path, timed as CUDA-graph replays), torch SDPA with the flash, cuDNN and efficient
backends on contiguous q/k/v (K/V repeated to Hq heads where a backend refuses GQA, marked "rep"), and
a check of libkvblock's output against an fp32 reference on the upcast inputs (||out-ref|| / ||ref||:
fp16 < 3e-3, bf16 < 2e-2, fp32 < 1e-4, else the row fails). Random block tables, partial last blocks,
random data, the output poisoned with NaN before the checked call. Ceilings of the same run: torch D2D
copy and fp16 GEMM 8192^3. Exit status 1 when a row fails its check, 0 otherwise; without torch or a GPU
it says so and exits 0 (nothing to measure). Environment variables of the caller (an alternative
kernel's switch, KVBLOCK_LIB) reach the package unchanged."""
from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
from typing import List, Optional

TOL = {"float16": 3e-3, "bfloat16": 2e-2, "float32": 1e-4, "tf32": 3e-3}  # tf32: fp16's 11-bit significand
L2_ROTATE_BYTES = 200 << 20   # decode working sets below this are rotated over copies (H100 L2: 50 MB)


@dataclass
class Shape:
    name: str
    kind: str                   # "decode", "prefill"
    seqs: int                   # decode: B; prefill: prompts
    tokens: int                 # decode: context L; prefill: new tokens per prompt
    cached: int = 0             # prefill: cached tokens before the new ones
    hq: int = 32
    hkv: int = 8
    d: int = 128
    bs: int = 16
    dtype: str = "float16"
    decodes: int = 0            # prefill: decode rows added to the call (mixed batch)
    decode_ctx: int = 0
    quick: bool = True          # part of --quick
    tf32: bool = False          # fp32 prefill with allow_tf32 (TF32 tensor cores)


SHAPES: List[Shape] = [
    Shape("decode 1x4096", "decode", 1, 4096),
    Shape("decode 32x4096", "decode", 32, 4096, quick=False),
    Shape("decode 64x8192", "decode", 64, 8192),
    Shape("decode 128x2048", "decode", 128, 2048, quick=False),
    Shape("decode 16x32768", "decode", 16, 32768),
    Shape("decode 256x1024", "decode", 256, 1024, quick=False),
    Shape("decode 64x8192 Hq64/Hkv8", "decode", 64, 8192, hq=64, hkv=8),
    Shape("decode 64x8192 Hq32/Hkv4", "decode", 64, 8192, hq=32, hkv=4, quick=False),
    Shape("decode 32x8192 D256", "decode", 32, 8192, d=256, quick=False),
    Shape("decode 64x8192 block 8", "decode", 64, 8192, bs=8, quick=False),
    Shape("decode 64x8192 block 64", "decode", 64, 8192, bs=64, quick=False),
    Shape("prefill 1x4096", "prefill", 1, 4096),
    Shape("prefill 8x4096", "prefill", 8, 4096, quick=False),
    Shape("prefill 2x16384", "prefill", 2, 16384, quick=False),
    Shape("extend 8x1024 over 3072", "prefill", 8, 1024, cached=3072),
    Shape("mixed 4x512 + 60 dec@2048", "prefill", 4, 512, decodes=60, decode_ctx=2048),
    Shape("  its prefill part 4x512", "prefill", 4, 512),
    Shape("  its decode part 60@2048", "decode", 60, 2049),
    Shape("prefill 1x4096 bf16", "prefill", 1, 4096, dtype="bfloat16", quick=False),
    Shape("prefill 2x1000 over 37 fp32", "prefill", 2, 1000, cached=37, dtype="float32"),
    Shape("prefill 2x1000 over 37 tf32", "prefill", 2, 1000, cached=37, dtype="float32", tf32=True),
]


# --cpu-smoke: every kind of row above, small, through libkvblock's CPU kernels (no timing comparison).
SMOKE_SHAPES: List[Shape] = [
    Shape("decode 4x200", "decode", 4, 200),
    Shape("decode 2x100 Hq64/Hkv8", "decode", 2, 100, hq=64, hkv=8),
    Shape("decode 2x100 D256", "decode", 2, 100, d=256),
    Shape("decode 2x150 block 8", "decode", 2, 150, bs=8),
    Shape("decode 2x150 block 64", "decode", 2, 150, bs=64),
    Shape("prefill 1x64", "prefill", 1, 64),
    Shape("extend 2x32 over 40", "prefill", 2, 32, cached=40),
    Shape("mixed 2x16 + 5 dec@50", "prefill", 2, 16, decodes=5, decode_ctx=50),
    Shape("prefill 1x48 bf16", "prefill", 1, 48, dtype="bfloat16"),
    Shape("prefill 2x20 over 37 fp32", "prefill", 2, 20, cached=37, dtype="float32"),
    Shape("prefill 2x20 over 37 tf32", "prefill", 2, 20, cached=37, dtype="float32", tf32=True),
]


# --cpu: libkvblock's CPU kernels against torch's CPU SDPA (flash) on the shapes of the CPU targets:
# prefill >= PREFILL_TARGET x torch's GFLOP/s.
def cpu_shapes(tokens: int = 2048) -> List[Shape]:
    return [Shape(f"{kind} {seqs}x{tokens} {name}", kind, seqs, tokens, dtype=dtype)
            for kind, seqs in (("prefill", 1), ("decode", 8))
            for dtype, name in (("float32", "fp32"), ("bfloat16", "bf16"), ("float16", "fp16"))]


PREFILL_TARGET = 1.5
CPU_RUNS = 5


@dataclass
class Row:
    shape: Shape
    kvb_us: float = math.nan
    rate: str = ""
    work: float = math.nan          # bytes read (decode) or flops (prefill) of libkvblock's call
    torch_work: float = math.nan    # the same for torch's call (decode: every sequence at full length)
    torch_us: Optional[dict] = None
    err: float = math.nan
    ok: bool = False
    note: str = ""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the shapes marked quick only")
    p.add_argument("--out", help="also write the table (markdown) here")
    p.add_argument("--kind", choices=("decode", "prefill"),
                   help="only these shapes (run.sh benches the prefill shapes again with KVB_CUDA_PREFILL=hopper)")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="small shapes on libkvblock's CPU kernels: tests this script where no GPU is")
    p.add_argument("--cpu", action="store_true",
                   help="cpu_shapes() on libkvblock's CPU kernels against torch's CPU SDPA, both timed")
    p.add_argument("--tokens", type=int, help=argparse.SUPPRESS)  # every shape's length (the tests' tiny run)
    a = p.parse_args()
    if a.cpu:
        return _cpu_main(a)
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means: nothing to measure here
        return _skip(a.out, f"torch does not import ({type(e).__name__}: {e})")
    if not a.cpu_smoke and not torch.cuda.is_available():
        return _skip(a.out, "torch has no usable CUDA device")
    import kvblock
    if not a.cpu_smoke and kvblock.cuda_device_count() == 0:
        return _skip(a.out, f"libkvblock ({kvblock._lib.LIBRARY_PATH}) sees no CUDA device or was built without CUDA")
    import torch_cases  # noqa: E402 - needs torch
    from torch_timing import copy_ceiling_gbps, gemm_ceiling_tflops

    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be fp32
    torch.backends.cudnn.allow_tf32 = False
    if a.cpu_smoke:
        torch_cases.DEV = "cpu"
        lines = [f"CPU smoke run (no timing comparison): torch {torch.__version__}, "
                 f"library {kvblock._lib.LIBRARY_PATH}"]
        copy = gemm = float("nan")
    else:
        lines = [f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
                 f"library {kvblock._lib.LIBRARY_PATH}"]
        copy, gemm = copy_ceiling_gbps(), gemm_ceiling_tflops()
        lines.append(f"ceilings (torch, same run): D2D copy 1 GiB {copy:,.0f} GB/s (read + write), "
                     f"fp16 GEMM 8192^3 {gemm:,.1f} TFLOP/s")
    print(lines[-1], flush=True)
    rows = []
    for s in (SMOKE_SHAPES if a.cpu_smoke else SHAPES):
        if (a.quick and not s.quick) or (a.kind and s.kind != a.kind):
            continue
        row = Row(s)
        try:
            rotate = 0 if a.cpu_smoke else L2_ROTATE_BYTES
            torch_cases.run_shape(kvblock, s, row, TOL["tf32" if s.tf32 else s.dtype], rotate)
        except Exception as e:  # noqa: BLE001 - one shape's failure is reported, the others still run
            row.note = f"{type(e).__name__}: {e}"[:160]
            row.ok = False
        rows.append(row)
        print(_line(row, copy, gemm), flush=True)
        if not a.cpu_smoke:
            torch.cuda.empty_cache()
    table = _table(rows, copy, gemm)
    return _finish(a.out, lines, table, rows)


def _cpu_main(a: argparse.Namespace) -> int:
    """--cpu: the same cases as the GPU rows (torch_cases on DEV "cpu"), torch timed as well."""
    # torch's OpenMP workers spin for a while after each parallel region (GNU: OMP_WAIT_POLICY, Intel:
    # KMP_BLOCKTIME, 200 ms): on a machine with as many CPUs as threads they then take the CPUs from the
    # next call, libkvblock's threads or torch's own, and both sides measured slower by up to 3x here.
    # Workers that sleep at once: read when the OpenMP runtime loads, so before torch is imported.
    for var, value in (("OMP_WAIT_POLICY", "PASSIVE"), ("KMP_BLOCKTIME", "0")):
        os.environ.setdefault(var, value)
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means: nothing to measure here
        return _skip(a.out, f"torch does not import ({type(e).__name__}: {e})")
    import torch_cases  # noqa: E402 - needs torch
    import torch_timing

    import kvblock

    torch_cases.DEV, torch_cases.CPU_TIMED, torch_timing.CPU_RUNS = "cpu", True, CPU_RUNS
    # libkvblock's kernels start std::thread::hardware_concurrency() threads (capped by the work; the
    # shapes here have enough for all): the CPUs online, which os.cpu_count() also reports.
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    lines = [f"CPU: libkvblock path {kvblock.cpu_isa()} (KVB_CPU_ISA={os.environ.get('KVB_CPU_ISA', 'unset')}), "
             f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), {threads} threads each, "
             f"best of {CPU_RUNS} calls, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']} "
             f"KMP_BLOCKTIME={os.environ['KMP_BLOCKTIME']}; library {kvblock._lib.LIBRARY_PATH}"]
    print(lines[-1], flush=True)
    rows = []
    for s in cpu_shapes(a.tokens or 2048):
        row = Row(s)
        try:
            torch_cases.run_shape(kvblock, s, row, TOL[s.dtype], 0)
        except Exception as e:  # noqa: BLE001 - one shape's failure is reported, the others still run
            row.note = f"{type(e).__name__}: {e}"[:160]
            row.ok = False
        rows.append(row)
        print("  " + " | ".join(_cpu_cells(row)), flush=True)
    table = ["| " + " | ".join(CPU_HEADER) + " |", "|" + "---|" * len(CPU_HEADER)]
    table += ["| " + " | ".join(_cpu_cells(r)) + " |" for r in rows]
    table += ["", "Decode rate: K+V bytes read (torch: every sequence at full length); prefill: causal flops "
              f"(4 Hq D per pair). Target (prefill): libkvblock >= {PREFILL_TARGET}x torch's GFLOP/s. "
              "torch: SDPA flash on contiguous K/V (\"rep\": K/V repeated to Hq heads before the timing)."]
    return _finish(a.out, lines, table, rows)


CPU_HEADER = ["shape", "kvb us", "kvb rate", "torch us", "torch rate", "kvb / torch rate", "target", "rel err",
              "pass"]


def _cpu_cells(row: Row) -> List[str]:
    t = (row.torch_us or {}).get("flash")
    unit = "GFLOP/s" if row.shape.kind == "prefill" else "GB/s"
    torch_rate = ratio = target = "-"
    if t is not None and not math.isnan(row.kvb_us):
        torch_rate = f"{row.torch_work / (t[0] * 1e-6) / 1e9:.1f} {unit}"
        r = (row.work / row.kvb_us) / (row.torch_work / t[0])
        ratio = f"{r:.2f}"
        if row.shape.kind == "prefill":
            met = r >= PREFILL_TARGET
            target = f">= {PREFILL_TARGET}: " + ("met" if met else f"not ({r / PREFILL_TARGET:.2f} of it)")
    err = "-" if math.isnan(row.err) else f"{row.err:.1e}"
    torch_us = "n/a" if t is None else _fmt_us(t[0]) + (" (rep)" if "rep" in t[1] else "")
    return [row.shape.name, _fmt_us(row.kvb_us), row.rate or "-", torch_us, torch_rate, ratio, target, err,
            ("pass" if row.ok else "FAIL") + (f" ({row.note})" if row.note else "")]


def _finish(out: Optional[str], lines: List[str], table: List[str], rows: List[Row]) -> int:
    """Prints the header lines and the table, writes them to out; the exit status: 1 when a row failed."""
    text = "\n".join(lines + [""] + table)
    print("\n" + text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    return 0 if all(r.ok for r in rows) else 1


def _skip(out: Optional[str], why: str) -> int:
    print(f"python GPU bench skipped: {why}")
    if out:
        with open(out, "w") as f:
            f.write(f"python GPU bench skipped: {why}\n")
    return 0


def _fmt_us(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:,.1f}"


def _torch_cell(row: Row, key: str) -> str:
    t = (row.torch_us or {}).get(key)
    if t is None:
        return "n/a"
    us, how = t
    return _fmt_us(us) + ("" if how == "graph" else f" ({how})")


def _ratio(row: Row) -> str:
    best = [t[0] for t in (row.torch_us or {}).values() if t is not None and not math.isnan(t[0])]
    if not best or math.isnan(row.kvb_us):
        return "-"
    return f"{row.kvb_us / min(best):.2f}"


HEADER = ["shape", "kvb us", "kvb rate", "of ceiling", "flash us", "cudnn us", "efficient us",
          "kvb / fastest torch", "rel err", "pass"]


def _cells(row: Row, copy: float, gemm: float) -> List[str]:
    of = "-"
    if math.isnan(copy) or math.isnan(gemm):
        pass
    elif row.rate.endswith("TB/s"):
        of = f"{100 * float(row.rate.split()[0]) * 1e3 / copy:.0f}% of copy"
    elif row.rate.endswith("TFLOP/s"):
        of = f"{100 * float(row.rate.split()[0]) / gemm:.0f}% of GEMM"
    err = "-" if math.isnan(row.err) else f"{row.err:.1e}"
    return [row.shape.name, _fmt_us(row.kvb_us), row.rate or "-", of, _torch_cell(row, "flash"),
            _torch_cell(row, "cudnn"), _torch_cell(row, "efficient"), _ratio(row), err,
            ("pass" if row.ok else "FAIL") + (f" ({row.note})" if row.note else "")]


def _line(row: Row, copy: float, gemm: float) -> str:
    return "  " + " | ".join(_cells(row, copy, gemm))


def _table(rows: List[Row], copy: float, gemm: float) -> List[str]:
    out = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    out += ["| " + " | ".join(_cells(r, copy, gemm)) + " |" for r in rows]
    out.append("")
    out.append("kvb: CUDA-graph replays of the package's call (kernel time); torch columns likewise (\"eager\": "
               "capture failed, launch overhead included; \"rep\": K/V repeated to Hq heads). Decode rate: K+V "
               "bytes read; prefill: causal flops. Fastest torch: the smallest of the torch columns.")
    return out


if __name__ == "__main__":
    sys.exit(main())
