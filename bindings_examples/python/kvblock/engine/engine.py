"""A continuous-batching engine in the style of nano-vllm on libkvblock: waiting / running / swapped queues,
a token budget per step with chunked prefill, prefix caching through allocate, decode through batched append
and commit, preemption by recompute or by swap (host tier + swap_blocks), parallel sampling through fork with
copy-on-write pairs run by copy_blocks, an optional sliding window, an optional host prefix cache
(host_cache: evicted prefix blocks are offloaded to host blocks and loaded back on a hit), an optional
store tier below it (store: blocks shared with other engines and kept across restarts; store_tier.py),
and hybrid models
(window and full layers as two KV cache groups of one manager, each layer reading its group's block table),
with swap and the host cache too (a sequence swaps all its groups as one), and token-tree speculative
decoding (EngineConfig.speculative_tree: speculative.py runs the steps where sequences speculate).

Every step: scheduler.py's Scheduler decides what runs -> _prepare (batch_export into a StepBatch of host
arrays) -> the runner (numpy_runner.py's NumpyRunner on the numpy model here; torch_engine.py's TorchEngine
runs runner.py's ModelRunner) -> _finish (batch_commit, sampling). block_mover.py runs the block copies."""
from __future__ import annotations

import collections
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .._nocopy import OwnsHandle
from .._tensor import CPU
from ..cache_salts import CacheSalts
from ..kernels import KVCache
from ..manager import BatchBuffers, Manager
from ..prefix_groups import restrict_rows
from .block_mover import BlockMover
from .config import Clock, EngineConfig, Metrics
from .generation import Generation
from .model import Model, sample
from .numpy_runner import NumpyRunner
from .scheduler import Scheduler
from .sequence import Request, Seq, Status
from .speculative import TreeSpeculator
from .step import EngineModel, ModelShape, StepBatch, StepRunner
from .store_tier import StoreTier

__all__ = ["Engine", "EngineConfig", "Metrics", "StepBatch"]


