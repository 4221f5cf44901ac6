"""Publish a libkvblock manager's prefix-cache events in vLLM's KV-event wire format.

KV-aware routers (NVIDIA Dynamo's KV router and standalone indexer, llm-d's KV-cache indexer, vLLM's
router) learn which engine caches which prefix from the stream that vLLM's `ZmqEventPublisher` sends.
`KvEventPublisher` sends the same stream for an engine built on libkvblock, so those routers route to it
unchanged.

Wire format (one message per batch, ZMQ multipart, PUB semantics):
  frame 0  topic (bytes, default b""; llm-d subscribes to the prefix "kv@" and reads pod and model from
           "kv@<pod>@<model>", the model seeding its block keys: llmd_topic(pod, model) builds one)
  frame 1  sequence number, u64 big-endian, from 0 per publisher, +1 per batch
  frame 2  msgpack [ts (float seconds), [event, ...], data_parallel_rank]
           (always positional: Dynamo 1.6.1 rejects a map-shaped batch, "expected a tuple of size 3")
Events, "map" encoding (vLLM's default: each event a tagged map; Dynamo and llm-d's router read it):
  {"type": "BlockStored", "block_hashes": [u64, ...], "parent_block_hash": u64 | nil,
   "token_ids": [u32, ...], "block_size": B, "lora_id": nil, "medium": "GPU" | "CPU" | "STORE", "lora_name": nil
   [, "extra_keys": [entry | nil per block]]}
  {"type": "BlockRemoved", "block_hashes": [u64, ...], "medium": "GPU" | "CPU"}
  {"type": "AllBlocksCleared"}
  A manager with KV cache groups (hybrid models) adds vLLM's group fields: BlockStored "group_idx": g,
  "kv_cache_spec_kind": "full_attention" | "sliding_window", "kv_cache_spec_sliding_window": tokens (window
  groups); BlockRemoved "group_idx": g. Blocks of different groups never share an event.
"array" encoding (positional, vLLM's array_like form; the only one llm-d-kv-cache of 2026-06 decodes):
  ["BlockStored", hashes, parent, token_ids, block_size, lora_id, medium, lora_name[, extra_keys
   [, group_idx, kv_cache_spec_kind[, kv_cache_spec_sliding_window]]]]
  ["BlockRemoved", hashes, medium[, group_idx]]      ["AllBlocksCleared"]
Each event's medium is where its block lives, from the manager's own event (kvb_event.medium), as vLLM
names its tiers: device blocks "GPU", blocks of the host prefix cache (Manager(host_cache=True)) "CPU",
blocks put to the store tier (Manager.set_store; kvblock.store) "STORE": vLLM names no tier below the host,
so the name is ours (KvEventPublisher(media=...) renames it); a store's blocks outlive the engine, so a
BlockStored "STORE" is never followed by a BlockRemoved "STORE".
The manager's events describe each level's index separately, so an offloaded block goes out as a
BlockRemoved "GPU" (when no device block keeps the hash) and a BlockStored "CPU", and a load back as a
BlockStored "GPU". Consecutive blocks of one medium stored as one chain (each block's parent is the
previous block) share one BlockStored; consecutive removals of one medium share one BlockRemoved; blocks
of different media are never merged into one event. Block hashes are the manager's public xxh64
chain hashes; consumers key blocks by their own hash of `token_ids` and link them by these hashes.
A first block hashed with a cache salt goes out with parent nil (the chain starts there) and, as vLLM
publishes a request's cache_salt, the salt as a bare string in that block's extra_keys entry: the
request's cache_salt string when salt_names (kvblock.cache_salts.CacheSalts) knows the u64, else the u64's
decimal digits. A block with a caller extra key gets ["kvb_extra_key", key] in its entry, before the salt
(vLLM too lists a block's other keys before the salt). Consumers that do not understand an entry (Dynamo
ignores extra_keys) treat those blocks as plain text blocks: a routing estimate, never a correctness issue,
since the engine checks every hit.

Replay (optional ROUTER socket, vLLM's protocol): a DEALER sends [b"", start_seq u64 BE]; with
replay_frames="topic" (vLLM since its PR #45177; llm-d's router needs it) it receives
[b"", topic, seq, payload] for every buffered batch with seq >= start_seq, then [b"", b"", -1 as i64 BE, b""];
with replay_frames="legacy" (vLLM before that change) [b"", seq, payload], then [b"", -1 as i64 BE, b""].

Gaps are never silent. Events can be lost in three places: the manager's bounded event buffer
(kvb_drain_events reports a dropped count), this publisher's bounded queue (a batch that does not fit), and
a batch refused because a token id does not fit 32 bits (or, from a newer library, a medium has no wire
name). In each case the consumer's picture of this engine is no longer exact, so the next batch that goes
out ends with (or begins with, for a queue drop) an AllBlocksCleared event: routers forget everything they
knew about this engine and rebuild from the events that follow (they under-estimate its cache until then,
which at worst costs a missed hit, instead of over-estimating it, which would route requests to a prefix
that is gone). Each resync is counted in `stats()["resyncs"]`, the lost events in
`stats()["dropped_events"]`, and a warning is logged. Lost *messages* on the wire (a subscriber's high-water
mark) show up as a sequence gap that the subscriber repairs through the replay socket.

The manager must be made with kvblock.Manager(..., events=True) (KVB_CONFIG_EVENTS); the publisher drains it
with Manager.drain_events. pyzmq and msgpack are needed by this module only (pip install kvblock[events]);
the C library knows nothing of them.
"""
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import msgpack
import zmq

