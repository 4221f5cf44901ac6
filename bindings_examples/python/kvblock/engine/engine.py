"""A continuous-batching engine in the style of nano-vllm on libkvblock: waiting / running / swapped queues,
a token budget per step with chunked prefill, prefix caching through allocate, decode through batched append
and commit, preemption by recompute or by swap (host tier + swap_blocks), parallel sampling through fork with
copy-on-write pairs run by copy_blocks, an optional sliding window, an optional host prefix cache
(host_cache: evicted prefix blocks are offloaded to host blocks and loaded back on a hit), and hybrid models
(window and full layers as two KV cache groups of one manager, each layer reading its group's block table).

Every step: schedule -> _prepare (batch_export into a StepBatch of host arrays) -> _forward (write_kv, paged
attention for decode rows, prefill attention for prompt chunks; the numpy model here, torch_engine.py's
TorchEngine runs runner.py's ModelRunner instead) -> _finish (batch_commit, sampling)."""
from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import numpy as np

from .. import BatchBuffers, KVCache, KvbError, Manager, Status as KvbStatus
from .. import copy_blocks, paged_attention, prefill_attention, swap_blocks, write_kv
from .._nocopy import OwnsHandle
from ..cache_salts import CacheSalts
from ..manager import Availability
from .model import Model, sample
from .sequence import Request, Seq, Status


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
    kv_dtype: str = "float32"        # or "float16", "float8_e4m3", "float8_e5m2" (the paged K/V caches)
    kv_scales: Optional[Tuple[List[float], List[float]]] = None  # fp8: per-layer (k, v) scales (kv_quant)
    max_steps: int = 100000          # guard against a scheduler that stops making progress
    # KV events in vLLM's wire format for KV-aware routers (kvblock.events; needs pyzmq and msgpack):
    kv_events_endpoint: Optional[str] = None         # e.g. "tcp://*:5557"; None = no events
    kv_events_replay_endpoint: Optional[str] = None  # optional ROUTER for replay, e.g. "tcp://*:5558"
    kv_events_topic: str = ""                        # llm-d routes by "kv@<pod>@<model>" (events.llmd_topic)
    kv_events_encoding: str = "map"                  # or "array" (llm-d-kv-cache of 2026-06 needs it)
    kv_events_replay_frames: str = "topic"           # or "legacy" (replay answers without the topic frame)


@dataclass
class Metrics:
    steps: int = 0
    generated_tokens: int = 0
    preemptions: int = 0             # by recompute
    swaps_out: int = 0
    swaps_in: int = 0
    cow_copies: int = 0
    offloaded_blocks: int = 0        # host cache: device -> host copies run
    loaded_blocks: int = 0           # host cache: host -> device copies run
    manager_s: float = 0.0           # time in libkvblock manager calls
    kernel_s: float = 0.0            # time in libkvblock kernels (write_kv, attention, copy/swap blocks)
    matmul_s: float = 0.0            # time in the model's matmuls (the torch engine's profiling runs only)
    elementwise_s: float = 0.0       # norms, RoPE, activations, residuals, argmax (torch profiling runs only)
    total_s: float = 0.0


class _Clock:
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


@dataclass
class StepBatch:
    """One step's model inputs on the host: decode rows first (one token each), then prompt chunks."""
    seqs: List[Seq]
    ids: np.ndarray                   # [num_seqs] int64 seq ids, decodes then prefills
    decodes: List[Seq]
    prefills: List[Tuple[Seq, int]]   # (sequence, chunk length)
    tokens: np.ndarray                # [num_tokens] int64
    positions: np.ndarray             # [num_tokens] int64
    per_group: List[tuple]            # per KV cache group: (slot_mapping, decode block tables, prefill ones)
    seq_lens_d: np.ndarray            # [num_decodes] int32
    query_start_p: np.ndarray         # [num_prefills + 1] int32
    seq_lens_p: np.ndarray            # [num_prefills] int32
    finishing: List[Tuple[Seq, int]]  # prompts completed this step and the row of their last token
    rows: np.ndarray                  # rows whose logits are needed: decodes, then finishing prompts
    counts: np.ndarray                # tokens computed per sequence (for batch_commit)


