"""GPU check of the torch engine (issue 29), self-contained, no network, about a minute on one H100:

  cd bindings_examples/python
  KVBLOCK_LIB=$PWD/../../build/lib/libkvblock.so python3 examples/engine_gpu_check.py [--quick]

It needs torch with CUDA, safetensors, transformers and a libkvblock built with CUDA. It writes a small
Llama and a small Qwen2 checkpoint (random weights, hidden 512, 4 layers, vocab 32000, GQA 8/2 heads) to a
temporary directory, then on cuda:0:
  1. fp32: greedy tokens of the engine == transformers' (eager attention, full recomputation), in runs with
     prefix hits, chunked prefill and preemption by recompute (both models), and for Llama also preemption
     by swap with fork (n=2, copy-on-write) and the host prefix cache; CUDA graphs on, take_fault every step;
  2. fp16 and bf16: the engine's logits against transformers' in the same dtype on the engine's tokens
     (teacher forcing): max |diff|, that relative to the largest |logit|, top-1 agreement;
  2b. fp8 K/V (issue 23): a bf16 model with float8_e4m3fn caches (per-layer scales from a calibration
     prefill) against the same requests with bf16 K/V: max |logit diff| relative to the largest |logit|,
     top-1 agreement (SKIP where the library refuses fp8 prefill on CUDA with KVB_ERR_UNSUPPORTED);
  3. a bad block id injected into a decode step that replays a graph: the step raises KernelFault;
  4. the bench: 64 sequences with CUDA graphs, without, and a profiled run (time shares).
Prints one summary table; exit status 1 if a check fails."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from typing import Any, Dict, List, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kvblock import library_version  # noqa: E402
from kvblock.engine import EngineConfig, Request, Seq  # noqa: E402
from kvblock.engine.checkpoint import write_tiny_checkpoint  # noqa: E402
from kvblock.engine.hf_reference import compare_logits, hf_greedy, hf_logits, load_hf  # noqa: E402
from kvblock.engine.serve import bench  # noqa: E402
from kvblock.engine.step import StepBatch  # noqa: E402
from kvblock.engine.torch_engine import TorchEngine  # noqa: E402
from kvblock.engine.torch_model import TorchModel  # noqa: E402
from kvblock.kernels import cuda_device_count  # noqa: E402

# Stated tolerances: |engine - transformers| / max |logit| (same dtype, same tokens), and top-1 agreement.
TOL = {"float16": (1e-2, 0.95), "bfloat16": (4e-2, 0.85)}
FP8_TOL = (5e-2, 0.8)  # fp8_e4m3 K/V against bf16 K/V, the same model (the CPU test measured 0.9% relative)
ROWS: List[Tuple[str, str, str]] = []  # (check, "PASS" or "FAIL", detail)
Run = Tuple[str, int, Dict[str, Any]]  # an engine run: label, samples per request, EngineConfig fields
DEVICE = "cuda"  # --device cpu: a dry run of the script's logic where there is no GPU (no graphs there)


def report(check: str, ok: bool, detail: str) -> None:
    ROWS.append((check, "PASS" if ok else "FAIL", detail))
    print(f"[{'PASS' if ok else 'FAIL'}] {check}: {detail}", flush=True)


def prompts(vocab: int, n: int, shared: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    prefix = rng.integers(0, vocab, shared).tolist()
    return [prefix + rng.integers(0, vocab, 10 + 9 * i).tolist() for i in range(n)]


def run_engine(model_dir: str, dtype: str, ps: List[List[int]], max_tokens: int, n: int = 1, record: bool = False,
               **cfg: Any) -> Tuple[Dict[int, List[Seq]], TorchEngine, float]:
    model = TorchModel.from_pretrained(model_dir, DEVICE, dtype, max_len=1024)
    eng = TorchEngine(model, EngineConfig(record_logits=record, **cfg))
    for i, p in enumerate(ps):
        eng.add_request(Request(i, p, max_tokens, n=n))
    t0 = time.perf_counter()
    out = eng.run()
    return out, eng, time.perf_counter() - t0


def check_fp32(name: str, model_dir: str, vocab: int, full: bool) -> None:
    ps = prompts(vocab, 8, 64, seed=1)
    hf = load_hf(model_dir, DEVICE, "float32")
    refs = [hf_greedy(hf, p, 24) for p in ps]
    runs: List[Run] = [("recompute", 1, dict(num_blocks=28, block_size=16, max_num_seqs=8, max_batched_tokens=96))]
    if full:
        runs += [("swap+fork", 2, dict(num_blocks=36, block_size=16, max_num_seqs=8, max_batched_tokens=96,
                                       num_host_blocks=128, preemption="swap"))]
    for label, n, cfg in runs:
        out, eng, dt = run_engine(model_dir, "float32", ps, 24, n=n, **cfg)
        m, st = eng.metrics, eng.mgr.stats()
        same = sum(all(s.output == refs[i] for s in out[i]) for i in range(len(ps)))
        preempted = m.preemptions + m.swaps_out
        ok = (same == len(ps) and st["hit_tokens"] > 0 and preempted > 0
              and (eng.runner.graph_replays > 0 or DEVICE == "cpu"))
        report(f"{name} fp32 tokens == transformers ({label})", ok,
               f"{same}/{len(ps)} requests equal; {st['hit_tokens']} prefix-hit tokens, {m.preemptions} recomputed, "
               f"{m.swaps_out} swapped out, {m.cow_copies} CoW copies, {m.steps} steps, "
               f"{eng.runner.graph_replays} graph replays, {dt:.2f} s")
    if full:  # the host prefix cache: prefixes evicted from a small pool come back from host blocks
        ps2 = [prompts(vocab, 1, 96, seed=10 + f)[0] for f in range(3)] * 2
        refs2 = [hf_greedy(hf, p, 8) for p in ps2]
        out, eng, dt = run_engine(model_dir, "float32", ps2, 8, num_blocks=16, block_size=16, max_num_seqs=1,
                                  max_batched_tokens=128, num_host_blocks=64, host_cache=True)
        same = sum(out[i][0].output == refs2[i] for i in range(len(ps2)))
        report(f"{name} fp32 tokens == transformers (host cache)", same == len(ps2) and eng.metrics.loaded_blocks > 0,
               f"{same}/{len(ps2)} equal; {eng.metrics.offloaded_blocks} blocks offloaded, "
               f"{eng.metrics.loaded_blocks} loaded")
    del hf
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def check_low_precision(name: str, model_dir: str, vocab: int, dtype: str) -> None:
    ps = prompts(vocab, 8, 64, seed=2)
    out, eng, dt = run_engine(model_dir, dtype, ps, 16, record=True, num_blocks=28, block_size=16,
                              max_num_seqs=8, max_batched_tokens=96)
    hf = load_hf(model_dir, DEVICE, dtype)
    mine, ref = [], []  # every generated position of every request, pooled
    for i, p in enumerate(ps):
        s = out[i][0]
        mine += s.logits
        ref.append(hf_logits(hf, p + s.output, len(p)))
    worst = compare_logits(mine, np.concatenate(ref))
    rel_tol, top1_tol = TOL[dtype]
    report(f"{name} {dtype} logits vs transformers", worst["rel"] <= rel_tol and worst["top1"] >= top1_tol,
           f"max|diff| {worst['max_abs']:.4f}, relative {worst['rel']:.2e} (tol {rel_tol:.0e}), top-1 "
           f"{100 * worst['top1']:.1f}% of {worst['rows']} rows (tol {100 * top1_tol:.0f}%); "
           f"{eng.metrics.preemptions} preemptions, {eng.runner.graph_replays} graph replays")
    del hf
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def check_fp8(name: str, model_dir: str, vocab: int) -> None:
    from kvblock.engine.kv_quant import calibrate_kv_scales
    from kvblock.engine.kv_quant import compare_logits as compare_runs
    from kvblock.errors import KvbError
    from kvblock.errors import Status as KvbStatus
    ps = prompts(vocab, 8, 64, seed=3)
    dtype = "bfloat16"
    model = TorchModel.from_pretrained(model_dir, DEVICE, dtype, max_len=1024)
    scales = calibrate_kv_scales(model, ps[0], "float8_e4m3")
    runs = []
    t0 = time.perf_counter()
    for kv_dtype, kv_scales in ((dtype, None), ("float8_e4m3", scales)):
        eng = TorchEngine(model, EngineConfig(record_logits=True, kv_dtype=kv_dtype, kv_scales=kv_scales,
                                              num_blocks=28, block_size=16, max_num_seqs=8, max_batched_tokens=96))
        for i, p in enumerate(ps):
            eng.add_request(Request(i, p, 16))
        try:
            runs.append(eng.run())
        except KvbError as e:
            if e.status != KvbStatus.UNSUPPORTED or kv_dtype == dtype:
                raise
            ROWS.append((f"{name} fp8_e4m3 K/V vs {dtype} K/V", "SKIP", f"the library refuses: {e}"))
            print(f"[SKIP] {name} fp8_e4m3 K/V: the library refuses: {e}", flush=True)
            return
    cmp = compare_runs(runs[0], runs[1])
    largest = max(float(np.abs(x).max()) for seqs in runs[0].values() for s in seqs for x in s.logits)
    rel = cmp["max_abs_diff"] / largest
    rel_tol, top1_tol = FP8_TOL
    report(f"{name} fp8_e4m3 K/V vs {dtype} K/V", rel <= rel_tol and cmp["top1_agreement"] >= top1_tol,
           f"max|diff| {cmp['max_abs_diff']:.4f}, relative {rel:.2e} (tol {rel_tol:.0e}), top-1 "
           f"{100 * cmp['top1_agreement']:.1f}% of {cmp['positions']} positions (tol {100 * top1_tol:.0f}%); "
           f"k scales {', '.join(f'{x:.3g}' for x in scales[0])}; {time.perf_counter() - t0:.2f} s both runs")
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def check_fault_surfaces(model_dir: str, vocab: int) -> None:
    """A block id past the pool, put into one decode step that replays a graph: the kernel records the fault
    on the device and the step's take_fault raises KernelFault."""
    from kvblock.errors import KernelFault

    class FaultyEngine(TorchEngine):
        injected = False

        def _prepare(self, decodes: List[Seq], prefills: List[Tuple[Seq, int]]) -> StepBatch:
            b = super()._prepare(decodes, prefills)
            if decodes and not prefills and self.runner.graph_replays >= 2 and not self.injected:
                b.per_group[0][1][0, 0] = 10 ** 6  # block id of the first decode row's first block
                self.injected = True
            return b

    model = TorchModel.from_pretrained(model_dir, DEVICE, "float32", max_len=1024)
    eng = FaultyEngine(model, EngineConfig(num_blocks=64, block_size=16, max_num_seqs=4))
    for i, p in enumerate(prompts(vocab, 4, 16, seed=3)):
        eng.add_request(Request(i, p, 12))
    try:
        eng.run()
        report("fault in a graph replay -> KernelFault", False, f"no exception (injected: {eng.injected})")
    except KernelFault as e:
        replayed = eng.runner.graph_replays  # the faulty step counts its replay before take_fault raises
        report("fault in a graph replay -> KernelFault", eng.injected and e.value == 10 ** 6 and replayed >= 3,
               f"{e} (after {replayed} graph replays)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="Llama only, no swap / host-cache runs, smaller bench")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: a dry run of this script (use with --tiny)")
    ap.add_argument("--tiny", action="store_true", help="vocab 512, hidden 256, 2 layers (CPU dry runs)")
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return 0
    if DEVICE == "cuda" and cuda_device_count() == 0:
        print("FAIL: libkvblock sees no CUDA device (a library built with CUDA=0?)")
        return 1
    torch.set_float32_matmul_precision("highest")  # fp32 means fp32 (no TF32) for both sides
    t_start = time.perf_counter()
    where = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu"
    print(f"libkvblock {library_version()}, torch {torch.__version__}, {where}")
    sizes: Dict[str, Any] = (
        dict(vocab=512, hidden=256, ffn=512, num_layers=2, num_q_heads=4, num_kv_heads=2) if a.tiny else
        dict(vocab=32000, hidden=512, ffn=1536, num_layers=4, num_q_heads=8, num_kv_heads=2))
    with tempfile.TemporaryDirectory() as tmp:
        models = [("llama", False), ("qwen2", True)][: 1 if a.quick else 2]
        for arch, tied in models:
            d, cfg = write_tiny_checkpoint(os.path.join(tmp, arch), arch, tie_embeddings=tied, seed=11, **sizes)
            name = f"{arch}{' (tied)' if tied else ''}"
            for step in (lambda: check_fp32(name, str(d), cfg.vocab, arch == "llama" and not a.quick),
                         lambda: check_low_precision(name, str(d), cfg.vocab, "float16"),
                         lambda: check_low_precision(name, str(d), cfg.vocab, "bfloat16"),
                         lambda: check_fp8(name, str(d), cfg.vocab)):
                try:
                    step()
                except Exception as e:  # one failed check must not hide the others
                    traceback.print_exc()
                    report(f"{name} check", False, f"{type(e).__name__}: {e}")
            if arch == "llama" and DEVICE == "cuda":
                try:
                    check_fault_surfaces(str(d), cfg.vocab)
                except Exception as e:
                    traceback.print_exc()
                    report("fault in a graph replay -> KernelFault", False, f"{type(e).__name__}: {e}")
        # The bench: 64 sequences, bf16, with and without CUDA graphs, then the profiled breakdown.
        bench_dir = os.path.join(tmp, "llama")
        ns = argparse.Namespace(requests=8 if a.tiny else 64, shared_prefix=128, prompt=64,
                                max_tokens=8 if a.tiny else 64 if a.quick else 128,
                                seed=0, num_blocks=2048, block_size=16, host_blocks=0, host_cache=False,
                                max_seqs=64, budget=4096, preemption="recompute", no_prefix_caching=False)
        try:
            model = TorchModel.from_pretrained(bench_dir, DEVICE, "bfloat16" if DEVICE == "cuda" else "float32",
                                               max_len=2048)
            res = bench(model, ns)
            g, eager, p = res.get("graphs", res["eager"]), res["eager"], res["profile"]
            report(f"bench {ns.requests} seqs {model.dtype_name} (llama)", True,
                   f"graphs {g['tokens_per_s']:.0f} tok/s ({g['step_ms']:.2f} ms/step, decode forward "
                   f"{g['decode_ms']:.2f} ms), eager {eager['tokens_per_s']:.0f} tok/s "
                   f"({eager['step_ms']:.2f} ms/step, "
                   f"decode forward {eager['decode_ms']:.2f} ms), x{g['tokens_per_s'] / eager['tokens_per_s']:.2f}; "
                   f"profiled eager shares: manager {100 * p['manager']:.1f}%, kernels {100 * p['kernels']:.1f}%, "
                   f"matmuls {100 * p['matmuls']:.1f}%, elementwise {100 * p['elementwise']:.1f}%, Python "
                   f"{100 * p['rest']:.1f}%")
        except Exception as ex:
            traceback.print_exc()
            report(f"bench {ns.requests} seqs (llama)", False, f"{type(ex).__name__}: {ex}")
    print(f"\n{'check':58s} {'result':6s} detail")
    for check, result, detail in ROWS:
        print(f"{check:58s} {result:6s} {detail}")
    failed = sum(r == "FAIL" for _, r, _ in ROWS)
    skipped = sum(r == "SKIP" for _, r, _ in ROWS)
    print(f"\n{len(ROWS) - failed - skipped} passed, {failed} failed, {skipped} skipped in "
          f"{time.perf_counter() - t_start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