class Engine(OwnsHandle):
    _what_is_owned = "a Manager, a KVCache and an event publisher that close() stops"

    def __init__(self, model: EngineModel, cfg: EngineConfig = EngineConfig(),
                 draft_model: Optional[EngineModel] = None) -> None:
        """draft_model: a smaller model of the same vocabulary that drafts the token trees of
        cfg.speculative_tree (speculative.py) instead of the target's first layers."""
        self.model, self.cfg, self.draft_model = model, cfg, draft_model
        if draft_model is not None and not cfg.speculative_tree:
            raise ValueError("a draft model without speculative_tree: it would draft nothing")
        mc = model.cfg
        if cfg.preemption not in ("recompute", "swap"):
            raise ValueError(f"preemption must be 'recompute' or 'swap', got {cfg.preemption!r}")
        if cfg.host_cache and not cfg.num_host_blocks:
            raise ValueError("host_cache needs num_host_blocks > 0")
        # A hybrid model's layers form two KV cache groups, window (even layers) and full (odd layers): one
        # manager, one pool, a block table per group; the window group releases what its layers cannot reach.
        self.groups = [("window", mc.window, mc.sink), ("full",)] if mc.hybrid else None
        if mc.hybrid and not mc.window:
            raise ValueError("a hybrid model needs a window (its window layers' group)")
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
        self.cache, self.host = self._make_caches()
        self.bufs = BatchBuffers(cfg.max_num_seqs, 64, cfg.max_batched_tokens)
        self.group_bufs = [BatchBuffers(cfg.max_num_seqs, 64, cfg.max_batched_tokens)] if mc.hybrid else []
        self.finished: Dict[int, List[Seq]] = collections.defaultdict(list)
        self.generation = Generation()  # stop conditions and sampling of requests with params (eos, tokenizer)
        self.on_token: Optional[Callable[[Seq], None]] = None  # called after every token a sample gets
        self.metrics = Metrics()
        self._next_seq = 0
        self._mgr_clock = Clock(self.metrics, "manager_s")
        self._kernel_clock = Clock(self.metrics, "kernel_s")
        self.mover = BlockMover(self.mgr, self.cache, self.host, self.metrics, self._mgr_clock, self._kernel_clock)
        self.scheduler = Scheduler(cfg, self.mgr, self.mover, self.metrics, self._mgr_clock, self._salt,
                                   (mc.window, mc.sink) if mc.window and not mc.hybrid else (0, 0))
        self.runner: StepRunner = self._make_runner()
        self.speculator = TreeSpeculator(self) if cfg.speculative_tree else None
        self.store: Optional[StoreTier] = None
        if cfg.store:
            self.store = StoreTier(cfg, self.mgr, self.host, mc, self.mover.host_transfers, self._mgr_clock,
                                   self._device_sync())
            self.scheduler.store_poll = self.store.poll
            self.mover.sync_after_transfers = self._device_sync()

    def _make_caches(self, draft: Optional[ModelShape] = None) -> Tuple[KVCache, Optional[KVCache]]:
        """The device pool's KV cache and the host blocks' one (None without host blocks); with `draft`, those
        of a draft model's layers over the same blocks (unit scales: the calibrated ones are the target's)."""
        mc, cfg = draft or self.model.cfg, self.cfg
        k_scale: Any = 1.0  # KVCache's defaults; fp8 caches take the calibrated per-layer scales
        v_scale: Any = 1.0
        kv_dtype = cfg.kv_dtype or "float32"
        if kv_dtype.startswith("float8") and cfg.kv_scales is not None and draft is None:
            k_scale, v_scale = np.asarray(cfg.kv_scales[0]), np.asarray(cfg.kv_scales[1])
        cache = KVCache(mc.num_layers, cfg.num_blocks, cfg.block_size, mc.num_kv_heads, mc.head_dim, kv_dtype,
                        k_scale=k_scale, v_scale=v_scale)
        host = (KVCache(mc.num_layers, cfg.num_host_blocks, cfg.block_size, mc.num_kv_heads, mc.head_dim,
                        kv_dtype, k_scale=k_scale, v_scale=v_scale) if cfg.num_host_blocks else None)
        return cache, host

    def _device_sync(self) -> Optional[Callable[[], None]]:
        """Waits for the device's queued copies (None: the numpy engine's copies are synchronous)."""
        if self.cache.device[0] == CPU:
            return None
        import torch
        return torch.cuda.synchronize

    def _make_runner(self) -> StepRunner:
        """The numpy model's runner (TorchEngine makes a torch one)."""
        if not isinstance(self.model, Model):
            raise TypeError(f"Engine runs the numpy kvblock.engine.Model, got {type(self.model).__name__} "
                            "(a TorchModel runs in torch_engine.TorchEngine)")
        return NumpyRunner(self.model, self.cache, self._kernel_clock, self.cache.dtype)

    # -- requests ------------------------------------------------------------------------------------
    def add_request(self, req: Request) -> None:
        self.scheduler.add(self._new_seq(req, 0, list(req.prompt)))

    def _new_seq(self, req: Request, index: int, tokens: List[int]) -> Seq:
        self._next_seq += 1
        return Seq(self._next_seq, req, index, tokens)

    def _salt(self, s: Seq) -> Optional[int]:
        if not self.cfg.prefix_caching:
            return s.request.req_id + 1
        return None if s.request.cache_salt is None else self.salts.salt(s.request.cache_salt)

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def abort(self, req_id: int) -> List[Seq]:
        """Ends the unfinished samples of request req_id wherever they are (waiting, running, swapped), their
        blocks freed and finish_reason "abort" (between steps). The samples ended."""
        sch, out = self.scheduler, []
        for q in (sch.waiting, sch.running, sch.swapped):
            for s in [s for s in q if s.request.req_id == req_id]:
                q.remove(s)
                if s.status != Status.WAITING:  # a waiting sample holds no blocks
                    with self._mgr_clock:
                        self.mgr.free(s.seq_id)
                s.status, s.pending, s.finish_reason = Status.FINISHED, False, "abort"
                out.append(s)
        return out

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

    def flush_to_store(self) -> int:
        """Puts every block cached only on the device to the store (between runs): see StoreTier.flush. The
        blocks put; 0 without a store."""
        return self.store.flush() if self.store is not None else 0

    def close(self) -> None:
        """Unregisters the store (its blocks stay in it) and stops the event publisher (after sending what
        it holds)."""
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None

    # -- one step ------------------------------------------------------------------------------------
    def step(self) -> None:
        decodes, prefills = self.scheduler.schedule()
        self.metrics.steps += 1
        self.mover.host_transfers()  # the loads of this step's prefix hits (and offloads) before the forward pass
        if not decodes and not prefills:
            return
        if self.speculator is not None and self.speculator.step(decodes, prefills):
            return
        b = self._prepare(decodes, prefills)
        logits, tokens = self.runner.run(b)
        if self.speculator is not None:
            self.speculator.shadow(b)
        self._finish(b, logits, tokens)

    def _prepare(self, decodes: List[Seq], prefills: List[Tuple[Seq, int]]) -> StepBatch:
        """The step's model inputs on the host, from the manager's batch export."""
        seqs = decodes + [s for s, _ in prefills]
        nd = len(decodes)
        ids = np.fromiter((s.seq_id for s in seqs), np.int64, len(seqs))
        with self._mgr_clock:
            # Prefix groups (forks of n > 1 requests, prompts hitting the same cached prefix): the kernels read
            # the blocks a group shares once for all its members.
            pg = self.cfg.prefix_groups
            batch = self.mgr.batch_export(ids, self.bufs, prefix_groups=pg)  # group 0 (the only one without groups)
            batches = [batch] + [self.mgr.batch_export(ids, b, group=g + 1, prefix_groups=pg)
                                 for g, b in enumerate(self.group_bufs)]
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
        # The decode rows and the prompt-chunk rows go to two kernel calls: each gets its rows' groups.
        groups = [getattr(b, "prefix_groups", None) for b in batches]
        prefix_groups = [(restrict_rows(g, 0, nd), restrict_rows(g, nd, len(seqs))) for g in groups]
        for pg_d, pg_p in prefix_groups:
            self.metrics.group_decode_rows += int(pg_d.c.num_members) if pg_d is not None else 0
            self.metrics.group_prefill_seqs += int(pg_p.c.num_members) if pg_p is not None else 0
        return StepBatch(seqs, ids, decodes, prefills, tokens, positions, per_group, batch.seq_lens[:nd], qs_p, sl_p,
                         finishing, rows, np.concatenate([np.ones(nd, np.int64), chunks]), prefix_groups)

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
                self.scheduler.running.append(child)
                out.append(child)
        return out

    def _emit(self, s: Seq, logits: Any, tok: Optional[int] = None) -> None:
        r = s.request
        if r.params is not None:
            tok = self.generation.next_token(s, lambda: self._host_logits(logits), tok)
        elif tok is None or r.temperature > 0:  # a device's greedy token is only used at temperature 0
            tok = sample(self._host_logits(logits), r.temperature, r.seed, r.req_id, s.index, len(s.tokens))
        s.tokens.append(tok)
        s.output.append(tok)
        if self.cfg.record_logits:
            s.logits.append(np.array(self._host_logits(logits), np.float32))
        s.pending = True
        self.metrics.generated_tokens += 1
        s.finish_reason = self.generation.finish_reason(s) if r.params is not None else None
        if s.done:
            with self._mgr_clock:
                self.mgr.free(s.seq_id)
            self.scheduler.running.remove(s)
            s.status, s.pending = Status.FINISHED, False
            s.finish_reason = s.finish_reason or "length"
            self.finished[r.req_id].append(s)
        if self.on_token is not None:
            self.on_token(s)
