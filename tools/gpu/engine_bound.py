"""The torch engine's decode step at a real model's shape against the bytes one step must read.

    python3 tools/gpu/engine_bound.py [--seqs 64,256] [--prompt 1024] [--steps 32] [--out table.md]
    python3 tools/gpu/engine_bound.py --device cpu --tiny      (no GPU: a dry run of the same code)

Llama-3-8B's configuration (32 layers, hidden 4096, 32 / 8 heads of 128, FFN 14336, vocab 128256), random
bf16 weights made on the device (nothing downloaded), bf16 K/V, blocks of 16, CUDA graphs. For each batch
size: that many requests of `--prompt` random tokens run through the engine (prefill, then decode); every
decode-only step with the whole batch is timed on the host clock around `Engine.step()` (scheduler and
manager, inputs, the graph replay, sampling: all a user waits for), the manager's calls timed inside it.

The bound of one step: the weights every token passes through (all but the embedding table, of which a step
reads one row per sequence) plus the K and V the step's sequences attend (their lengths, every layer), over
the device's copy rate measured in the same run (1 GiB device-to-device copy, read + write counted, as
bench_torch.py's ceiling). Target: step time <= 1.3 x bound. Exit status 1 when a request does not get
all its tokens or a run fails, not on the target (a measurement, not a test); without a GPU it says so and exits 0."""
from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import time
from typing import Any, Dict, List

TARGET = 1.3
LLAMA3_8B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
             "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 8192,
             "tie_word_embeddings": False, "hidden_act": "silu"}
TINY = dict(LLAMA3_8B, vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=64)


def random_weights(cfg: Any, torch: Any, device: str, dtype: Any, seed: int = 0) -> Dict[str, Any]:
    """Hugging Face names -> random tensors made on the device, scaled so activations stay near unit size."""
    g = torch.Generator(device=device).manual_seed(seed)
    h, qd, kvd = cfg.hidden, cfg.num_q_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim

    def w(out_f: int, in_f: int, scale: float = 1.0) -> Any:
        return (torch.randn(out_f, in_f, generator=g, device=device, dtype=dtype) * (scale / math.sqrt(in_f)))

    def norm(n: int) -> Any:
        return torch.ones(n, device=device, dtype=dtype)

    t = {"model.embed_tokens.weight": torch.randn(cfg.vocab, h, generator=g, device=device, dtype=dtype),
         "model.norm.weight": norm(h), "lm_head.weight": w(cfg.vocab, h, 3.0)}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": norm(h), p + "post_attention_layernorm.weight": norm(h),
                  p + "self_attn.q_proj.weight": w(qd, h), p + "self_attn.k_proj.weight": w(kvd, h),
                  p + "self_attn.v_proj.weight": w(kvd, h), p + "self_attn.o_proj.weight": w(h, qd, 0.5),
                  p + "mlp.gate_proj.weight": w(cfg.ffn, h), p + "mlp.up_proj.weight": w(cfg.ffn, h),
                  p + "mlp.down_proj.weight": w(h, cfg.ffn, 0.5)})
    return t


def weight_bytes_per_step(model: Any) -> int:
    """Bytes of the weights one decode step reads in full: every layer's tensors, the final norm, lm_head."""
    layer = sum(x.numel() * x.element_size() for lw in model.layers for x in lw.values() if x is not None)
    return layer + model.final_norm.numel() * model.final_norm.element_size() + \
        model.lm_head.numel() * model.lm_head.element_size()


def copy_rate(torch: Any, device: str) -> float:
    """Bytes per second of a device copy, read + write counted (the CPU dry run: a host copy)."""
    if device == "cuda":
        from torch_timing import copy_ceiling_gbps
        return copy_ceiling_gbps() * 1e9
    src = torch.randint(0, 255, (1 << 26,), dtype=torch.uint8)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t0 = time.perf_counter()
    dst.copy_(src)
    return 2 * src.numel() / (time.perf_counter() - t0)


