"""Manager: the whole C manager API (docs/ARCHITECTURE.md, "Design rules") with numpy arrays where C returns arrays.

The decode step of an engine is three calls with no Python loop over sequences:
    m.batch_append(seq_ids, new_tokens)      # one token per sequence, all-or-nothing
    batch = m.batch_export(seq_ids, buffers)  # block tables, seq lens, query starts, slot mapping
    ... kernels ...
    m.batch_commit(seq_ids)                   # their K/V are written
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, NoReturn, Optional, Sequence, Tuple

import numpy as np

from . import _lib
from ._batch_calls import BatchCalls
from ._convert import (
    U32_MAX,
    TokenLike,
    _backend_from_buffer,
    _newp,
    _refuse_element,
    i32,
    i64,
    int64_ptr,
    real,
    scalar,
    size,
    u32,
    u64,
)
from ._guard import GuardedHandle, inline_call
from ._nocopy import OwnsHandle
from ._tree_calls import TreeCalls
from .batch_buffers import Batch as Batch  # (re-exported: kvblock.Batch)
from .batch_buffers import BatchBuffers as BatchBuffers
from .errors import KvbArgumentError, KvbClosedError, check, header_enum_members

if TYPE_CHECKING:
    from .errors import HeaderEnumMeta

ffi = _lib.ffi


class Availability(enum.IntEnum):
    """Answer of can_swap_out / can_swap_in (vLLM's AllocStatus)."""
    OK = 0
    LATER = 1
    NEVER = 2


@dataclass(frozen=True)
class SeqInfo:
    swapped_out: bool
    num_tokens: int
    num_computed: int
    num_cached: int
    num_blocks: int
    num_held_blocks: int
    window_tokens: int
    sink_tokens: int


# Where a block lives (kvb_medium, read from the header): Medium.DEVICE (the device pool) or Medium.HOST (the
# host level of the host cache).
if TYPE_CHECKING:
    class Medium(enum.IntEnum, metaclass=HeaderEnumMeta): ...
else:
    Medium = enum.IntEnum("Medium", header_enum_members("kvb_medium", "KVB_MEDIUM_"))


class Event(NamedTuple):
    """A prefix-index event (kvb_event): type is "stored", "removed" or "cleared". Events describe, per
    medium, the hashes each level's index holds: an offload is a REMOVED on the device (when no device block
    keeps the hash) and a STORED on the host."""
    type: str
    block_hash: int
    parent_hash: Optional[int]      # previous block's hash (stored, not first block)
    cache_salt: Optional[int]       # first block of a salted sequence (stored)
    extra_key: Optional[int]
    tokens: np.ndarray              # the block's tokens (stored), else empty
    block_id: int                   # on `medium`
    medium: Medium = Medium.DEVICE
    group: int = 0                  # KV cache group of the block (0 without groups and for "cleared")


_EVENT_TYPES = {1: "stored", 2: "removed", 3: "cleared"}
_BUFFER_TOO_SMALL = _lib.lib.KVB_ERR_BUFFER_TOO_SMALL
# block_table's first buffer grows to the longest table seen up to this (16 KiB): beyond, the failed first
# try costs little against the copy, and a huge buffer per call would cost more than it saves
_TABLE_HINT_MAX = 4096
_MEDIA = {int(m): m for m in Medium}
_SIZE_PTR, _I32_ARRAY = ffi.typeof("size_t*"), ffi.typeof("int32_t[]")  # resolved once, for cffi's C functions


def hash_tokens(tokens: TokenLike, parent: Optional[int] = None) -> int:
    """The public xxh64 block hash (identical to nano-vllm's compute_hash)."""
    buf, n = int64_ptr(tokens)
    if parent is not None:
        parent = u64(parent, "parent")
    parent_ptr = ffi.new("uint64_t*", parent) if parent is not None else ffi.NULL
    return int(_lib.lib.kvb_hash_tokens(parent_ptr, buf, n))


def _refuse_overflow(seq_id: int, other: Any, what: str) -> NoReturn:
    """The KvbArgumentError for an OverflowError cffi raised converting the arguments of kvb_seq_append,
    kvb_seq_commit or kvb_seq_block_table_group (before the C call: nothing changed): seq_id outside int64_t,
    else `what`: num_tokens outside size_t, group outside uint32_t, or the one token of append's fast path
    outside int64_t ("tokens")."""
    try:
        i64(seq_id, "seq_id")
        if what == "num_tokens":
            size(other, what)
        elif what == "group":
            u32(other, what)
        else:
            _refuse_element(other, what)
    except KvbArgumentError as e:
        raise e from None  # the refusal alone, without cffi's OverflowError as its context
    raise AssertionError(f"cffi refused {seq_id!r} and {other!r} that the checks accept")  # pragma: no cover


class Manager(BatchCalls, TreeCalls, OwnsHandle):
    """A KV-cache block manager (one kvb_manager). Use it as a context manager, or call close().
    Copying and pickling are refused (TypeError): a copy would share the C manager and destroy it.

    Threads may share a Manager, close() included: close() waits for the call in progress on another thread,
    and every call after it raises KvbClosedError (a KvbArgumentError) naming this Manager (kvblock._guard)."""

    _guard: Optional[GuardedHandle] = None  # None until the C manager exists (a failed __init__ has none)
    _table_hint = 16  # block_table's first buffer: the longest table returned so far
    _what_is_owned = "a C kvb_manager handle that close() and its finalizer destroy"

    def __init__(self, num_blocks: int, block_size: int = 16, *, num_host_blocks: int = 0, watermark: float = 0.0,
                 non_cacheable_tokens: Optional[TokenLike] = None, keyed_index: bool = False, events: bool = False,
                 event_capacity: int = 65536, index_seed: int = 0, host_cache: bool = False,
                 host_cache_twin_percent: Optional[int] = None, groups: Optional[Sequence[tuple]] = None) -> None:
        """host_cache: the num_host_blocks host blocks are also a second prefix-cache level
        (KVB_CONFIG_HOST_CACHE): evicted device blocks are offloaded there and prefix hits can be loaded
        back; run the copies that drain_host_transfers hands out (see there). host_cache_twin_percent: the
        percent of host blocks (0..100; None = the library's default, 1) that may keep the host copy of a
        block loaded back to the device, so that evicting it again moves nothing: 0 is an exclusive cache
        (most hits), larger values move fewer blocks. groups: KV cache groups of a hybrid model, each
        ("full",) or ("window", window_tokens[, sink_tokens]); one block table per group
        (block_table(seq, group), batch_export(..., group=g)). None = no groups."""
        self._lib = lib = _lib.lib
        cfg = ffi.new("kvb_config*")
        lib.kvb_config_init(cfg)
        cfg.num_blocks = num_blocks = u32(num_blocks, "num_blocks")
        cfg.block_size = block_size = u32(block_size, "block_size")
        cfg.num_host_blocks = num_host_blocks = u32(num_host_blocks, "num_host_blocks")
        cfg.watermark = real(watermark, "watermark")
        keep = None
        if non_cacheable_tokens is not None:
            keep, n = int64_ptr(non_cacheable_tokens, "non_cacheable_tokens")
            cfg.non_cacheable_tokens, cfg.num_non_cacheable_tokens = keep, n
        cfg.flags = ((lib.KVB_CONFIG_KEYED_INDEX if keyed_index else 0) | (lib.KVB_CONFIG_EVENTS if events else 0)
                     | (lib.KVB_CONFIG_HOST_CACHE if host_cache else 0))
        cfg.event_capacity = u32(event_capacity, "event_capacity")
        cfg.index_seed = u64(index_seed, "index_seed")
        if host_cache_twin_percent is not None:  # the library refuses more than 100, naming it
            cfg.host_cache_twin_percent = u32(host_cache_twin_percent, "host_cache_twin_percent")
        specs: Any = None  # kvb_group_spec[] when groups are given
        if groups is not None and not isinstance(groups, (list, tuple)):
            raise KvbArgumentError(f"groups must be a list of group specs, got {type(groups).__name__} {groups!r}")
        if groups:
            specs = ffi.new("kvb_group_spec[]", len(groups))
            for i, g in enumerate(groups):
                lib.kvb_group_spec_init(specs + i)
                if not isinstance(g, (list, tuple)) or not g or g[0] not in ("full", "window") or \
                        (g[0] == "full" and len(g) != 1) or (g[0] == "window" and len(g) not in (2, 3)):
                    raise KvbArgumentError(f"groups[{i}] = {g!r}: use ('full',) or ('window', tokens[, sinks])")
                if g[0] == "window":
                    specs[i].kind = lib.KVB_GROUP_WINDOW
                    specs[i].window_tokens = u32(g[1], f"groups[{i}] window")
                    specs[i].sink_tokens = u32(g[2] if len(g) > 2 else 0, f"groups[{i}] sinks")
            cfg.groups, cfg.num_groups = specs, len(groups)
        self.num_groups = len(groups) if groups else 1
        #: the KV cache groups as given, normalised: ("full",) or ("window", tokens, sinks) each; () without
        self.groups = tuple(("full",) if specs[i].kind != lib.KVB_GROUP_WINDOW else
                            ("window", int(specs[i].window_tokens), int(specs[i].sink_tokens))
                            for i in range(len(groups))) if groups else ()
        out = ffi.new("kvb_manager**")
        check(lib.kvb_manager_create(cfg, out))
        self._guard = guard = GuardedHandle(out[0], lib.kvb_manager_destroy,
                                            f"kvblock.Manager(num_blocks={num_blocks}, "
                                            f"block_size={block_size}) at {id(self):#x}")
        # Every C call on the manager goes through these two (bound once: the per-call cost is one Python call).
        self._call, self._run = guard.call, guard.run
        # The per-sequence decode loop's C functions, bound once (the lookup through the cffi library
        # object was ~20 ns a call).
        self._seq_append, self._seq_commit = lib.kvb_seq_append, lib.kvb_seq_commit
        self._seq_block_table = lib.kvb_seq_block_table_group
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.num_host_blocks = num_host_blocks
        self.host_cache = bool(host_cache)

    def close(self) -> None:
        """Destroys the C manager once the calls in progress on other threads return (it waits for them);
        every later call raises KvbClosedError. Idempotent, and safe from several threads at once: each
        close() returns after the destroy. From a signal handler that interrupted a call on this Manager it
        returns at once, and the interrupted call destroys the manager as it returns."""
        if self._guard is not None:
            self._guard.close()

    @property
    def closed(self) -> bool:
        return self._guard is None or self._guard.closed

    def __enter__(self) -> "Manager":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if self._guard is not None:
            self._guard.close(wait=False)  # a finalizer never blocks (a daemon thread frozen at exit)

    def __repr__(self) -> str:
        name = self._guard.name if self._guard is not None else "kvblock.Manager (not created)"
        return f"<{name}{' closed' if self.closed else ''}>"

    @property
    def _h(self) -> Any:
        """The kvb_manager* itself, NOT held: a close() on another thread may free it under its user. Only for
        code that guarantees no close() meanwhile (the benchmark's raw-cffi floor); everything else calls
        through self._call / self._run."""
        if self._guard is None:
            raise KvbClosedError("kvblock.Manager (not created)", "its __init__ failed")
        return self._guard.unguarded()

    # -- sequences: the core flow ----------------------------------------------------------------
    def _options(self, n: int, cache_salt: Optional[int], extra_keys: Optional[Mapping],
                 window: int, sink: int) -> Any:
        if cache_salt is None and not extra_keys and not window and not sink:
            return ffi.NULL, None
        o = ffi.new("kvb_seq_options*")
        self._lib.kvb_seq_options_init(o)
        keep = []
        if cache_salt is not None:
            o.has_cache_salt, o.cache_salt = 1, u64(cache_salt, "cache_salt")
        if extra_keys is not None and not isinstance(extra_keys, Mapping):
            raise KvbArgumentError(f"extra_keys must be a mapping {{block index: key}}, got "
                                   f"{type(extra_keys).__name__} {extra_keys!r}")
        if extra_keys:
            items = sorted((u32(k, "extra_keys block index"), u64(v, f"extra_keys[{k!r}]"))
                           for k, v in extra_keys.items())
            blocks = ffi.new("uint32_t[]", [k for k, _ in items])
            keys = ffi.new("uint64_t[]", [v for _, v in items])
            keep += [blocks, keys]
            o.extra_key_blocks, o.extra_keys, o.num_extra_keys = blocks, keys, len(items)
        o.window_tokens, o.sink_tokens = u32(window, "window"), u32(sink, "sink")
        return o, keep

    def can_allocate(self, tokens: TokenLike, *, cache_salt: Optional[int] = None,
                     extra_keys: Optional[Mapping] = None) -> Optional[int]:
        """Cached tokens an allocate would reuse, or None if the pool cannot hold the prompt now."""
        buf, n = int64_ptr(tokens)
        opts, _keep = self._options(n, cache_salt, extra_keys, 0, 0)
        cached = ffi.new("size_t*")
        status = self._call(self._lib.kvb_seq_can_allocate_ex, buf, n, opts, cached)
        if status == self._lib.KVB_ERR_OUT_OF_BLOCKS:
            return None
        check(status)
        return int(cached[0])

    def allocate(self, seq_id: int, tokens: TokenLike, *, cache_salt: Optional[int] = None,
                 extra_keys: Optional[Mapping] = None, window: int = 0, sink: int = 0) -> int:
        """Creates sequence seq_id holding the prompt; returns the number of prefix-cached tokens.
        extra_keys: {block index: key} (image content hash, LoRA id); window/sink: sliding window."""
        buf, n = int64_ptr(tokens)
        opts, _keep = self._options(n, cache_salt, extra_keys, window, sink)
        cached = ffi.new("size_t*")
        self._run(self._lib.kvb_seq_allocate_ex, i64(seq_id, "seq_id"), buf, n, opts, cached)
        return int(cached[0])

    @inline_call
    def commit(self, seq_id: int, num_tokens: int) -> None:
        # The per-sequence decode loop's calls (commit, append) run the guard's protocol written out, as the
        # batch calls do, and check their ints in two steps: the type here (an exact int: never a bool, a
        # float or an int-like object, which cffi would take through __int__), the range by cffi itself,
        # which refuses a value outside int64_t / size_t with an OverflowError before the C function runs;
        # _refuse_overflow turns that into the KvbArgumentError naming the argument. A chained comparison
        # with the C type's bounds per argument cost ~25 ns, a tenth of the wrapper's cost over bare cffi.
        if type(seq_id) is not int:
            seq_id = i64(seq_id, "seq_id")  # a numpy integer, or the refusal
        if type(num_tokens) is not int:
            num_tokens = size(num_tokens, "num_tokens")
        g: GuardedHandle = self._guard  # type: ignore[assignment]
        busy = g._busy
        busy.append(None)
        try:
            h = g._ptr
            if h is None:
                raise KvbClosedError(g.name)
            status = self._seq_commit(h, seq_id, num_tokens)
        except OverflowError:
            _refuse_overflow(seq_id, num_tokens, "num_tokens")
        finally:
            del busy[-1]
            if g._ptr is None:
                g._settle()
        if status:
            check(status)

    def can_append(self, seq_id: int, num_tokens: int = 1) -> bool:
        status = self._call(self._lib.kvb_seq_can_append, i64(seq_id, "seq_id"), size(num_tokens, "num_tokens"))
        if status == self._lib.KVB_ERR_OUT_OF_BLOCKS:
            return False
        check(status)
        return True

    @inline_call
    def append(self, seq_id: int, tokens: TokenLike) -> None:
        # (checks as in commit). A decode step's [token] goes to cffi as a list of that one exact int (cffi
        # converts it into a temporary int64_t[1] for the call: no cdata object to allocate, ~90 ns less than
        # ffi.new); a fresh list of the token read once, so that another thread changing `tokens` meanwhile
        # can neither slip an unchecked element (a bool, a float) past the check nor make the C call read
        # past what cffi converted.
        if type(seq_id) is not int:
            seq_id = i64(seq_id, "seq_id")
        if type(tokens) is list and len(tokens) == 1 and type(token := tokens[0]) is int:
            buf, n = [token], 1
        else:
            buf, n = int64_ptr(tokens)
        g: GuardedHandle = self._guard  # type: ignore[assignment]
        busy = g._busy
        busy.append(None)
        try:
            h = g._ptr
            if h is None:
                raise KvbClosedError(g.name)
            status = self._seq_append(h, seq_id, buf, n)
        except OverflowError:
            _refuse_overflow(seq_id, buf, "tokens")
        finally:
            del busy[-1]
            if g._ptr is None:
                g._settle()
        if status:
            check(status)

    def free(self, seq_id: int) -> None:
        self._run(self._lib.kvb_seq_free, i64(seq_id, "seq_id"))

    @inline_call
    def block_table(self, seq_id: int, group: int = 0) -> np.ndarray:
        """The sequence's block ids in KV cache group `group` (int32; -1 where a sliding window released the
        block or a window group did not need a cached one)."""
        # Called once per sequence per step by an engine that loops over its sequences: the ints are checked
        # as in commit, the guard's protocol written out, cffi's C functions called with the types resolved
        # once (ffi.new / ffi.from_buffer look the type string up on each call), and a table as long as the
        # buffer comes back as the buffer itself, not a slice of it.
        if type(seq_id) is not int:
            seq_id = i64(seq_id, "seq_id")
        if type(group) is not int:
            group = u32(group, "group")
        needed = _newp(_SIZE_PTR, None)
        # First try at the longest table seen so far: a size query (a NULL buffer) fails with
        # BUFFER_TOO_SMALL, and the library's failure path (it formats kvb_last_error) costs ~8x the copy.
        out = np.empty(self._table_hint, np.int32)
        while True:  # another thread may grow the table between a failed try and the next
            capacity = out.shape[0]
            g: GuardedHandle = self._guard  # type: ignore[assignment]
            busy = g._busy
            busy.append(None)
            try:
                h = g._ptr
                if h is None:
                    raise KvbClosedError(g.name)
                status = self._seq_block_table(h, seq_id, group, _backend_from_buffer(_I32_ARRAY, out, False),
                                               capacity, needed)
            except OverflowError:
                _refuse_overflow(seq_id, group, "group")
            finally:
                del busy[-1]
                if g._ptr is None:
                    g._settle()
            n = needed[0]
            if not status:
                return out if n == capacity else out[:n]
            if status != _BUFFER_TOO_SMALL:
                check(status)
            if self._table_hint < n <= _TABLE_HINT_MAX:  # a race between threads costs a retry only
                self._table_hint = n
            out = np.empty(n, np.int32)

    def block_hash(self, block_id: int) -> Optional[int]:
        """The hash block_id got when committed full, or None if it holds no committed full block."""
        h = ffi.new("uint64_t*")
        status = self._call(self._lib.kvb_block_hash, i32(block_id, "block_id"), h)
        if status == self._lib.KVB_ERR_BAD_STATE:
            return None
        check(status)
        return int(h[0])

    def set_extra_key(self, seq_id: int, block_index: int, key: int) -> None:
        self._run(self._lib.kvb_seq_set_extra_key, i64(seq_id, "seq_id"), u32(block_index, "block_index"),
                  u64(key, "key"))

    def info(self, seq_id: int) -> SeqInfo:
        i = ffi.new("kvb_seq_info*")
        self._lib.kvb_seq_info_init(i)
        self._run(self._lib.kvb_seq_get_info, i64(seq_id, "seq_id"), i)
        return SeqInfo(i.location == self._lib.KVB_SEQ_SWAPPED_OUT, i.num_tokens, i.num_computed, i.num_cached,
                       i.num_blocks, i.num_held_blocks, i.window_tokens, i.sink_tokens)

    # -- fork, copy-on-write, rollback, window ---------------------------------------------------
    def fork(self, parent_id: int, child_id: int, num_tokens: Optional[int] = None) -> None:
        """child shares parent's blocks (the first num_tokens tokens' with fork_at semantics)."""
        p, c = i64(parent_id, "parent_id"), i64(child_id, "child_id")
        if num_tokens is None:
            self._run(self._lib.kvb_seq_fork, p, c)
        else:
            self._run(self._lib.kvb_seq_fork_at, p, c, size(num_tokens, "num_tokens"))

    def fork_at(self, parent_id: int, child_id: int, num_tokens: int) -> None:
        self.fork(parent_id, child_id, num_tokens)

    def _pairs_call(self, fn: Any, *args: Any) -> np.ndarray:
        """Calls fn(manager, *args, pairs, capacity, &n), growing the buffer on BUFFER_TOO_SMALL; [n, 2] int32.
        Buffers are per call: a Manager is used from several threads (the C calls lock, Python state would not)."""
        pairs, size = np.empty((16, 2), np.int32), ffi.new("size_t*")
        while True:
            status = self._call(fn, *args, ffi.from_buffer("int32_t[]", pairs), pairs.shape[0], size)
            if status == self._lib.KVB_ERR_BUFFER_TOO_SMALL:
                pairs = np.empty((max(size[0], 2 * pairs.shape[0]), 2), np.int32)
                continue
            check(status)
            return pairs[: size[0]]

    def drain_copies(self) -> np.ndarray:
        """Pending copy-on-write pairs [n, 2] (src, dst): run them with copy_blocks before the next step."""
        return self._pairs_call(self._lib.kvb_drain_copies)

    def rollback(self, seq_id: int, num_tokens: int) -> None:
        self._run(self._lib.kvb_seq_rollback, i64(seq_id, "seq_id"), size(num_tokens, "num_tokens"))

    def set_window(self, seq_id: int, window_tokens: int, sink_tokens: int = 0) -> None:
        self._run(self._lib.kvb_seq_set_window, i64(seq_id, "seq_id"), u32(window_tokens, "window_tokens"),
                  u32(sink_tokens, "sink_tokens"))

    # -- host tier ---------------------------------------------------------------------------------
    def _availability(self, fn: Any, seq_id: int) -> Availability:
        a = ffi.new("kvb_availability*")
        self._run(fn, i64(seq_id, "seq_id"), a)
        return Availability(a[0])

    def can_swap_out(self, seq_id: int) -> Availability:
        return self._availability(self._lib.kvb_seq_can_swap_out, seq_id)

    def can_swap_in(self, seq_id: int) -> Availability:
        return self._availability(self._lib.kvb_seq_can_swap_in, seq_id)

    def swap_out(self, seq_id: int) -> np.ndarray:
        """Moves the sequence to host blocks; returns [n, 2] (device src, host dst) pairs for swap_blocks."""
        return self._pairs_call(self._lib.kvb_seq_swap_out, i64(seq_id, "seq_id"))

    def swap_in(self, seq_id: int) -> np.ndarray:
        """Brings the sequence back; returns [n, 2] (host src, device dst) pairs for swap_blocks."""
        return self._pairs_call(self._lib.kvb_seq_swap_in, i64(seq_id, "seq_id"))

    def drain_host_transfers(self) -> Tuple[np.ndarray, np.ndarray]:
        """Every pending host-cache transfer, oldest first: (offloads, loads), [n, 2] int32 copies each.
        offloads rows are (device src, host dst), loads rows (host src, device dst); run them with
        swap_blocks before anything overwrites their device blocks, in this order: all offloads, then all
        loads, then the copy-on-write copies (drain_copies) and swap-in pairs, then the forward step.
        Until drained, a load holds its host source and device destination. Empty without host_cache."""
        lib = self._lib
        # Buffers are per call, as in _pairs_call: a Manager may be shared by threads.
        offloads, loads = np.empty((16, 2), np.int32), np.empty((16, 2), np.int32)
        n_off, n_load = ffi.new("size_t*"), ffi.new("size_t*")
        while True:
            co, cl = offloads.shape[0], loads.shape[0]
            status = self._call(lib.kvb_drain_host_transfers, ffi.from_buffer("int32_t[]", offloads), co, n_off,
                                                  ffi.from_buffer("int32_t[]", loads), cl, n_load)
            if status == lib.KVB_ERR_BUFFER_TOO_SMALL:  # nothing was drained: grow and ask again
                if n_off[0] > co:
                    offloads = np.empty((max(n_off[0], 2 * co), 2), np.int32)
                if n_load[0] > cl:
                    loads = np.empty((max(n_load[0], 2 * cl), 2), np.int32)
                continue
            check(status)
            return offloads[: n_off[0]], loads[: n_load[0]]

    # -- store tier --------------------------------------------------------------------------------
    _store: Any = None

    def set_store(self, store: Any) -> None:
        """Registers a store (kvblock.store: DirStore, CallbackStore, open_store) as the third prefix-cache
        level below the host cache (needs host_cache=True); None removes it. The Manager keeps the store
        alive while registered. Each step: allocate, then store_poll(), then skip the sequences whose
        store_state(seq)[1] (gets in flight) is not 0 and run the others from store_state(seq)[0]."""
        if store is None:
            self._run(self._lib.kvb_manager_set_store, ffi.NULL, ffi.NULL)
        else:
            if not hasattr(store, "table") or not hasattr(store, "namespace"):
                raise KvbArgumentError(f"store must be a kvblock.store store (DirStore, CallbackStore), got "
                                       f"{type(store).__name__}")
            self._run(self._lib.kvb_manager_set_store, store.table, store.namespace.to_c())
            store._attached(self)
        old, self._store = self._store, store
        if old is not None and old is not store:
            old._detached(self)

    def store_poll(self) -> int:
        """Learns the store's completed gets (failed ones cut their sequences); the number still in flight."""
        n = ffi.new("size_t*")
        self._run(self._lib.kvb_store_poll, n)
        return int(n[0])

    def store_state(self, seq_id: int) -> Tuple[int, int]:
        """(computed tokens, gets in flight) of the sequence: run it from the first once the second is 0."""
        computed, filling = ffi.new("size_t*"), ffi.new("size_t*")
        self._run(self._lib.kvb_seq_store_state, i64(seq_id, "seq_id"), computed, filling)
        return int(computed[0]), int(filling[0])

    # -- pool, stats, events, control ---------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        n = ffi.new("size_t*")
        self._run(self._lib.kvb_num_free_blocks, n)
        return int(n[0])

    def stats(self) -> Dict[str, int]:
        """The counters of kvb_stats."""
        s = ffi.new("kvb_stats*")
        self._lib.kvb_stats_init(s)
        self._run(self._lib.kvb_get_stats, s)
        return {name: int(getattr(s, name)) for name, _ in ffi.typeof("kvb_stats").fields if name != "struct_size"}

    def drain_events(self, max_events: int = 4096) -> tuple:
        """(events in order, number dropped since the last drain). Needs Manager(events=True). Each event
        carries its KV cache group (Event.group; kvb_drain_events_group, which hybrid managers need: the
        plain kvb_drain_events refuses a manager with several groups)."""
        max_events = scalar(max_events, "max_events", 1, U32_MAX, "uint32_t")
        evs = ffi.new("kvb_event[]", max_events)
        groups = ffi.new("uint32_t[]", max_events)
        toks = np.empty(max_events * self.block_size, np.int64)
        n, dropped = ffi.new("size_t*"), ffi.new("uint64_t*")
        self._run(self._lib.kvb_drain_events_group, evs, groups, max_events, ffi.from_buffer("int64_t[]", toks),
                  toks.shape[0], n, dropped)
        out: List[Event] = []
        for i in range(n[0]):
            e = evs[i]
            kind = e.parent_kind
            out.append(Event(_EVENT_TYPES.get(e.type, str(e.type)), int(e.block_hash),
                             int(e.parent_hash) if kind == self._lib.KVB_PARENT_BLOCK else None,
                             int(e.parent_hash) if kind == self._lib.KVB_PARENT_SALT else None,
                             int(e.extra_key) if e.has_extra_key else None,
                             toks[e.token_offset: e.token_offset + e.num_tokens].copy(), int(e.block_id),
                             _MEDIA.get(e.medium, e.medium),  # a medium newer than this package: its number
                             int(groups[i])))
        return out, int(dropped[0])

    def reset_prefix_cache(self) -> None:
        self._run(self._lib.kvb_reset_prefix_cache)

    def check_invariants(self) -> None:
        self._run(self._lib.kvb_check_invariants)