class Engine(OwnsHandle):
    _what_is_owned = "a Manager, a KVCache and an event publisher that close() stops"

    def __init__(self, model: Model, cfg: EngineConfig = EngineConfig()) -> None:
        self.model, self.cfg = model, cfg
        mc = model.cfg
        if cfg.preemption not in ("recompute", "swap"):
            raise ValueError(f"preemption must be 'recompute' or 'swap', got {cfg.preemption!r}")
        if cfg.host_cache and not cfg.num_host_blocks:
            raise ValueError("host_cache needs num_host_blocks > 0")
        # A hybrid model's layers form two KV cache groups, window (even layers) and full (odd layers): one
        # manager, one pool, a block table per group; the window group releases what its layers cannot reach.
        self.groups = [("window", mc.window, mc.sink), ("full",)] if mc.hybrid else None
        if mc.hybrid and (not mc.window or cfg.preemption == "swap" or cfg.host_cache):
            raise ValueError("a hybrid model needs a window; the manager does not swap or host-cache several "
                             "groups yet")
        self.mgr = Manager(cfg.num_blocks, cfg.block_size, num_host_blocks=cfg.num_host_blocks,
                           events=cfg.kv_events_endpoint is not None, host_cache=cfg.host_cache, groups=self.groups)
        self.publisher = None
        self.salts = CacheSalts()  # request cache_salt strings -> the manager's u64 salts (and back, for events)
        if cfg.kv_events_endpoint is not None:
            from ..events import KvEventPublisher  # pyzmq and msgpack only when events are on
            self.publisher = KvEventPublisher(self.mgr, endpoint=cfg.kv_events_endpoint,
                                              replay_endpoint=cfg.kv_events_replay_endpoint,
                                              topic=cfg.kv_events_topic, encoding=cfg.kv_events_encoding,
                                              replay_frames=cfg.kv_events_replay_frames, salt_names=self.salts)
        # q / out / new K/V dtype of the numpy forward: the cache's for fp32 and fp16 caches, fp32 for fp8
        # (the CPU kernels read fp32 q and quantize fp32 new K/V)
        self.act_dtype = np.float16 if cfg.kv_dtype == "float16" else np.float32
        self.cache, self.host = self._make_caches()
        self.bufs = BatchBuffers(cfg.max_num_seqs, 64, cfg.max_batched_tokens)
        self.group_bufs = [BatchBuffers(cfg.max_num_seqs, 64, cfg.max_batched_tokens)] if mc.hybrid else []
        self.waiting: Deque[Seq] = collections.deque()
        self.running: List[Seq] = []
        self.swapped: Deque[Seq] = collections.deque()
        self.finished: Dict[int, List[Seq]] = collections.defaultdict(list)
        self.metrics = Metrics()
        self._next_seq = 0
        self._mgr_clock = _Clock(self.metrics, "manager_s")
        self._kernel_clock = _Clock(self.metrics, "kernel_s")

    def _make_caches(self) -> Tuple[KVCache, Optional[KVCache]]:
        """The device pool's KV cache and the host blocks' one (None without host blocks)."""
        mc, cfg = self.model.cfg, self.cfg
        scales = {}
        if cfg.kv_dtype.startswith("float8") and cfg.kv_scales is not None:
            scales = {"k_scale": np.asarray(cfg.kv_scales[0]), "v_scale": np.asarray(cfg.kv_scales[1])}
        cache = KVCache(mc.num_layers, cfg.num_blocks, cfg.block_size, mc.num_kv_heads, mc.head_dim, cfg.kv_dtype,
                        **scales)
        host = (KVCache(mc.num_layers, cfg.num_host_blocks, cfg.block_size, mc.num_kv_heads, mc.head_dim,
                        cfg.kv_dtype, **scales) if cfg.num_host_blocks else None)
        return cache, host

    # -- requests ------------------------------------------------------------------------------------
    def add_request(self, req: Request) -> None:
        self.waiting.append(self._new_seq(req, 0, list(req.prompt)))

    def _new_seq(self, req: Request, index: int, tokens: List[int]) -> Seq:
        self._next_seq += 1
        return Seq(self._next_seq, req, index, tokens)

    def _salt(self, s: Seq) -> Optional[int]:
        if not self.cfg.prefix_caching:
            return s.request.req_id + 1
        return None if s.request.cache_salt is None else self.salts.salt(s.request.cache_salt)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def run(self) -> Dict[int, List[Seq]]:
        t0 = time.perf_counter()
        while self.has_work():
            if self.metrics.steps >= self.cfg.max_steps:
                raise RuntimeError(f"engine: no completion after {self.metrics.steps} steps")
            self.step()
            self.publish_events()
        self.metrics.total_s += time.perf_counter() - t0
        return self.finished

    def publish_events(self) -> None:
        """Sends the KV events of the steps so far (run() does it after every step)."""
        if self.publisher is not None:
            self.publisher.flush()

    def close(self) -> None:
        """Stops the event publisher (after sending what it holds)."""
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None

    # -- copies ----------------------------------------------------------------------------------------
    def _host_transfers(self) -> None:
        """Runs the host cache's pending transfers: all offloads, then all loads (the header's ordering rule).
        Called right before the engine runs any copy of its own (swap-out, swap-in, copy-on-write) and before
        the forward step, so that every offload reads its device block before anything overwrites it and
        every loaded block holds its KV before a kernel reads it or a later copy overwrites its source."""
        if not self.cfg.host_cache:
            return
        with self._mgr_clock:
            offloads, loads = self.mgr.drain_host_transfers()
        if len(offloads) or len(loads):
            with self._kernel_clock:
                swap_blocks(self.cache, self.host, offloads)
                swap_blocks(self.host, self.cache, loads)
            self.metrics.offloaded_blocks += len(offloads)
            self.metrics.loaded_blocks += len(loads)

    # -- scheduling ----------------------------------------------------------------------------------
    def _free_blocks_after(self, new_tokens: int) -> int:
        return self.mgr.num_free_blocks - -(-new_tokens // self.cfg.block_size)

    def _preempt(self, victim: Seq) -> None:
        self.running.remove(victim)
        if (self.cfg.preemption == "swap" and victim.pending and self.host is not None
                and self.mgr.can_swap_out(victim.seq_id) == Availability.OK):
            with self._mgr_clock:
                pairs = self.mgr.swap_out(victim.seq_id)
            self._host_transfers()
            with self._kernel_clock:
                swap_blocks(self.cache, self.host, pairs)
            victim.status = Status.SWAPPED
            self.swapped.append(victim)
            self.metrics.swaps_out += 1
            return
        with self._mgr_clock:
            self.mgr.free(victim.seq_id)
        victim.num_computed, victim.pending, victim.status = 0, False, Status.WAITING
        self.waiting.appendleft(victim)  # recomputed from its tokens (prompt + generated) when readmitted
        self.metrics.preemptions += 1

    def _schedule(self) -> Tuple[List[Seq], List[Tuple[Seq, int]]]:
        cfg, mgr = self.cfg, self.mgr
        budget = cfg.max_batched_tokens
        # Swapped sequences come back first, when the pool can take them and still grow every running one.
        while self.swapped and len(self.running) < cfg.max_num_seqs:
            s = self.swapped[0]
            with self._mgr_clock:
                if (mgr.can_swap_in(s.seq_id) != Availability.OK or
                        mgr.num_free_blocks - mgr.info(s.seq_id).num_held_blocks <= len(self.running)):
                    break
                pairs = mgr.swap_in(s.seq_id)
            self._host_transfers()
            with self._kernel_clock:
                swap_blocks(self.host, self.cache, pairs)
            self.swapped.popleft()
            s.status = Status.RUNNING
            self.running.append(s)
            self.metrics.swaps_in += 1
        # Decode: append every sampled token in one call; out of blocks -> preempt the newest and retry.
        decodes = [s for s in self.running if s.pending]
        while decodes:
            ids = np.fromiter((s.seq_id for s in decodes), np.int64, len(decodes))
            toks = np.fromiter((s.tokens[-1] for s in decodes), np.int64, len(decodes))
            try:
                with self._mgr_clock:
                    mgr.batch_append(ids, toks)
                break
            except KvbError as e:
                if e.status != KvbStatus.OUT_OF_BLOCKS or len(self.running) == 1:
                    raise
                victim = self.running[-1]
                self._preempt(victim)
                if victim in decodes:
                    decodes.remove(victim)
        for s in decodes:
            s.pending = False
        budget -= len(decodes)
        with self._mgr_clock:
            pairs = mgr.drain_copies()
        if len(pairs):
            self._host_transfers()
            with self._kernel_clock:
                copy_blocks(self.cache, pairs)
            self.metrics.cow_copies += len(pairs)
        # Prompts being prefilled continue, then new requests, chunked to the budget.
        prefills: List[Tuple[Seq, int]] = []
        decoding = {s.seq_id for s in decodes}
        for s in self.running:
            if budget <= 0:
                break
            if s.seq_id not in decoding and s.num_computed < len(s.tokens):
                chunk = min(len(s.tokens) - s.num_computed, budget)
                prefills.append((s, chunk))
                budget -= chunk
        while self.waiting and not self.swapped and budget > 0 and len(self.running) < cfg.max_num_seqs:
            s = self.waiting[0]
            with self._mgr_clock:
                cached = mgr.can_allocate(s.tokens, cache_salt=self._salt(s))
                if cached is None or self._free_blocks_after(len(s.tokens) - cached) < len(self.running):
                    if not self.running and cached is None and mgr.num_free_blocks == mgr.num_blocks:
                        raise RuntimeError(f"request {s.request.req_id}: {len(s.tokens)} tokens never fit the pool")
                    break
                cached = mgr.allocate(s.seq_id, s.tokens, cache_salt=self._salt(s))
            self.waiting.popleft()
            s.num_computed, s.status = cached, Status.RUNNING
            self.running.append(s)
            chunk = min(len(s.tokens) - cached, budget)
            prefills.append((s, chunk))
            budget -= chunk
        return decodes, prefills

    # -- one step ------------------------------------------------------------------------------------
    def step(self) -> None:
        decodes, prefills = self._schedule()
        self.metrics.steps += 1
        self._host_transfers()  # the loads of this step's prefix hits (and offloads) before the forward pass
        if not decodes and not prefills:
            return
        b = self._prepare(decodes, prefills)
        logits, tokens = self._forward(b)
        self._finish(b, logits, tokens)

    def _prepare(self, decodes: List[Seq], prefills: List[Tuple[Seq, int]]) -> StepBatch:
        """The step's model inputs on the host, from the manager's batch export."""
        seqs = decodes + [s for s, _ in prefills]
        nd = len(decodes)
        ids = np.fromiter((s.seq_id for s in seqs), np.int64, len(seqs))
        with self._mgr_clock:
            batch = self.mgr.batch_export(ids, self.bufs)  # group 0 (the only one without groups)
            batches = [batch] + [self.mgr.batch_export(ids, b, group=g + 1) for g, b in enumerate(self.group_bufs)]
        # Decode rows are the first nd export rows (one uncomputed token each); a prompt chunk takes the
        # first `chunk` of its sequence's uncomputed rows.
        chunks = np.array([c for _, c in prefills], np.int64)
        qs = batch.query_start
        tok_parts, pos_parts = [], []
        tok_parts.append(np.fromiter((s.tokens[-1] for s in decodes), np.int64, nd))
        pos_parts.append(np.fromiter((len(s.tokens) - 1 for s in decodes), np.int64, nd))
        for s, c in prefills:
            tok_parts.append(np.asarray(s.tokens[s.num_computed:s.num_computed + c], np.int64))
            pos_parts.append(np.arange(s.num_computed, s.num_computed + c))
        tokens, positions = np.concatenate(tok_parts), np.concatenate(pos_parts)
        # Per group: its slots (same rows as group 0's, other block ids) and its block tables.
        per_group = []
        for b in batches:
            sp = [b.slot_mapping[:nd]] + [b.slot_mapping[int(qs[nd + j]):int(qs[nd + j]) + c]
                                          for j, (_, c) in enumerate(prefills)]
            per_group.append((np.concatenate(sp), b.block_tables[:nd], b.block_tables[nd:]))
        qs_p = np.zeros(len(prefills) + 1, np.int32)
        np.cumsum(chunks, out=qs_p[1:])
        sl_p = np.array([s.num_computed + c for s, c in prefills], np.int32)
        # Logits for decode rows and for the last row of each chunk that completes its prompt.
        finishing = [(s, nd + int(qs_p[j + 1]) - 1) for j, (s, c) in enumerate(prefills)
                     if s.num_computed + c == len(s.tokens)]
        rows = np.concatenate([np.arange(nd), np.array([r for _, r in finishing], np.int64)]).astype(np.int64)
        return StepBatch(seqs, ids, decodes, prefills, tokens, positions, per_group, batch.seq_lens[:nd], qs_p, sl_p,
                         finishing, rows, np.concatenate([np.ones(nd, np.int64), chunks]))

    def _forward(self, b: StepBatch) -> Tuple[np.ndarray, Optional[List[int]]]:
        """The numpy model on the step's batch: (logits [len(b.rows), vocab], None: sampled by _emit)."""
        mc = self.model.cfg
        nd = len(b.decodes)

        def attention(layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
            if self.act_dtype != np.float32:
                q, k, v = (x.astype(self.act_dtype) for x in (q, k, v))
            out = np.empty_like(q)
            window, sink = mc.layer_window(layer)
            slots, bt_d, bt_p = b.per_group[1 if mc.hybrid and window == 0 else 0]
            with self._kernel_clock:
                write_kv(self.cache, layer, k, v, slots)
                if nd:
                    paged_attention(self.cache, layer, q[:nd], bt_d, b.seq_lens_d, out[:nd], window=window,
                                    sink=sink)
                if b.prefills:
                    prefill_attention(self.cache, layer, q[nd:], b.query_start_p, b.seq_lens_p, bt_p, out[nd:],
                                      window=window, sink=sink)
            return out.astype(np.float32, copy=False)

        return self.model.forward(b.tokens, b.positions, attention, logit_rows=b.rows), None

    def _finish(self, b: StepBatch, logits: Any, tokens: Optional[List[int]] = None) -> None:
        """Commits the step's tokens and emits one token per logits row (sampled here unless `tokens` gives
        them: a backend that samples on its device)."""
        with self._mgr_clock:
            self.mgr.batch_commit(b.ids, b.counts)
        for s, c in zip(b.seqs, b.counts):
            s.num_computed += int(c)
        nd = len(b.decodes)
        for i, s in enumerate(b.decodes):
            self._emit(s, logits[i], None if tokens is None else tokens[i])
        for j, (s, _) in enumerate(b.finishing):
            for t in self._prompt_done(s):
                self._emit(t, logits[nd + j], None if tokens is None else tokens[nd + j])

    def _host_logits(self, logits: Any) -> np.ndarray:
        return logits  # numpy already; the torch engine brings a device row to the host

    def _prompt_done(self, s: Seq) -> List[Seq]:
        """s has computed all its tokens through prefill. The window starts releasing blocks only now (a
        later chunk would need them), and an n > 1 request forks its samples now: they sample from the same
        logits, and their first appends copy the shared partial block (copy-on-write)."""
        out = [s]
        if self.model.cfg.window and not self.model.cfg.hybrid:  # a group's window is set at creation
            with self._mgr_clock:
                self.mgr.set_window(s.seq_id, self.model.cfg.window, self.model.cfg.sink)
        if s.request.n > 1 and s.index == 0 and not s.output:
            for i in range(1, s.request.n):
                child = self._new_seq(s.request, i, list(s.tokens))
                with self._mgr_clock:
                    self.mgr.fork(s.seq_id, child.seq_id)
                    if self.model.cfg.window and not self.model.cfg.hybrid:
                        self.mgr.set_window(child.seq_id, self.model.cfg.window, self.model.cfg.sink)
                child.num_computed, child.status = s.num_computed, Status.RUNNING
                self.running.append(child)
                out.append(child)
        return out

    def _emit(self, s: Seq, logits: Any, tok: Optional[int] = None) -> None:
        r = s.request
        if tok is None or r.temperature > 0:  # a device's greedy token is only used at temperature 0
            tok = sample(self._host_logits(logits), r.temperature, r.seed, r.req_id, s.index, len(s.tokens))
        s.tokens.append(tok)
        s.output.append(tok)
        if self.cfg.record_logits:
            s.logits.append(np.array(self._host_logits(logits), np.float32))
        s.pending = True
        self.metrics.generated_tokens += 1
        if s.done:
            with self._mgr_clock:
                self.mgr.free(s.seq_id)
            self.running.remove(s)
            s.status, s.pending = Status.FINISHED, False
            self.finished[r.req_id].append(s)