def run_batch(model: Any, seqs: int, prompt: int, steps: int, kv_token_bytes: int,
              w_bytes: int, rate: float) -> Dict[str, Any]:
    """One engine run of `seqs` requests; the decode-only steps with all of them, timed."""
    import numpy as np

    from kvblock.engine import EngineConfig, Request
    from kvblock.engine.torch_engine import TorchEngine
    bs = 16
    per_seq = -(-(prompt + steps + 2) // bs)
    cfg = EngineConfig(num_blocks=seqs * per_seq + 64, block_size=bs, max_num_seqs=seqs,
                       max_batched_tokens=max(8192, seqs), prefix_caching=True)
    eng = TorchEngine(model, cfg, cuda_graph=True)
    rng = np.random.default_rng(seqs)
    warm = [Request(r, rng.integers(0, model.cfg.vocab, 16).tolist(), 4) for r in range(2)]
    for req in warm:  # first-call costs of torch and cuBLAS outside the timing
        eng.add_request(req)
    eng.run()
    seen: List[Any] = []
    run = eng.runner.run

    def watched(b: Any) -> Any:  # the step's batch: decode rows and their lengths
        seen.append(b)
        return run(b)

    eng.runner.run = watched  # type: ignore[method-assign]
    for r in range(seqs):
        eng.add_request(Request(100 + r, rng.integers(0, model.cfg.vocab, prompt).tolist(), steps + 2))
    rows = []
    while eng.has_work():
        seen.clear()
        m0 = eng.metrics.manager_s
        t0 = time.perf_counter()
        eng.step()
        dt = time.perf_counter() - t0  # the step ended with its tokens on the host: nothing left queued
        b = seen[0] if seen else None
        if b is not None and not b.prefills and len(b.decodes) == seqs:
            kv = int(np.asarray(b.seq_lens_d, dtype=np.int64).sum()) * kv_token_bytes
            rows.append((dt, eng.metrics.manager_s - m0, (w_bytes + kv) / rate, kv))
    replays = eng.runner.graph_replays
    done = [eng.finished.get(100 + r, []) for r in range(seqs)]
    complete = all(len(d) == 1 and len(d[0].tokens) == prompt + steps + 2 for d in done)
    eng.close()
    rows = rows[1:]  # the first full-batch decode step pays the largest graph's first replay
    if not rows:
        return {"seqs": seqs, "error": "no decode step ran with the whole batch"}
    step = statistics.median(r[0] for r in rows)
    bound = statistics.median(r[2] for r in rows)
    return {"seqs": seqs, "steps": len(rows), "step_ms": 1e3 * step, "bound_ms": 1e3 * bound,
            "ratio": statistics.median(r[0] / r[2] for r in rows),
            "manager_ms": 1e3 * statistics.median(r[1] for r in rows),
            "kv_gb": statistics.median(r[3] for r in rows) / 1e9, "replays": replays, "complete": complete}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seqs", default="64,256", help="batch sizes, comma-separated")
    p.add_argument("--prompt", type=int, default=1024, help="prompt tokens per sequence")
    p.add_argument("--steps", type=int, default=32, help="decode steps per sequence")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--tiny", action="store_true", help="a small Llama (CPU dry runs of this script)")
    p.add_argument("--out", help="also write the table (markdown) here")
    a = p.parse_args()
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means: nothing to measure here
        return _skip(a.out, f"torch does not import ({type(e).__name__}: {e})")
    import kvblock
    if a.device == "cuda" and not torch.cuda.is_available():
        return _skip(a.out, "torch has no usable CUDA device")
    if a.device == "cuda" and kvblock.cuda_device_count() == 0:
        return _skip(a.out, f"libkvblock ({kvblock._lib.LIBRARY_PATH}) sees no CUDA device or was built without CUDA")
    from kvblock.engine.checkpoint import HFConfig
    from kvblock.engine.torch_model import TorchModel
    cfg = HFConfig.from_dict(TINY if a.tiny else LLAMA3_8B, "Llama-3-8B's configuration")
    dtype = "bfloat16" if a.device == "cuda" else "float32"
    t0 = time.perf_counter()
    weights = random_weights(cfg, torch, a.device, getattr(torch, dtype))
    model = TorchModel(cfg, weights, a.device, dtype, max_len=a.prompt + a.steps + 16)
    del weights
    w_bytes = weight_bytes_per_step(model)
    elem = torch.empty(0, dtype=model.dtype).element_size()
    kv_token_bytes = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * elem
    rate = copy_rate(torch, a.device)
    where = torch.cuda.get_device_name() if a.device == "cuda" else "cpu (dry run)"
    lines = [f"engine decode step vs bytes read: {where}, torch {torch.__version__}, libkvblock "
             f"{kvblock.library_version()}; {'tiny Llama' if a.tiny else 'Llama-3-8B shape'} ({cfg.num_layers} "
             f"layers, hidden {cfg.hidden}, {cfg.num_q_heads}/{cfg.num_kv_heads} heads, vocab {cfg.vocab}), "
             f"random {dtype} weights made in {time.perf_counter() - t0:.1f} s; weights read per step "
             f"{w_bytes / 1e9:.2f} GB, K/V {kv_token_bytes} B per token; copy rate {rate / 1e9:,.0f} GB/s "
             f"(read + write); {a.prompt}-token prompts, {a.steps} decode steps"
             f"{', CUDA graphs' if a.device == 'cuda' else ''}"]
    print(lines[0], flush=True)
    results = []
    for n in (int(x) for x in a.seqs.split(",")):
        try:
            r = run_batch(model, n, a.prompt, a.steps, kv_token_bytes, w_bytes, rate)
        except Exception as e:  # noqa: BLE001 - one batch size's failure is reported, the others still run
            r = {"seqs": n, "error": f"{type(e).__name__}: {e}"[:200]}
        results.append(r)
        print("  " + " | ".join(_cells(r)), flush=True)
        gc.collect()  # the engine's runner and its cache sit in a reference cycle (the watched run)
        if a.device == "cuda":
            torch.cuda.empty_cache()
    table = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    table += ["| " + " | ".join(_cells(r)) + " |" for r in results]
    table += ["", f"step: median wall time of Engine.step() over the decode-only steps with every sequence "
              f"(the first left out); bound: (weights + the step's K/V) / copy rate; target step <= {TARGET} x "
              f"bound; manager: the step's libkvblock manager calls."]
    text = "\n".join(lines + [""] + table)
    print("\n" + text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0 if all("error" not in r and r["complete"] for r in results) else 1


HEADER = ["seqs", "decode steps", "step ms", "K/V read GB", "bound ms", "step / bound", "target", "manager ms",
          "manager share", "graph replays", "result"]


def _cells(r: Dict[str, Any]) -> List[str]:
    if "error" in r:
        return [str(r["seqs"])] + ["-"] * (len(HEADER) - 2) + [f"FAIL ({r['error']})"]
    met = "met" if r["ratio"] <= TARGET else f"not ({r['ratio'] / TARGET:.2f}x over)"
    return [str(r["seqs"]), str(r["steps"]), f"{r['step_ms']:.2f}", f"{r['kv_gb']:.2f}", f"{r['bound_ms']:.2f}",
            f"{r['ratio']:.2f}", f"<= {TARGET}: {met}", f"{r['manager_ms']:.3f}",
            f"{100 * r['manager_ms'] / r['step_ms']:.1f}%", str(r["replays"]),
            "pass" if r["complete"] else "FAIL (a request did not get all its tokens)"]


def _skip(out: Any, why: str) -> int:
    print(f"engine bound skipped: {why}")
    if out:
        with open(out, "w") as f:
            f.write(f"engine bound skipped: {why}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
