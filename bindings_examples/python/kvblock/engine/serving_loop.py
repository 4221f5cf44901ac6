"""The engine behind the server: one thread runs engine steps for as long as there is work, taking new
requests and aborts between steps, and hands every sample's news (new tokens, new stable text, logprobs,
finish reason) to the asyncio side through each request's queue. The engine is touched by this thread only.
A step that raises fails the requests in flight and the engine is rebuilt; the thread never stops for a
request."""
from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .generation import SamplingParams
from .sequence import Request, Seq
from .server_metrics import ServerMetrics

log = logging.getLogger("kvblock.server")


def _put_all(items: List[Tuple["asyncio.Queue[Update]", "Update"]]) -> None:
    for q, u in items:
        q.put_nowait(u)


class QueueFull(Exception):
    """More requests in flight than the server takes (running + --max-queue waiting)."""


@dataclass
class Update:
    """One sample's news since the last one (error: the engine failed the request)."""
    index: int
    token_ids: List[int]
    text: str
    logprobs: list
    finish_reason: Optional[str] = None
    error: Optional[str] = None
    prompt: int = 0  # which prompt of the API request (its handle's prompt_index)


@dataclass
class Handle:
    """A submitted prompt: its updates arrive on `updates` (in the server's event loop), shared by the
    prompts of one API request."""
    req_id: int
    prompt_index: int
    prompt_len: int
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    updates: "asyncio.Queue[Update]"
    arrival: float = field(default_factory=time.monotonic)
    first_token: Optional[float] = None
    # the engine thread's record of what each sample was sent: tokens, characters, logprobs entries
    sent: Dict[int, List[int]] = field(default_factory=dict)
    unfinished: int = 0


class EngineLoop:
    """make_engine() builds the engine (again after a failure); capacity: requests in flight at most."""

    def __init__(self, make_engine: Callable[[], Any], capacity: int, metrics: ServerMetrics) -> None:
        self.make_engine, self.capacity, self.metrics = make_engine, capacity, metrics
        self.engine = make_engine()
        self._inbox: "queue.Queue[tuple]" = queue.Queue()
        self._active: Dict[int, Handle] = {}
        self._touched: List[Seq] = []
        self._outbox: Dict[asyncio.AbstractEventLoop, List[Tuple["asyncio.Queue[Update]", Update]]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kvblock-engine", daemon=True)
        self._hook()

    def _hook(self) -> None:
        self.engine.on_token = self._touched.append

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._inbox.put(("wake",))
        self._thread.join(timeout=30)
        self.engine.close()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the server's side (any thread) ------------------------------------------------------------------
    def submit(self, prompts: Sequence[List[int]], params: SamplingParams,
               loop: asyncio.AbstractEventLoop) -> List[Handle]:
        """One handle per prompt, or QueueFull (nothing submitted)."""
        with self._lock:
            if self._in_flight + len(prompts) > self.capacity:
                raise QueueFull(f"{self._in_flight} requests in flight, the server takes {self.capacity}")
            self._in_flight += len(prompts)
        updates: "asyncio.Queue[Update]" = asyncio.Queue()
        handles = [Handle(next(self._ids), i, len(p), params, loop, updates, unfinished=params.n)
                   for i, p in enumerate(prompts)]
        for h, p in zip(handles, prompts):  # without params.seed, each prompt's draws have a seed of their own
            self._inbox.put(("add", h, Request(h.req_id, list(p), params.max_tokens, n=params.n,
                                               seed=secrets.randbits(63), params=params)))
        self.metrics.request_arrived(len(handles))
        return handles

    def abort(self, handles: Sequence[Handle]) -> None:
        for h in handles:
            self._inbox.put(("abort", h.req_id))

    # -- the engine thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._take_inbox(block=not self.engine.has_work())
                if self.engine.has_work():
                    t0 = time.perf_counter()
                    self.engine.step()
                    self.engine.publish_events()
                    self.metrics.step_done(time.perf_counter() - t0)
                    self._deliver()
                    self.metrics.observe_engine(self.engine, every_s=0.05 if self.engine.has_work() else 0)
            except Exception as e:  # a bug or bad state: fail what is in flight, start a fresh engine
                log.exception("engine step failed; failing %d requests and rebuilding the engine", len(self._active))
                self._fail_all(f"engine failure: {type(e).__name__}: {e}")
            self._flush()

    def _take_inbox(self, block: bool) -> None:
        try:
            item = self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            self._handle(item)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _handle(self, item: tuple) -> None:
        if item[0] == "add":
            h, req = item[1], item[2]
            try:
                self.engine.add_request(req)
            except Exception as e:  # the server checks requests first: this is a last line of defence
                self._post(h, Update(0, [], "", [], "abort", error=f"{type(e).__name__}: {e}"))
                self._release(h)
                return
            self._active[h.req_id] = h
        elif item[0] == "abort":
            h = self._active.get(item[1])
            if h is None:
                return
            ended = self.engine.abort(h.req_id)
            self.engine.finished.pop(h.req_id, None)
            self.metrics.aborted(len(ended))
            self._release(h)
            self.metrics.observe_engine(self.engine, every_s=0)

    def _release(self, h: Handle) -> None:
        self._active.pop(h.req_id, None)
        with self._lock:
            self._in_flight -= 1

    def _post(self, h: Handle, u: Update) -> None:
        """Queues u for h's event loop; _flush hands each loop its step's updates in one wake-up."""
        u.prompt = h.prompt_index
        self._outbox.setdefault(h.loop, []).append((h.updates, u))

    def _flush(self) -> None:
        for loop, items in self._outbox.items():
            try:
                loop.call_soon_threadsafe(_put_all, items)
            except RuntimeError:  # the server's loop is closed (shutting down)
                pass
        self._outbox = {}

    def _deliver(self) -> None:
        touched, self._touched[:] = list({id(s): s for s in self._touched}.values()), []
        gen = self.engine.generation
        now = time.monotonic()
        for s in touched:
            h = self._active.get(s.request.req_id)
            if h is None:
                continue
            if h.first_token is None:
                h.first_token = now
                self.metrics.first_token(now - h.arrival)
            ntok, nchar, nlp = h.sent.setdefault(s.index, [0, 0, 0])
            text = gen.stable_text(s)
            u = Update(s.index, s.output[ntok:], text[nchar:], s.logprobs[nlp:], s.finish_reason)
            h.sent[s.index] = [len(s.output), max(nchar, len(text)), len(s.logprobs)]
            self._post(h, u)
            if s.finish_reason is not None:
                self.metrics.sample_finished(s.finish_reason, len(s.output), now - h.arrival)
                h.unfinished -= 1
                if h.unfinished == 0:
                    self.engine.finished.pop(h.req_id, None)
                    self._release(h)

    def _fail_all(self, message: str) -> None:
        for h in list(self._active.values()):
            self._post(h, Update(0, [], "", [], "abort", error=message))
            self._release(h)
        self._touched[:] = []
        try:
            self.engine.close()
        except Exception:
            log.exception("closing the failed engine")
        self.metrics.base_tokens = self.metrics.generated_tokens
        self.engine = self.make_engine()
        self._hook()
        self.metrics.engine_restarts += 1