from . import _publisher_args
from ._nocopy import OwnsHandle
from .errors import KvbClosedError
from .manager import Event, Manager, Medium

# One wire event: a dict in the "map" form (group_events), a list in the positional one (to_array_form).
WireEvent = Dict[str, Any]

log = logging.getLogger("kvblock.events")

MAX_TOKEN_ID = 2**32 - 1  # vLLM's events carry token ids as u32 (Dynamo decodes them as u32)
END_SEQ = (-1).to_bytes(8, "big", signed=True)  # end of a replay answer (vLLM's marker)

_DROP_LOG_EVERY_S = 10.0


#: wire names of the media (kvblock.Medium), as vLLM's events name its tiers; KvEventPublisher(media=...)
#: overrides them for a consumer that names tiers otherwise
MEDIA: Dict[Medium, str] = {Medium.DEVICE: "GPU", Medium.HOST: "CPU", Medium.STORE: "STORE"}


class TokenIdRangeError(ValueError):
    """A stored block holds a token id that does not fit the wire format's 32 bits."""


class UnknownMediumError(ValueError):
    """An event's medium has no wire name (a library newer than this package, or a partial `media`)."""


class SaltNameError(ValueError):
    """salt_names maps a cache salt to something other than a non-empty str."""


#: replay answer layouts (KvEventPublisher(replay_frames=...)): vLLM's current one first
REPLAY_FRAMES = ("topic", "legacy")


def llmd_topic(pod: str, model: str) -> str:
    """The topic llm-d routes by: "kv@<pod>@<model>" (it splits on "@" and needs exactly three parts, so
    neither name may hold "@"; the model name must be the one requests name, since it seeds llm-d's keys)."""
    for what, v in (("pod", pod), ("model", model)):
        if not isinstance(v, str) or not v or "@" in v:
            raise ValueError(f"llmd_topic: {what} must be a non-empty str without '@', got {v!r}")
    return f"kv@{pod}@{model}"


def salt_wire_name(salt: int, salt_names: Optional[Mapping[int, Any]] = None) -> str:
    """The string a u64 cache salt goes out as: salt_names[salt] when known, else its decimal digits.
    Raises SaltNameError for a name that is not a non-empty str (vLLM's cache_salt is one)."""
    name = salt_names.get(salt) if salt_names is not None else None
    if name is None:
        return str(salt)
    if not isinstance(name, str) or not name:
        raise SaltNameError(f"salt_names[{salt:#018x}] is {name!r}: a cache salt goes out as a non-empty str")
    return name


