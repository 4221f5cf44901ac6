"""The engine's settings (EngineConfig), its counters (Metrics) and the clocks that time its parts."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

# The CLIs' --kv-dtype names -> EngineConfig.kv_dtype
KV_DTYPE_FLAGS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8_e4m3": "float8_e4m3",
                  "fp8_e5m2": "float8_e5m2"}


@dataclass
class EngineConfig:
    num_blocks: int = 1024
    block_size: int = 16
    num_host_blocks: int = 0         # > 0 with preemption="swap" or host_cache
    host_cache: bool = False         # host blocks are also a second prefix-cache level (KVB_CONFIG_HOST_CACHE)
    max_num_seqs: int = 64
    max_batched_tokens: int = 256    # token budget per step: decode tokens + prefill chunks
    preemption: str = "recompute"    # or "swap"
    prefix_caching: bool = True      # False: a cache salt per request, so requests never share blocks
    record_logits: bool = False
    prefix_groups: bool = True       # blocks shared by several sequences read once per step where it pays (cascade)
    # the paged K/V caches: "float32", "float16", "bfloat16" (torch only), "float8_e4m3", "float8_e5m2";
    # None: the model's dtype (the numpy model's is float32)
    kv_dtype: Optional[str] = None
    kv_scales: Optional[Tuple[List[float], List[float]]] = None  # fp8: per-layer (k, v) scales (kv_quant)
    max_steps: int = 100000          # guard against a scheduler that stops making progress
    # KV events in vLLM's wire format for KV-aware routers (kvblock.events; needs pyzmq and msgpack):
    kv_events_endpoint: Optional[str] = None         # e.g. "tcp://*:5557"; None = no events
    kv_events_replay_endpoint: Optional[str] = None  # optional ROUTER for replay, e.g. "tcp://*:5558"
    kv_events_topic: str = ""                        # llm-d routes by "kv@<pod>@<model>" (events.llmd_topic)
    kv_events_encoding: str = "map"                  # or "array" (llm-d-kv-cache of 2026-06 needs it)
    kv_events_replay_frames: str = "topic"           # or "legacy" (replay answers without the topic frame)
    # The store tier (engine/store_tier.py; needs host_cache): "dir:PATH", "redis://host:port/db" or "memory:"
    store: Optional[str] = None
    store_model_id: Optional[int] = None             # key namespace; None = a hash of the model's config
    # Token-tree speculative decoding (engine/speculative.py): (depth, width) of the draft tree, None = off;
    # the draft is the target's first draft_layers layers (0: half of them, at least one)
    speculative_tree: Optional[Tuple[int, int]] = None
    draft_layers: int = 0


@dataclass
class Metrics:
    steps: int = 0
    generated_tokens: int = 0
    preemptions: int = 0             # by recompute
    swaps_out: int = 0
    swaps_in: int = 0
    cow_copies: int = 0
    group_decode_rows: int = 0       # decode rows attended in a prefix group (shared blocks read once), summed
    group_prefill_seqs: int = 0      # over steps and KV cache groups; prompt chunks likewise
    offloaded_blocks: int = 0        # host cache: device -> host copies run
    loaded_blocks: int = 0           # host cache: host -> device copies run
    manager_s: float = 0.0           # time in libkvblock manager calls
    kernel_s: float = 0.0            # time in libkvblock kernels (write_kv, attention, copy/swap blocks)
    matmul_s: float = 0.0            # time in the model's matmuls (the torch engine's profiling runs only)
    elementwise_s: float = 0.0       # norms, RoPE, activations, residuals, argmax (torch profiling runs only)
    total_s: float = 0.0


class Clock:
    """Adds the time spent inside `with clock:` to metrics.<attr>. With `sync` (a device synchronise), it
    waits for queued device work on entry and exit, so that asynchronous kernels count where they run
    (profiling runs only: it serialises the device)."""

    def __init__(self, metrics: Metrics, attr: str, sync: Optional[Callable[[], None]] = None) -> None:
        self.m, self.attr, self.sync = metrics, attr, sync

    def __enter__(self) -> None:
        if self.sync is not None:
            self.sync()
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        if self.sync is not None:
            self.sync()
        setattr(self.m, self.attr, getattr(self.m, self.attr) + time.perf_counter() - self.t0)
