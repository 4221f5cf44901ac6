"""python -m kvblock.engine: the mini engine on a synthetic workload with a shared prompt prefix
(python -m kvblock.engine serve --model DIR: the OpenAI-compatible server, see api_server.py)."""
from __future__ import annotations

import argparse
import sys
from typing import Iterator, List, Optional, Tuple

import numpy as np

from .. import library_version
from ..errors import KvbArgumentError
from ..store import check_spec
from . import blas, kv_quant, serve, speculative
from .config import KV_DTYPE_FLAGS
from .engine import Engine, EngineConfig
from .kv_quant import calibrate_kv_scales, compare_logits
from .model import Model, ModelConfig
from .sequence import Request


def _store_spec(spec: str) -> str:
    """--store's type: a malformed spec is a usage error naming the forms."""
    try:
        return check_spec(spec)
    except KvbArgumentError as e:
        raise argparse.ArgumentTypeError(e.message) from None


def main() -> None:
    if sys.argv[1:2] == ["serve"]:  # the OpenAI-compatible server (api_server.py)
        try:
            from .api_server import main as serve_main
        except ImportError as e:
            raise SystemExit(f"serve needs fastapi, uvicorn and torch (pip install fastapi uvicorn): {e}")
        return serve_main(sys.argv[2:])
    p = argparse.ArgumentParser(prog="python -m kvblock.engine", description=__doc__)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--shared-prefix", type=int, default=512, help="tokens of prompt prefix shared by every request")
    p.add_argument("--prefix-families", type=int, default=1, metavar="K",
                   help="K different shared prefixes, request r uses prefix r %% K (a device pool that holds "
                        "fewer than K of them shows the host cache at work)")
    p.add_argument("--prompt", type=int, default=64, help="tokens of unique prompt suffix per request")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--n", type=int, default=1, help="parallel samples per request (fork)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--num-blocks", type=int, default=1024)
    p.add_argument("--host-blocks", type=int, default=0)
    p.add_argument("--host-cache", action="store_true",
                   help="host blocks are a second prefix-cache level (needs --host-blocks)")
    p.add_argument("--store", metavar="SPEC", type=_store_spec,
                   help="a store tier below the host cache (needs --host-cache): dir:PATH or redis://host:port/db; "
                        "blocks are put as they reach the host tier and, at exit, every block still cached on the "
                        "device, so engines sharing the store (or this one restarted) find the prefixes")
    p.add_argument("--store-model-id", type=int, metavar="N",
                   help="the store's key namespace besides the K/V layout (default: a hash of the model config; "
                        "with --model, of the checkpoint)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-seqs", type=int, default=64)
    p.add_argument("--budget", type=int, default=512, help="tokens per step (decode + prefill chunks)")
    p.add_argument("--preemption", choices=["recompute", "swap"], default="recompute")
    p.add_argument("--window", type=int, default=0)
    p.add_argument("--sink", type=int, default=0)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kv-dtype", choices=list(KV_DTYPE_FLAGS), default=None,
                   help="paged K/V cache dtype (default: the model's: fp32 for the numpy engine, --dtype for the "
                        "torch engine; bf16: torch engine only); fp8: per-layer scales from a calibration prefill "
                        "(max |x| / 448 for e4m3), and the run is repeated with 16-bit K/V to report how far the "
                        "logits move")
    p.add_argument("--kv-events", metavar="ENDPOINT", help="publish KV events in vLLM's format (e.g. tcp://*:5557)")
    p.add_argument("--kv-events-replay", metavar="ENDPOINT", help="replay socket for them (e.g. tcp://*:5558)")
    p.add_argument("--kv-events-topic", default="", metavar="TOPIC",
                   help="topic frame of every message; llm-d routes by kv@<pod>@<model> (default: empty)")
    p.add_argument("--kv-events-encoding", choices=["map", "array"], default="map",
                   help="map: vLLM's default; array: positional (llm-d-kv-cache of 2026-06 needs it)")
    p.add_argument("--kv-events-replay-frames", choices=["topic", "legacy"], default="topic",
                   help="replay answers with the topic frame (vLLM's current layout) or without it")
    p.add_argument("--kv-events-wait", type=int, default=0, metavar="N",
                   help="wait (up to 60 s) for N subscribers, e.g. a KV router, before running")
    p.add_argument("--blas-threads", type=int, default=1, metavar="N",
                   help="threads of the model's numpy matmuls (default 1: they are small, and a BLAS thread pool "
                        "slows them down; 0 keeps the BLAS default; OPENBLAS_NUM_THREADS etc. take precedence)")
    serve.add_arguments(p)
    speculative.add_arguments(p)
    a = p.parse_args()
    if a.host_cache and a.host_blocks <= 0:
        p.error("--host-cache needs --host-blocks N > 0")
    if a.store and not a.host_cache:
        p.error(f"--store {a.store}: the store tier needs the host cache (--host-cache --host-blocks N)")
    if a.draft_model and not a.speculative_tree:
        p.error(f"--draft-model {a.draft_model}: drafts for --speculative-tree DEPTHxWIDTH, which is not given")
    if a.threads and not (a.model or a.bench):
        p.error("--threads: for the torch engine (--model DIR or --bench); the numpy engine has --blas-threads")
    if a.model or a.bench:  # the torch engine on a checkpoint (kvblock/engine/serve.py)
        if a.store and a.bench:
            p.error(f"--store {a.store}: for generation runs (--model DIR --text / --ids), not --bench")
        return serve.main(a)
    if a.draft_model:
        p.error(f"--draft-model {a.draft_model}: a checkpoint for the torch engine (--model DIR or --bench); the "
                "numpy engine's model is a random one of --layers and --seed, its draft --draft-layers N")
    if a.kv_dtype == "bf16":
        p.error("--kv-dtype bf16: the numpy engine has no bfloat16 (numpy has none); use fp32, fp16 or fp8_*, "
                "or the torch engine (--model DIR or --bench)")
    blas_how, blas_n = blas.limit_threads(a.blas_threads) if a.blas_threads > 0 else ("BLAS default", None)

    model = Model(ModelConfig(num_layers=a.layers, window=a.window, sink=a.sink, seed=a.seed))
    kv_dtype = KV_DTYPE_FLAGS[a.kv_dtype or "fp32"]
    fp8 = kv_dtype.startswith("float8")

    def engine_config(dtype: str, scales: Optional[Tuple[List[float], List[float]]] = None,
                      events: bool = True) -> EngineConfig:
        return EngineConfig(num_blocks=a.num_blocks, block_size=a.block_size, num_host_blocks=a.host_blocks,
                            host_cache=a.host_cache,
                            max_num_seqs=a.max_seqs, max_batched_tokens=a.budget, preemption=a.preemption,
                            prefix_caching=not a.no_prefix_caching,
                            kv_events_endpoint=a.kv_events if events else None,
                            kv_events_replay_endpoint=a.kv_events_replay,
                            kv_events_topic=a.kv_events_topic, kv_events_encoding=a.kv_events_encoding,
                            kv_events_replay_frames=a.kv_events_replay_frames, kv_dtype=dtype, kv_scales=scales,
                            record_logits=fp8, store=a.store if events else None,
                            store_model_id=a.store_model_id, **speculative.config_fields(a))

    def requests() -> Iterator[Request]:
        rng = np.random.default_rng(a.seed)
        shared = [rng.integers(0, model.cfg.vocab, a.shared_prefix).tolist() for _ in range(a.prefix_families)]
        for r in range(a.requests):
            suffix = rng.integers(0, model.cfg.vocab, a.prompt).tolist()
            yield Request(r, shared[r % a.prefix_families] + suffix, a.max_tokens, n=a.n,
                          temperature=a.temperature, seed=a.seed)

    if a.prefix_families < 1:
        p.error("--prefix-families must be >= 1")
    scales: Optional[Tuple[List[float], List[float]]] = None
    if fp8:
        scales = calibrate_kv_scales(model, next(iter(requests())).prompt, kv_dtype)
    try:
        eng = Engine(model, engine_config(kv_dtype, scales))
    except KvbArgumentError as e:  # a store nobody answers at, a directory that cannot be made: the user's to fix
        if not a.store:
            raise
        p.error(f"--store {a.store}: {e.message}")
    if eng.publisher is not None and a.kv_events_wait and not eng.publisher.wait_for_subscribers(a.kv_events_wait, 60):
        p.error(f"fewer than {a.kv_events_wait} subscribers on {eng.publisher.bound_endpoint} after 60 s")
    for req in requests():
        eng.add_request(req)
    finished = eng.run()
    ev = eng.publisher.stats() if eng.publisher is not None else None
    m, st = eng.metrics, eng.mgr.stats()  # before the flush, whose placeholder allocations are no prompts
    flushed = eng.flush_to_store()
    store_line = eng.store.summary(flushed) if eng.store is not None else ""
    eng.close()
    other = m.total_s - m.manager_s - m.kernel_s
    print(f"kvblock engine on libkvblock {library_version()}: {model.cfg.num_layers} layers, "
          f"{model.cfg.num_q_heads}/{model.cfg.num_kv_heads} q/kv heads, head_dim {model.cfg.head_dim}, fp32 numpy, "
          f"{kv_dtype} K/V cache (BLAS threads: {blas_n if blas_n is not None else 'default'}, {blas_how})")
    print(f"requests:          {a.requests} x (prefix {a.shared_prefix} + prompt {a.prompt}) -> {a.max_tokens} tokens, "
          f"n={a.n}")
    print(f"steps:             {m.steps}")
    print(f"generated tokens:  {m.generated_tokens}  ({m.generated_tokens / m.total_s:.0f} tokens/s, "
          f"{m.total_s:.2f} s)")
    print(f"prompt tokens:     {st['query_tokens']} looked up, {st['hit_tokens']} prefix hits "
          f"(hit ratio {st['hit_tokens'] / max(1, st['query_tokens']):.3f}); {st['computed_tokens']} tokens computed")
    if a.host_cache:
        print(f"host cache:        {st['device_hit_tokens']} hit tokens on device, {st['host_hit_tokens']} on host; "
              f"{m.offloaded_blocks} blocks offloaded, {m.loaded_blocks} loaded")
    if store_line:
        print(store_line)
    print(f"preemptions:       {m.preemptions} by recompute, {m.swaps_out} swapped out, {m.swaps_in} swapped in; "
          f"{m.cow_copies} copy-on-write blocks")
    for line in speculative.summary_lines(eng):
        print(line)
    print(f"time share:        manager {100 * m.manager_s / m.total_s:.1f}%, "
          f"kernels {100 * m.kernel_s / m.total_s:.1f}%, "
          f"model matmuls + scheduler {100 * other / m.total_s:.1f}%")
    if scales is not None:  # an fp8 run
        ref = Engine(model, engine_config("float16", events=False))
        for req in requests():
            ref.add_request(req)
        cmp = compare_logits(ref.run(), finished)
        ref.close()
        print("\n".join(kv_quant.report(kv_dtype, scales, cmp, "float16")))
    if ev is not None:
        print(f"kv events:         {ev['events']} in {ev['batches']} batches on {a.kv_events} "
              f"({a.kv_events_encoding}), "
              f"{ev['dropped_events']} dropped, {ev['resyncs']} resyncs, {ev['subscribers']} subscribers")


if __name__ == "__main__":
    main()