# -- draining the manager ------------------------------------------------------------------------------
def drain_all(manager: Manager, chunk: int) -> Tuple[List[Event], int]:
    """Everything the manager holds now: (events, dropped). When the manager dropped events, they were
    dropped after everything it still held (its buffer was full), so the drain continues until the buffer
    is empty and the caller places its resync marker after all of these events."""
    events, dropped = manager.drain_events(chunk)
    more = len(events) == chunk
    while more:
        part, d = manager.drain_events(chunk)
        events.extend(part)
        dropped += d
        more = len(part) == chunk
    return events, dropped


# -- encoding ------------------------------------------------------------------------------------------
def _wire_medium(ev: Event, media: Mapping[Medium, str]) -> str:
    try:
        return media[ev.medium]
    except KeyError:
        raise UnknownMediumError(f"block {ev.block_hash:#018x}: medium {ev.medium!r} has no wire name "
                                 f"(known: {sorted(int(m) for m in media)})") from None


def _group_fields(groups: Sequence[Tuple[Any, ...]], group: int) -> Dict[str, Any]:
    """vLLM's fields of a hybrid model's event (group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window)
    for Manager.groups spec `group`; {} for a manager without groups (the wire stays as before groups)."""
    if not groups:
        return {}
    spec: Tuple[Any, ...] = groups[group] if group < len(groups) else ("unknown",)
    if spec[0] == "window":  # vLLM has no sink field: sinks are the engine's own business
        return {"group_idx": group, "kv_cache_spec_kind": "sliding_window", "kv_cache_spec_sliding_window": spec[1]}
    return {"group_idx": group, "kv_cache_spec_kind": "full_attention" if spec[0] == "full" else spec[0]}


def group_events(raw: Iterable[Event], block_size: int, media: Optional[Mapping[Medium, str]] = None,
                 lora_name: Optional[str] = None, groups: Sequence[Tuple[Any, ...]] = (),
                 salt_names: Optional[Mapping[int, Any]] = None) -> List[WireEvent]:
    """kvblock.Event values (drain order) -> wire events as dicts in the "map" form (encoded later).
    media: {kvblock.Medium: wire name}, default MEDIA (device "GPU", host "CPU", store "STORE"). groups: the manager's
    KV cache groups (Manager.groups): with groups every BlockStored carries its group_idx and
    kv_cache_spec_kind ("full_attention" / "sliding_window", + kv_cache_spec_sliding_window) and every
    BlockRemoved its group_idx, as vLLM's events of hybrid models do; without, neither (unchanged wire).
    Consecutive stored blocks of one medium and group that form one chain share a BlockStored; consecutive
    removals of one medium and group share a BlockRemoved. Raises TokenIdRangeError for a token id outside
    [0, 2^32), UnknownMediumError for a medium that `media` does not name, SaltNameError for a bad salt
    name. salt_names: {u64 salt: request cache_salt str} (kvblock.cache_salts.CacheSalts), see salt_wire_name."""
    media = MEDIA if media is None else media
    out: List[WireEvent] = []
    cur: Optional[WireEvent] = None  # the BlockStored being extended
    for ev in raw:
        if ev.type != "cleared":
            medium = _wire_medium(ev, media)
            group = ev.group if groups else None
        if ev.type == "stored":
            toks = ev.tokens.tolist()
            if toks and (min(toks) < 0 or max(toks) > MAX_TOKEN_ID):
                bad = next(t for t in toks if t < 0 or t > MAX_TOKEN_ID)
                raise TokenIdRangeError(
                    f"block {ev.block_hash:#018x}: token id {bad} does not fit 32 bits; vLLM's KV-event format "
                    f"carries token ids as u32, so this block cannot be published (keep token ids in "
                    f"[0, {MAX_TOKEN_ID}] for engines that publish events)")
            extra: Optional[List[Any]] = None
            if ev.extra_key is not None:
                extra = [["kvb_extra_key", ev.extra_key]]
            if ev.cache_salt is not None:  # first block of a salted chain: the salt as vLLM sends cache_salt
                extra = (extra or []) + [salt_wire_name(ev.cache_salt, salt_names)]
            if (cur is not None and ev.parent_hash is not None and ev.parent_hash == cur["block_hashes"][-1]
                    and cur["medium"] == medium and cur.get("group_idx") == group):
                cur["block_hashes"].append(ev.block_hash)
                cur["token_ids"].extend(toks)
                if extra is not None or "extra_keys" in cur:
                    cur.setdefault("extra_keys", [None] * (len(cur["block_hashes"]) - 1)).append(extra)
            else:
                cur = {"type": "BlockStored", "block_hashes": [ev.block_hash], "parent_block_hash": ev.parent_hash,
                       "token_ids": toks, "block_size": block_size, "lora_id": None,
                       "medium": medium, "lora_name": lora_name}
                if extra is not None:
                    cur["extra_keys"] = [extra]
                cur.update(_group_fields(groups, ev.group))
                out.append(cur)
        elif ev.type == "removed":
            cur = None
            last = out[-1] if out else None
            if (last is not None and last["type"] == "BlockRemoved" and last["medium"] == medium
                    and last.get("group_idx") == group):
                last["block_hashes"].append(ev.block_hash)
            else:
                out.append({"type": "BlockRemoved", "block_hashes": [ev.block_hash], "medium": medium,
                            **({"group_idx": group} if groups else {})})
        else:
            cur = None
            out.append({"type": "AllBlocksCleared"})
    return out


_STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                  "lora_name")


_GROUP_FIELDS = ("group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window")


def to_array_form(ev: WireEvent) -> List[Any]:
    """A map-form event in the older positional form ([tag, fields...] in declaration order; optional
    trailing fields only up to the last one present, as vLLM's omit_defaults encoder writes them)."""
    t = ev["type"]
    if t == "BlockStored":
        arr = [t] + [ev[f] for f in _STORED_FIELDS]
        tail = [ev.get(f) for f in ("extra_keys",) + _GROUP_FIELDS]
        while tail and tail[-1] is None:
            tail.pop()
        return arr + tail
    if t == "BlockRemoved":
        return [t, ev["block_hashes"], ev["medium"]] + ([ev["group_idx"]] if "group_idx" in ev else [])
    return [t]


def encode_batch(events: Sequence[WireEvent], dp_rank: int, encoding: str, ts: Optional[float] = None) -> bytes:
    """msgpack [ts, [events], dp_rank] (the batch is always positional, as vLLM and Dynamo read it)."""
    wire: Sequence[Any] = [to_array_form(e) for e in events] if encoding == "array" else events
    packed: bytes = msgpack.packb([time.time() if ts is None else ts, wire, dp_rank], use_bin_type=True)
    return packed


def decode_batch(payload: bytes) -> Tuple[float, List[Any], int]:
    """The inverse of encode_batch, for tests and tools: (ts, [events as sent], dp_rank)."""
    ts, events, dp_rank = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    return ts, events, dp_rank


# -- the publisher -------------------------------------------------------------------------------------
def _waiting(recv: Callable[[int], Any]) -> Iterator[Any]:
    """The messages recv(zmq.NOBLOCK) has without blocking, until none is left."""
    while True:
        try:
            yield recv(zmq.NOBLOCK)
        except zmq.Again:
            return


