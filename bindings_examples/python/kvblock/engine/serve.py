"""python -m kvblock.engine --model DIR | --bench: the torch engine on a Hugging Face format checkpoint (Llama,
Qwen2, Mistral; config.json + *.safetensors in a local directory, never downloaded), or its benchmark.

  --model DIR --text "..."        generate from text (needs `tokenizers` and DIR/tokenizer.json)
  --model DIR --ids 1,2,3         generate from token ids (printed back as ids, and as text if possible)
  --bench [--model DIR]           64 sequences: tokens/s with and without CUDA graphs, and the share of
                                  step time in the manager, the kernels, the matmuls, elementwise ops and
                                  Python (without --model: a random Llama of hidden 512, 4 layers, vocab
                                  32000)

--kv-dtype fp8_e4m3 / fp8_e5m2: K/V in torch float8 caches with per-layer scales from a dense calibration
prefill of the first prompt (kv_quant.py); the same requests then run with 16-bit K/V, and the top-1
agreement and max |logit diff| between the two are printed (--bench: tokens/s of both, and the logits of its
first requests). --store dir:PATH | redis://...: the store tier below the host cache (--host-cache), keys
namespaced by the checkpoint (checkpoint_id) unless --store-model-id says otherwise."""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

COMPARED_REQUESTS = 8  # --bench with fp8 K/V: the requests whose logits are compared (they are recorded)


def torch_placement(a: argparse.Namespace, torch: Any) -> Tuple[str, str]:
    """--threads applied (torch's and BLAS's), then the device and dtype: --device / --dtype, else the GPU
    in bfloat16 when torch sees one, the CPU in float32 otherwise (serve and the one-shot CLI alike)."""
    if a.threads:
        from .blas import limit_threads
        torch.set_num_threads(a.threads)
        limit_threads(a.threads)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = a.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    return device, dtype


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("torch engine (--model / --bench)")
    g.add_argument("--model", metavar="DIR", help="Hugging Face format checkpoint directory (local only)")
    g.add_argument("--bench", action="store_true", help="benchmark the torch engine (64 sequences by default)")
    g.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    g.add_argument("--dtype", default=None, choices=["float32", "float16", "bfloat16"],
                   help="default: bfloat16 on CUDA, float32 on the CPU")
    g.add_argument("--text", action="append", default=[], help="a prompt as text (repeatable)")
    g.add_argument("--ids", action="append", default=[], help="a prompt as comma-separated token ids (repeatable)")
    g.add_argument("--no-cuda-graph", action="store_true", help="run decode steps eagerly (no CUDA graphs)")
    g.add_argument("--threads", type=_threads, default=0, metavar="N",
                   help="CPU threads of torch (torch.set_num_threads) and of numpy's BLAS (default: theirs)")


