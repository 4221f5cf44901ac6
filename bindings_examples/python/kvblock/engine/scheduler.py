"""The scheduler (nano-vllm's Scheduler, on libkvblock's manager): the waiting / running / swapped queues,
and per step which sequences run: swapped ones back first, then one decode token for every running
sequence (out of blocks: preempt the newest, by swap or recompute), then prompt chunks of running and new
sequences within the token budget. Admission asks the manager (can_allocate, can_swap_in) and keeps room
for every running sequence to grow; the block copies these decisions need run through the BlockMover.
A sliding-window model's prompt that does not fit the free blocks whole is admitted in part: its first
chunk is allocated with the window set, and each later chunk's tokens are appended before it runs, so it
holds only its window, sinks and current chunk (the window releases the rest as chunks commit)."""
from __future__ import annotations

import collections
from typing import Any, Callable, ContextManager, Deque, List, Optional, Tuple

import numpy as np

from ..errors import KvbError
from ..errors import Status as KvbStatus
from ..manager import Availability, Manager
from .block_mover import BlockMover
from .config import EngineConfig, Metrics
from .sequence import Seq, Status


class Scheduler:
    """salt(seq): the cache salt its blocks are allocated under (None: shared with every request)."""

    def __init__(self, cfg: EngineConfig, mgr: Manager, mover: BlockMover, metrics: Metrics,
                 mgr_clock: ContextManager[Any], salt: Callable[[Seq], Optional[int]],
                 window: Tuple[int, int] = (0, 0)) -> None:
        self.cfg, self.mgr, self.mover, self.metrics = cfg, mgr, mover, metrics
        self.window, self.sink = window  # every sequence's sliding window (tokens, sinks); 0: none
        self.mgr_clock, self.salt = mgr_clock, salt
        self.store_poll: Optional[Callable[[], None]] = None  # set by the engine when it has a store tier
        self.waiting: Deque[Seq] = collections.deque()
        self.running: List[Seq] = []
        self.swapped: Deque[Seq] = collections.deque()

    def add(self, s: Seq) -> None:
        self.waiting.append(s)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def _free_blocks_after(self, new_tokens: int) -> int:
        return self.mgr.num_free_blocks - -(-new_tokens // self.cfg.block_size)

    def _extend(self, s: Seq, chunk: int) -> int:
        """A prompt admitted in part: appends the tokens of its next chunk the manager lacks, as many as the
        free blocks beyond one per other running sequence take; returns the chunk that can run now (maybe 0)."""
        end = s.num_computed + chunk
        if end <= s.allocated:
            return chunk
        bs = self.cfg.block_size
        room = -s.allocated % bs + max(0, self.mgr.num_free_blocks - (len(self.running) - 1)) * bs
        end = min(end, s.allocated + room)
        if end <= s.num_computed and len(self.running) == 1:
            raise RuntimeError(f"request {s.request.req_id}: the pool cannot hold its window and next chunk")
        if end > s.allocated:
            with self.mgr_clock:
                self.mgr.append(s.seq_id, s.tokens[s.allocated:end])
            s.allocated = end
        return max(0, end - s.num_computed)

    def preempt(self, victim: Seq) -> None:
        """Swaps the victim out (preemption="swap", when the host has room), else frees it to be recomputed
        from its tokens (prompt + generated) when readmitted."""
        self.running.remove(victim)
        if (self.cfg.preemption == "swap" and victim.pending and self.mover.host is not None
                and self.mgr.can_swap_out(victim.seq_id) == Availability.OK):
            with self.mgr_clock:
                pairs = self.mgr.swap_out(victim.seq_id)
            self.mover.swap_out(pairs)
            victim.status = Status.SWAPPED
            self.swapped.append(victim)
            self.metrics.swaps_out += 1
            return
        with self.mgr_clock:
            self.mgr.free(victim.seq_id)
        victim.num_computed, victim.pending, victim.filling, victim.status = 0, False, False, Status.WAITING
        self.waiting.appendleft(victim)
        self.metrics.preemptions += 1

    def _store_filling(self, s: Seq) -> bool:
        """After an allocation: poll the store (a synchronous one completes the gets at once), then take
        the sequence's computed count (failed gets cut it) and whether it still waits for gets."""
        assert self.store_poll is not None
        self.store_poll()
        with self.mgr_clock:
            s.num_computed, filling = self.mgr.store_state(s.seq_id)
        s.filling = filling != 0
        return s.filling

    def _store_arrivals(self) -> None:
        """Polls the store (completed gets; the write-through puts of the last step's offloads): sequences
        whose gets were in flight may run once all of theirs ended."""
        assert self.store_poll is not None
        self.store_poll()
        for s in self.running:
            if s.filling:
                with self.mgr_clock:
                    s.num_computed, filling = self.mgr.store_state(s.seq_id)
                s.filling = filling != 0

    def schedule(self) -> Tuple[List[Seq], List[Tuple[Seq, int]]]:
        """This step's (decodes, prefills): the sequences that decode one token, and (sequence, chunk)
        prompt chunks; their blocks are allocated (and appended to) in the manager."""
        cfg, mgr = self.cfg, self.mgr
        budget = cfg.max_batched_tokens
        if self.store_poll is not None:
            self._store_arrivals()
        # Swapped sequences come back first, when the pool can take them and still grow every running one.
        while self.swapped and len(self.running) < cfg.max_num_seqs:
            s = self.swapped[0]
            with self.mgr_clock:
                if (mgr.can_swap_in(s.seq_id) != Availability.OK or
                        mgr.num_free_blocks - mgr.info(s.seq_id).num_held_blocks <= len(self.running)):
                    break
                pairs = mgr.swap_in(s.seq_id)
            self.mover.swap_in(pairs)
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
                with self.mgr_clock:
                    mgr.batch_append(ids, toks)
                break
            except KvbError as e:
                if e.status != KvbStatus.OUT_OF_BLOCKS or len(self.running) == 1:
                    raise
                victim = self.running[-1]
                self.preempt(victim)
                if victim in decodes:
                    decodes.remove(victim)
        for s in decodes:
            s.pending = False
        budget -= len(decodes)
        with self.mgr_clock:
            pairs = mgr.drain_copies()
        if len(pairs):
            self.mover.copy_on_write(pairs)
        # Prompts being prefilled continue, then new requests, chunked to the budget.
        prefills: List[Tuple[Seq, int]] = []
        decoding = {s.seq_id for s in decodes}
        for s in self.running:
            if budget <= 0:
                break
            if s.seq_id not in decoding and not s.filling and s.num_computed < len(s.tokens):
                chunk = self._extend(s, min(len(s.tokens) - s.num_computed, budget))
                if chunk:
                    prefills.append((s, chunk))
                    budget -= chunk
        while self.waiting and not self.swapped and budget > 0 and len(self.running) < cfg.max_num_seqs:
            s = self.waiting[0]
            n, salt = len(s.tokens), self.salt(s)
            with self.mgr_clock:
                cached = mgr.can_allocate(s.tokens, cache_salt=salt)
                if self.window and (cached is None or self._free_blocks_after(n - cached) < len(self.running)):
                    n = min(n, budget)  # in part: the first chunk now, the rest appended chunk by chunk
                    cached = mgr.can_allocate(s.tokens[:n], cache_salt=salt)
                if cached is None or self._free_blocks_after(n - cached) < len(self.running):
                    if not self.running and cached is None and mgr.num_free_blocks == mgr.num_blocks:
                        raise RuntimeError(f"request {s.request.req_id}: {n} tokens never fit the pool")
                    break
                part = n < len(s.tokens)
                cached = mgr.allocate(s.seq_id, s.tokens[:n] if part else s.tokens, cache_salt=salt,
                                      window=self.window if part else 0, sink=self.sink if part else 0)
            self.waiting.popleft()
            s.num_computed, s.allocated, s.status = cached, n, Status.RUNNING
            self.running.append(s)
            if self.store_poll is not None and self._store_filling(s):
                continue  # its prompt runs once its store blocks are in (a later step)
            chunk = min(n - cached, budget)
            prefills.append((s, chunk))
            budget -= chunk
        return decodes, prefills