class KvEventPublisher(OwnsHandle):
    """Drains a manager's events on flush() and publishes them from a background thread.

    endpoint: where the PUB socket binds (connect=True: connects instead, e.g. to a proxy).
    topic: frame 0 of every message (llm-d: llmd_topic(pod, model)). encoding: "map" (vLLM's default) or
    "array" (positional; llm-d-kv-cache of 2026-06 needs it).
    replay_endpoint: optional ROUTER address serving the last `replay_buffer` batches, in the layout
    replay_frames names: "topic" (vLLM's current one, with the topic frame) or "legacy" (before it).
    salt_names: {u64 salt: request cache_salt string} for the salts' wire names (kvblock.cache_salts).
    dp_rank: data-parallel rank written into every batch. Each event carries its own block's medium
    (device "GPU", host cache "CPU"); media: {kvblock.Medium: name} renames some of them.
    max_queue_batches: batches waiting for the sender thread before new ones are dropped (and counted).
    The socket is an XPUB (wire-identical to PUB for subscribers) so that wait_for_subscribers() can
    tell when a router has subscribed: messages published before that are lost on a PUB socket.
    Copying and pickling are refused (TypeError): the copy would share the sockets and the sender thread.
    """
    _what_is_owned = "ZMQ sockets and a sender thread that close() stops"

    def __init__(self, manager: Manager, *, endpoint: str = "tcp://*:5557", topic: Union[str, bytes] = "",
                 encoding: str = "map", replay_endpoint: Optional[str] = None, dp_rank: int = 0,
                 media: Optional[Mapping[Medium, str]] = None, lora_name: Optional[str] = None,
                 connect: bool = False, max_queue_batches: int = 1024, replay_buffer: int = 10000,
                 hwm: int = 100000, drain_capacity: int = 4096, linger_ms: int = 1000,
                 replay_frames: str = "topic", salt_names: Optional[Mapping[int, Any]] = None) -> None:
        _publisher_args.check(endpoint=endpoint, replay_endpoint=replay_endpoint, topic=topic, dp_rank=dp_rank,
                              hwm=hwm, linger_ms=linger_ms, max_queue_batches=max_queue_batches,
                              replay_buffer=replay_buffer, drain_capacity=drain_capacity, lora_name=lora_name)
        if encoding not in ("map", "array"):
            raise ValueError(f"encoding must be 'map' or 'array', got {encoding!r}")
        if replay_frames not in REPLAY_FRAMES:
            raise ValueError(f"replay_frames must be one of {REPLAY_FRAMES}, got {replay_frames!r}")
        if salt_names is not None and not isinstance(salt_names, Mapping):
            raise ValueError(f"salt_names must be a Mapping of u64 salts to str (e.g. kvblock.cache_salts."
                             f"CacheSalts), got {type(salt_names).__name__}")
        self.replay_frames, self.salt_names = replay_frames, salt_names
        if not isinstance(dp_rank, int) or dp_rank < 0:
            raise ValueError(f"dp_rank must be a non-negative int, got {dp_rank!r}")
        if max_queue_batches < 1 or drain_capacity < 1:
            raise ValueError("max_queue_batches and drain_capacity must be >= 1")
        self.block_size = manager.block_size
        self.endpoint, self.encoding = endpoint, encoding
        self.topic = topic if isinstance(topic, bytes) else topic.encode()
        self.media = {**MEDIA, **(media or {})}
        if not all(isinstance(v, str) for v in self.media.values()):
            raise ValueError(f"media must map kvblock.Medium values to strings, got {media!r}")
        self.replay_endpoint, self.dp_rank, self.lora_name = replay_endpoint, dp_rank, lora_name
        self._manager = manager
        self._groups = getattr(manager, "groups", ())  # a hybrid model's events carry their group
        self._drain_capacity = drain_capacity
        self._flush_lock = threading.Lock()
        self._close_lock = threading.Lock()  # held through close(): a second closer waits for the first
        self._closed = False
        self._queue: queue.Queue[List[WireEvent]] = queue.Queue(maxsize=max_queue_batches)
        self._replay_buf: List[Tuple[bytes, bytes]] = []
        self._replay_max = replay_buffer
        self._stats = dict(batches=0, events=0, dropped_events=0, resyncs=0, replay_requests=0)
        self._stats_lock = threading.RLock()
        self._resync_pending = False  # a queue drop happened: the next queued batch starts with a clear
        self._last_drop_log = 0.0
        self._subscribers = 0
        self._cv = threading.Condition()

        self._ctx: Any = zmq.Context.instance()
        self._pub = self._ctx.socket(zmq.XPUB)
        self._pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscription, and (VERBOSER) every unsubscription
        if hasattr(zmq, "XPUB_VERBOSER"):
            self._pub.setsockopt(zmq.XPUB_VERBOSER, 1)
        self._pub.setsockopt(zmq.SNDHWM, hwm)
        self._pub.setsockopt(zmq.LINGER, linger_ms)
        self._replay: Any = None  # the ROUTER socket when replay_endpoint is given
        try:
            (self._pub.connect if connect else self._pub.bind)(endpoint)
            if replay_endpoint:
                self._replay = self._ctx.socket(zmq.ROUTER)
                self._replay.setsockopt(zmq.LINGER, 0)
                self._replay.bind(replay_endpoint)
        except zmq.ZMQError as e:
            self._close_sockets()
            raise OSError(f"kvblock.events: cannot {'connect' if connect else 'bind'} "
                          f"{endpoint if not replay_endpoint else endpoint + ' / ' + replay_endpoint}: {e}") from None
        #: the addresses actually bound (a "tcp://127.0.0.1:*" endpoint gets its port here)
        self.bound_endpoint = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.bound_replay_endpoint = (self._replay.getsockopt_string(zmq.LAST_ENDPOINT)
                                      if self._replay is not None else None)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._running = True
        self._thread = threading.Thread(target=self._run, name="kvblock-events", daemon=True)
        self._thread.start()

    # -- caller side ---------------------------------------------------------------------------------
    def flush(self) -> int:
        """Drain the manager's pending events and queue them as one batch. Returns the number of wire
        events queued (0 when there was nothing to say). Raises TokenIdRangeError for a token id that
        does not fit 32 bits (UnknownMediumError for a medium without a wire name, SaltNameError for a
        salt name that is not a str): that batch is not sent and the stream resyncs (see the module notes)."""
        with self._flush_lock:
            if not self._running:
                raise KvbClosedError(f"KvEventPublisher on {self.bound_endpoint}",
                                     "close() stopped its sender thread and closed its sockets")
            raw, dropped = drain_all(self._manager, self._drain_capacity)
            resync = dropped > 0
            error: Optional[ValueError] = None
            try:
                events = group_events(raw, self.block_size, self.media, self.lora_name, self._groups,
                                      self.salt_names)
            except (TokenIdRangeError, UnknownMediumError, SaltNameError) as e:
                events, error = [], e
                dropped += len(raw)
                resync = True
            if dropped:
                self._count_drop(dropped, "manager event buffer" if error is None else "unpublishable batch")
            if resync:
                events.append({"type": "AllBlocksCleared"})
            if self._resync_pending:
                events.insert(0, {"type": "AllBlocksCleared"})
            if events:
                try:
                    self._queue.put_nowait(events)
                    self._resync_pending = False
                    self._wake()
                except queue.Full:
                    self._count_drop(len(raw) or 1, "publisher queue")
                    self._resync_pending = True
            if error is not None:
                raise error
            return len(events)

    def _count_drop(self, n: int, where: str) -> None:
        with self._stats_lock:
            self._stats["dropped_events"] += n
            self._stats["resyncs"] += 1
        now = time.monotonic()
        if now - self._last_drop_log >= _DROP_LOG_EVERY_S:
            self._last_drop_log = now
            log.warning("kvblock.events %s: %d event(s) lost in the %s; subscribers get AllBlocksCleared "
                        "and rebuild from the following events", self.bound_endpoint, n, where)

    def wait_for_subscribers(self, n: int = 1, timeout: float = 10.0) -> bool:
        """True once n subscriptions are live (a router has connected), False after timeout seconds."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._subscribers < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return True

    def wait_sent(self, timeout: float = 10.0) -> bool:
        """True once every queued batch has been handed to ZMQ (for tests and orderly shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)
        return True

    def stats(self) -> Dict[str, int]:
        """batches / events (wire events) sent; dropped_events (manager events lost: in its buffer, refused
        for a token id, or in a batch the full queue could not take); resyncs (AllBlocksCleared sent for
        gaps); replay_requests; subscribers (live subscriptions that match the topic); queued_batches."""
        with self._stats_lock:
            s = dict(self._stats)
        s["subscribers"] = self._subscribers
        s["queued_batches"] = self._queue.qsize()
        return s

    def close(self, timeout: float = 5.0) -> None:
        """Flush what the manager still holds, send everything queued (bounded by timeout), stop.
        Idempotent and safe from several threads at once: the first close() does the work and the others
        return when it is done (closing the wake pipe twice could close a descriptor reused meanwhile)."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            try:
                self.flush()
            except Exception:  # the manager may be closed already; what was queued still goes out
                pass
            self.wait_sent(timeout)
            with self._flush_lock:
                self._running = False
            self._wake()
            self._thread.join(timeout)
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._close_sockets()

    def __enter__(self) -> "KvEventPublisher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _close_sockets(self) -> None:
        for s in (self._pub, self._replay):
            if s is not None:
                s.close()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:  # the pipe is full: the thread is awake already
            pass

    # -- sender thread: owns both sockets --------------------------------------------------------------
    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._pub, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        if self._replay is not None:
            poller.register(self._replay, zmq.POLLIN)
        seq = 0
        while True:
            ready = dict(poller.poll(1000))
            if self._wake_r in ready:
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
            if self._pub in ready:
                self._read_subscriptions()
            if self._replay is not None and self._replay in ready:
                self._serve_replay()
            while True:
                try:
                    events = self._queue.get_nowait()
                except queue.Empty:
                    break
                payload = encode_batch(events, self.dp_rank, self.encoding)
                seq_bytes = seq.to_bytes(8, "big")
                self._pub.send_multipart([self.topic, seq_bytes, payload])
                self._replay_buf.append((seq_bytes, payload))
                if len(self._replay_buf) > self._replay_max:
                    del self._replay_buf[: len(self._replay_buf) - self._replay_max]
                seq += 1
                with self._stats_lock:
                    self._stats["batches"] += 1
                    self._stats["events"] += len(events)
                self._queue.task_done()
            if not self._running and self._queue.empty():
                return

    def _read_subscriptions(self) -> None:
        for msg in _waiting(self._pub.recv):
            # a subscription to a prefix of our topic receives our messages; others are not ours
            if msg[:1] in (b"\x01", b"\x00") and self.topic.startswith(msg[1:]):
                with self._cv:
                    self._subscribers += 1 if msg[:1] == b"\x01" else -1
                    self._cv.notify_all()

    def _serve_replay(self) -> None:
        for frames in _waiting(self._replay.recv_multipart):
            if len(frames) != 3 or len(frames[2]) != 8:
                log.warning("kvblock.events: ignoring a malformed replay request (%d frames)", len(frames))
                continue
            client, _, start = frames
            start_seq = int.from_bytes(start, "big")
            with self._stats_lock:
                self._stats["replay_requests"] += 1
            # vLLM's current layout repeats the live message ([topic, seq, payload]) and ends with an empty
            # topic; its older layout, which Dynamo 1.6.1 also reads, has no topic frame at all
            topic = [self.topic] if self.replay_frames == "topic" else []
            end_topic = [b""] if self.replay_frames == "topic" else []
            for seq_bytes, payload in self._replay_buf:
                if int.from_bytes(seq_bytes, "big") >= start_seq:
                    self._replay.send_multipart([client, b""] + topic + [seq_bytes, payload])
            self._replay.send_multipart([client, b""] + end_topic + [END_SEQ, b""])