def _threads(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def bench_model_dir(tmp: str) -> str:
    from .checkpoint import write_tiny_checkpoint
    d, _ = write_tiny_checkpoint(tmp, "llama", vocab=32000, hidden=512, ffn=1536, num_layers=4, num_q_heads=8,
                                 num_kv_heads=2, max_positions=4096)
    return str(d)


class KVSetup(NamedTuple):
    """The run's K/V cache dtype (None: the model's) and, for fp8, the calibrated per-layer scales."""
    dtype: Optional[str] = None
    scales: Optional[Tuple[List[float], List[float]]] = None


def kv_setup(model: Any, a: argparse.Namespace, calibration_prompt: Sequence[int]) -> KVSetup:
    """--kv-dtype; fp8 scales from a dense calibration prefill of `calibration_prompt` (kv_quant.py)."""
    from .config import KV_DTYPE_FLAGS
    from .kv_quant import calibrate_kv_scales
    dtype = KV_DTYPE_FLAGS[a.kv_dtype] if a.kv_dtype else None
    if dtype is None or not dtype.startswith("float8"):
        return KVSetup(dtype)
    return KVSetup(dtype, calibrate_kv_scales(model, calibration_prompt, dtype))


def reference_dtype(model: Any) -> str:
    """The 16-bit K/V dtype an fp8 run is compared with: the model's if 16-bit, else float16."""
    return model.dtype_name if model.dtype_name in ("float16", "bfloat16") else "float16"


def _engine(model: Any, a: argparse.Namespace, *, cuda_graph: bool, profile: bool = False,
            kv: KVSetup = KVSetup(), record_logits: bool = False, store: bool = True, draft: Any = None) -> Any:
    from . import speculative
    from .engine import EngineConfig
    from .torch_engine import TorchEngine
    cfg = EngineConfig(num_blocks=a.num_blocks, block_size=a.block_size, num_host_blocks=a.host_blocks,
                       host_cache=a.host_cache, max_num_seqs=a.max_seqs, max_batched_tokens=a.budget,
                       preemption=a.preemption, prefix_caching=not a.no_prefix_caching, kv_dtype=kv.dtype,
                       kv_scales=kv.scales, record_logits=record_logits,
                       store=getattr(a, "store", None) if store else None,
                       store_model_id=getattr(a, "store_model_id", None), **speculative.config_fields(a))
    return TorchEngine(model, cfg, cuda_graph=cuda_graph, profile=profile, draft_model=draft)


def compare_with_16bit(model: Any, a: argparse.Namespace, kv: KVSetup, requests: Sequence[Any], *,
                       cuda_graph: bool, fp8_run: Optional[Dict[int, list]] = None) -> List[str]:
    """kv_quant.report's lines (scales, top-1 agreement, max |logit diff|) for `requests` run with fp8 K/V
    (fp8_run: that run's result with logits recorded; None: run here) and with 16-bit K/V, without the store."""
    from .kv_quant import compare_logits, report
    assert kv.dtype is not None and kv.scales is not None
    ref_dtype = reference_dtype(model)

    def run(setup: KVSetup) -> Dict[int, list]:
        eng = _engine(model, a, cuda_graph=cuda_graph, kv=setup, record_logits=True, store=False)
        for r in requests:
            eng.add_request(r)
        out = eng.run()
        eng.close()
        return out

    test = fp8_run if fp8_run is not None else run(kv)
    return report(kv.dtype, kv.scales, compare_logits(run(KVSetup(ref_dtype)), test), ref_dtype)


def bench_prompts(model: Any, a: argparse.Namespace) -> List[List[int]]:
    """The bench's prompts: a.requests of them, a shared prefix and a unique suffix each."""
    rng = np.random.default_rng(a.seed)
    shared = rng.integers(0, model.cfg.vocab, a.shared_prefix).tolist()
    return [shared + rng.integers(0, model.cfg.vocab, a.prompt).tolist() for _ in range(a.requests)]


def bench(model: Any, a: argparse.Namespace, modes: Optional[List[str]] = None,
          kv: KVSetup = KVSetup(), draft: Any = None) -> Dict[str, Dict[str, float]]:
    """Runs the same synthetic workload (a.requests sequences, a shared prefix, a.max_tokens each) in each
    mode: "graphs" (CUDA only), "eager", "profile" (eager, device synchronised around every timed part)."""
    from .sequence import Request
    cuda = model.device.type == "cuda"
    modes = modes or (["graphs"] if cuda else []) + ["eager", "profile"]
    prompts = bench_prompts(model, a)
    results: Dict[str, Dict[str, float]] = {}
    for mode in modes:
        eng = _engine(model, a, cuda_graph=mode == "graphs", profile=mode == "profile", kv=kv, draft=draft)
        for r, p in enumerate(prompts[:2]):  # warm-up: first-call costs of torch and cuBLAS
            eng.add_request(Request(r, p, 4))
        eng.run()
        eng.metrics.__init__()
        eng.runner.decode_steps, eng.runner.decode_s = 0, 0.0
        for r, p in enumerate(prompts):
            eng.add_request(Request(100 + r, p, a.max_tokens))
        if cuda:
            import torch
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        eng.run()
        m = eng.metrics
        m.total_s = time.perf_counter() - t0
        rest = m.total_s - m.manager_s - m.kernel_s - m.matmul_s - m.elementwise_s
        results[mode] = {"tokens_per_s": m.generated_tokens / m.total_s, "total_s": m.total_s, "steps": m.steps,
                         "step_ms": 1000 * m.total_s / max(1, m.steps), "manager": m.manager_s / m.total_s,
                         "kernels": m.kernel_s / m.total_s, "matmuls": m.matmul_s / m.total_s,
                         "elementwise": m.elementwise_s / m.total_s,
                         "rest": rest / m.total_s, "graph_replays": eng.runner.graph_replays,
                         "decode_ms": 1000 * eng.runner.decode_s / max(1, eng.runner.decode_steps),
                         "generated": m.generated_tokens}
    return results


def print_bench(results: Dict[str, Dict[str, float]], model: Any, a: argparse.Namespace,
                kv_dtype: Optional[str] = None) -> None:
    c = model.cfg
    print(f"torch engine bench: {c.model_type}, {c.num_layers} layers, hidden {c.hidden}, {c.num_q_heads}/"
          f"{c.num_kv_heads} q/kv heads, vocab {c.vocab}, {model.dtype_name} on {model.device}, "
          f"{kv_dtype or model.dtype_name} K/V, {_torch_threads()} torch threads; {a.requests} "
          f"sequences x (prefix {a.shared_prefix} + prompt {a.prompt}) -> {a.max_tokens} tokens")
    for mode, r in results.items():
        line = (f"  {mode:8s} {r['tokens_per_s']:9.0f} tokens/s  {r['step_ms']:7.2f} ms/step  "
                f"{int(r['steps'])} steps  decode forward {r['decode_ms']:.2f} ms")
        if mode == "graphs":
            line += f"  ({int(r['graph_replays'])} graph replays)"
        if mode == "profile":
            line += (f"  time share: manager {100 * r['manager']:.1f}%, kernels {100 * r['kernels']:.1f}%, "
                     f"matmuls {100 * r['matmuls']:.1f}%, elementwise {100 * r['elementwise']:.1f}%, Python "
                     f"{100 * r['rest']:.1f}%")
        print(line)


def _torch_threads() -> int:
    import torch
    return torch.get_num_threads()


def main(a: argparse.Namespace) -> None:
    try:
        import torch
    except Exception as e:
        raise SystemExit(f"--model / --bench need torch (and safetensors): {type(e).__name__}: {e}")
    from ..errors import KvbArgumentError
    from .checkpoint import CheckpointError, checkpoint_id, load_tokenizer
    from .generation import Generation, SamplingParams, eos_token_ids
    from .sequence import Request
    from .speculative import load_draft_model, summary_lines
    from .torch_model import TorchModel
    device, dtype = torch_placement(a, torch)
    max_len = a.num_blocks * a.block_size
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = a.model or bench_model_dir(tmp)
        try:
            model = TorchModel.from_pretrained(model_dir, device, dtype, max_len=max_len)
        except (CheckpointError, FileNotFoundError) as e:  # one line, as argparse reports a usage error
            print("python -m kvblock.engine: error: " + " ".join(str(e).split()), file=sys.stderr)
            raise SystemExit(2) from None
        if a.store and a.store_model_id is None:
            a.store_model_id = checkpoint_id(model_dir)
        draft = load_draft_model(a, model, model_dir, device, dtype, max_len)
    if a.bench:
        modes = None
        if a.no_cuda_graph:
            modes = ["eager", "profile"]
        kv = kv_setup(model, a, bench_prompts(model, a)[0])
        if kv.scales is None:
            print_bench(bench(model, a, modes, kv, draft), model, a, kv.dtype)
            return
        # fp8: the 16-bit K/V bench first, in the same process (the same load, warm caches), then fp8
        ref = KVSetup(reference_dtype(model))
        print_bench(bench(model, a, modes, ref, draft), model, a, ref.dtype)
        print_bench(bench(model, a, modes, kv, draft), model, a, kv.dtype)
        few = [Request(r, p, a.max_tokens) for r, p in enumerate(bench_prompts(model, a)[:COMPARED_REQUESTS])]
        print(f"logits of the first {len(few)} bench requests (eager):")
        print("\n".join(compare_with_16bit(model, a, kv, few, cuda_graph=False)))
        return
    tok = load_tokenizer(model_dir)
    prompts = [[int(x) for x in s.split(",") if x.strip()] for s in a.ids]
    if a.text:
        if tok is None:
            raise SystemExit(f"--text needs the `tokenizers` package and {model_dir}/tokenizer.json")
        prompts += [tok.encode(t).ids for t in a.text]
    if not prompts:
        raise SystemExit("--model needs a prompt: --text '...' or --ids 1,2,3 (or --bench)")
    kv = kv_setup(model, a, prompts[0])
    fp8 = kv.scales is not None
    try:
        eng = _engine(model, a, cuda_graph=not a.no_cuda_graph, kv=kv, record_logits=fp8, draft=draft)
    except KvbArgumentError as e:  # a store nobody answers at, a directory that cannot be made: one line
        if not a.store:
            raise
        print(f"python -m kvblock.engine: error: --store {a.store}: {e.message}", file=sys.stderr)
        raise SystemExit(2) from None
    eng.generation = Generation(eos_token_ids(model_dir), tok)  # it stops at the checkpoint's EOS
    params = SamplingParams(max_tokens=a.max_tokens, temperature=a.temperature, n=a.n, seed=a.seed)
    requests = [Request(r, p, a.max_tokens, n=a.n, seed=a.seed, params=params) for r, p in enumerate(prompts)]
    for req in requests:
        eng.add_request(req)
    out = eng.run()
    flushed = eng.flush_to_store()
    store_line = eng.store.summary(flushed) if eng.store is not None else ""
    eng.close()
    for r in range(len(prompts)):
        for s in out[r]:
            print(f"request {r} sample {s.index}: ids {s.output} ({s.finish_reason})")
            if tok is not None:
                print(f"  text: {tok.decode(s.output)!r}")
    m = eng.metrics
    print(f"{m.generated_tokens} tokens in {m.total_s:.2f} s ({m.generated_tokens / m.total_s:.0f} tokens/s), "
          f"{m.steps} steps, {eng.runner.graph_replays} CUDA graph replays; {kv.dtype or model.dtype_name} K/V, "
          f"{_torch_threads()} torch threads")
    for line in summary_lines(eng):
        print(line)
    if store_line:
        print(store_line)
    if fp8:
        print("\n".join(compare_with_16bit(model, a, kv, requests, cuda_graph=not a.no_cuda_graph, fp8_run=out)))
