"""python -m kvblock.engine --model DIR | --bench: the torch engine on a Hugging Face format checkpoint (Llama,
Qwen2, Mistral; config.json + *.safetensors in a local directory, never downloaded), or its benchmark.

  --model DIR --text "..."        generate from text (needs `tokenizers` and DIR/tokenizer.json)
  --model DIR --ids 1,2,3         generate from token ids (printed back as ids, and as text if possible)
  --bench [--model DIR]           64 sequences: tokens/s with and without CUDA graphs, and the share of
                                  step time in the manager, the kernels, the matmuls, elementwise ops and
                                  Python (without --model: a random Llama of hidden 512, 4 layers, vocab
                                  32000)"""
from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any, Dict, List, Optional

import numpy as np


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


def bench_model_dir(tmp: str) -> str:
    from .checkpoint import write_tiny_checkpoint
    d, _ = write_tiny_checkpoint(tmp, "llama", vocab=32000, hidden=512, ffn=1536, num_layers=4, num_q_heads=8,
                                 num_kv_heads=2, max_positions=4096)
    return str(d)


def _engine(model: Any, a: argparse.Namespace, *, cuda_graph: bool, profile: bool = False) -> Any:
    from .engine import EngineConfig
    from .torch_engine import TorchEngine
    cfg = EngineConfig(num_blocks=a.num_blocks, block_size=a.block_size, num_host_blocks=a.host_blocks,
                       host_cache=a.host_cache, max_num_seqs=a.max_seqs, max_batched_tokens=a.budget,
                       preemption=a.preemption, prefix_caching=not a.no_prefix_caching)
    return TorchEngine(model, cfg, cuda_graph=cuda_graph, profile=profile)


def bench(model: Any, a: argparse.Namespace, modes: Optional[List[str]] = None) -> Dict[str, Dict[str, float]]:
    """Runs the same synthetic workload (a.requests sequences, a shared prefix, a.max_tokens each) in each
    mode: "graphs" (CUDA only), "eager", "profile" (eager, device synchronised around every timed part)."""
    from .sequence import Request
    cuda = model.device.type == "cuda"
    modes = modes or (["graphs"] if cuda else []) + ["eager", "profile"]
    rng = np.random.default_rng(a.seed)
    shared = rng.integers(0, model.cfg.vocab, a.shared_prefix).tolist()
    prompts = [shared + rng.integers(0, model.cfg.vocab, a.prompt).tolist() for _ in range(a.requests)]
    results: Dict[str, Dict[str, float]] = {}
    for mode in modes:
        eng = _engine(model, a, cuda_graph=mode == "graphs", profile=mode == "profile")
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


def print_bench(results: Dict[str, Dict[str, float]], model: Any, a: argparse.Namespace) -> None:
    c = model.cfg
    print(f"torch engine bench: {c.model_type}, {c.num_layers} layers, hidden {c.hidden}, {c.num_q_heads}/"
          f"{c.num_kv_heads} q/kv heads, vocab {c.vocab}, {model.dtype_name} on {model.device}; {a.requests} "
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


def main(a: argparse.Namespace) -> None:
    try:
        import torch
    except Exception as e:
        raise SystemExit(f"--model / --bench need torch (and safetensors): {type(e).__name__}: {e}")
    from .checkpoint import load_tokenizer
    from .sequence import Request
    from .torch_model import TorchModel
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = a.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    max_len = a.num_blocks * a.block_size
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = a.model or bench_model_dir(tmp)
        model = TorchModel.from_pretrained(model_dir, device, dtype, max_len=max_len)
    if a.bench:
        modes = None
        if a.no_cuda_graph:
            modes = ["eager", "profile"]
        print_bench(bench(model, a, modes), model, a)
        return
    tok = load_tokenizer(model_dir)
    prompts = [[int(x) for x in s.split(",") if x.strip()] for s in a.ids]
    if a.text:
        if tok is None:
            raise SystemExit(f"--text needs the `tokenizers` package and {model_dir}/tokenizer.json")
        prompts += [tok.encode(t).ids for t in a.text]
    if not prompts:
        raise SystemExit("--model needs a prompt: --text '...' or --ids 1,2,3 (or --bench)")
    eng = _engine(model, a, cuda_graph=not a.no_cuda_graph)
    for r, p in enumerate(prompts):
        eng.add_request(Request(r, p, a.max_tokens, n=a.n, temperature=a.temperature, seed=a.seed))
    out = eng.run()
    for r in range(len(prompts)):
        for s in out[r]:
            print(f"request {r} sample {s.index}: ids {s.output}")
            if tok is not None:
                print(f"  text: {tok.decode(s.output)!r}")
    m = eng.metrics
    print(f"{m.generated_tokens} tokens in {m.total_s:.2f} s ({m.generated_tokens / m.total_s:.0f} tokens/s), "
          f"{m.steps} steps, {eng.runner.graph_replays} CUDA graph replays")
