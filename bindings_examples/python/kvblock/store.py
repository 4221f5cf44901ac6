"""The store tier (abi/kvblock.h, "Store tier"): a third prefix-cache level below the host cache, whose
blocks outlive the process and can be shared by engines on other machines. Manager.set_store(store)
registers one of:

  DirStore(path, host_cache)            the library's directory store (kvb_store_dir_create): one file per
                                        block, atomic writes, for a file system shared between machines
  CallbackStore(backend, host_cache)    a store written in Python: the manager's callbacks (cffi callbacks,
                                        ABI mode) move each block's bytes between the host cache and a
                                        byte-level back end: MemoryBackend (a dict) or
                                        kvblock.store_redis.RedisBackend (Redis, Valkey) or
                                        kvblock.store_mooncake.MooncakeBackend (Mooncake Store)
  open_store("dir:PATH" | "redis://host:port/db" | "mooncake://host:port?..." | "memory:", host_cache)
  Store                                 the protocol (and base class) of a store written from scratch

A store moves the bytes of one host cache for one manager: set_store refuses a store over a cache with
another block count or block size than the manager's host cache (the device cache, say), and one that
another Manager holds. Removing or replacing a store abandons its gets in flight (their sequences
recompute), so a store that never answers can always be detached.

The manager never moves bytes itself: a put reads a block of the host cache (`host_cache`, the KVCache of
the host blocks), a get fills one, and the host <-> device moves stay those of drain_host_transfers. Keys
are the blocks' whole-history keys folded with a namespace (dtype, block size, layers, kv heads, head dim,
fp8 scales and a caller-chosen model_id), so blocks of different models, layouts or calibrations never match.

CallbackStore's gets are asynchronous: get() only queues, and the manager's next store_poll() fetches every
queued block with one batched request (one round trip to Redis) and reports the completions. Each stored
value is a 48-byte header (magic, version, the store key, the payload size, a BLAKE2b-64 checksum of the
payload) and the payload (the block's bytes of every layer, K then V): a value that is missing, short,
under another key or whose checksum fails is a failed get, and the manager recomputes from that block.
"""
from __future__ import annotations

import collections
import hashlib
import struct
import weakref
from typing import Any, Deque, Dict, List, NamedTuple, Optional, Sequence, Tuple

from . import _lib
from ._convert import u64
from ._tensor import _ITEMSIZE, CPU, view
from .errors import KvbArgumentError, check
from .kernels import _KVB_DTYPE, KVCache

ffi = _lib.ffi

__all__ = ["Store", "StoreNamespace", "DirStore", "CallbackStore", "MemoryBackend", "open_store", "check_spec",
           "namespace_of", "RECORD_HEADER"]

_MAGIC = b"KVBRST01"
_VERSION = 1
#: the header of every value a CallbackStore writes: magic, version, reserved, key lo, key hi, payload size,
#: BLAKE2b-64 of the payload (little-endian)
RECORD_HEADER = struct.Struct("<8sIIQQQ8s")


class StoreNamespace(NamedTuple):
    """What makes blocks' bytes compatible (kvb_store_namespace). fp8 dtypes: the scales the bytes were
    quantized with are part of it (k_scale / v_scale for every layer, or layer_scales: for each layer its K
    scales then its V scales, scales_per_layer each: 1 or num_kv_heads); other dtypes ignore them."""
    dtype: str
    block_size: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    model_id: int = 0
    k_scale: float = 1.0
    v_scale: float = 1.0
    layer_scales: Optional[Tuple[float, ...]] = None
    scales_per_layer: int = 1

    def to_c(self) -> Any:
        ns = ffi.new("kvb_store_namespace*")
        _lib.lib.kvb_store_namespace_init(ns)
        ns.dtype = getattr(_lib.lib, _KVB_DTYPE[self.dtype])
        ns.block_size, ns.num_layers = self.block_size, self.num_layers
        ns.num_kv_heads, ns.head_dim = self.num_kv_heads, self.head_dim
        ns.model_id = u64(self.model_id, "model_id")
        ns.k_scale, ns.v_scale = float(self.k_scale), float(self.v_scale)
        if self.layer_scales is not None:
            want = self.num_layers * 2 * self.scales_per_layer
            if len(self.layer_scales) != want:
                raise KvbArgumentError(f"layer_scales: {want} floats (num_layers x 2 x scales_per_layer), got "
                                       f"{len(self.layer_scales)}")
            buf = ffi.new("float[]", [float(x) for x in self.layer_scales])
            _KEEP_ALIVE[ns] = buf  # read by the call the namespace is handed to, then freed with ns
            ns.layer_scales, ns.scales_per_layer = buf, self.scales_per_layer
        return ns


_KEEP_ALIVE: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def key_name(lo: int, hi: int) -> str:
    """A store key's 32 hex digits, hi then lo (the directory store's file names use the same)."""
    return f"{hi:016x}{lo:016x}"


def fold_key(ns: StoreNamespace, index_key_lo: int, index_key_hi: int) -> Tuple[int, int]:
    """The store key (lo, hi) of a block's whole-history index key under ns (kvb_store_key_fold)."""
    out = ffi.new("kvb_store_key*")
    check(_lib.lib.kvb_store_key_fold(ns.to_c(), u64(index_key_lo, "index_key_lo"),
                                      u64(index_key_hi, "index_key_hi"), out))
    return int(out.lo), int(out.hi)


class _HostRegions:
    """The host cache's memory as the store sees it: per layer, K then V, block b's bytes at base +
    b * stride, block_bytes long (a block must be contiguous in each layer: the NHD layout of KVCache)."""

    def __init__(self, host: KVCache) -> None:
        if not isinstance(host, KVCache):
            raise KvbArgumentError(f"host_cache must be the host blocks' kvblock.KVCache, got {type(host).__name__}")
        self.cache = host  # keeps the memory alive as long as the store
        self.num_blocks = host.num_blocks
        self.bases: List[int] = []
        self.stride = 0
        self.block_bytes = 0
        for layer in range(host.num_layers):
            for name, arr in (("k", host.k[layer]), ("v", host.v[layer])):
                v = view(arr, f"host_cache.{name}[{layer}]")
                if v.device[0] != CPU:
                    raise KvbArgumentError(f"host_cache.{name}[{layer}] is on device {v.device}: the store reads "
                                           "and writes host memory")
                item = _ITEMSIZE[v.dtype]
                _, bs, heads, dim = v.shape
                if v.strides[1:] != (heads * dim, dim, 1):
                    raise KvbArgumentError(f"host_cache.{name}[{layer}]: strides {v.strides} (elements): a block's "
                                           "tokens must be contiguous")
                self.bases.append(v.ptr)
                self.stride, self.block_bytes = v.strides[0] * item, bs * heads * dim * item
        self.payload_bytes = self.block_bytes * len(self.bases)

    def _check(self, block: int) -> None:
        if not 0 <= block < self.num_blocks:
            raise IndexError(f"host block {block} is out of range [0, {self.num_blocks})")

    def read(self, block: int) -> bytes:
        self._check(block)
        off = block * self.stride
        return b"".join(ffi.buffer(ffi.cast("char*", base + off), self.block_bytes) for base in self.bases)

    def write(self, block: int, payload: "bytes | memoryview") -> None:
        self._check(block)
        off, n = block * self.stride, self.block_bytes
        for i, base in enumerate(self.bases):
            ffi.buffer(ffi.cast("char*", base + off), n)[:] = payload[i * n:(i + 1) * n]


def _cache_scales(cache: KVCache) -> List[float]:
    """An fp8 cache's scales as the namespace takes them: for each layer, K's per kv head, then V's."""
    out: List[float] = []
    for layer in range(cache.num_layers):
        d = cache.descs[layer]
        for scale, per_head in ((d.k_scale, d.k_head_scales), (d.v_scale, d.v_head_scales)):
            out.extend(float(per_head[h]) if per_head != ffi.NULL else float(scale) for h in range(cache.num_kv_heads))
    return out


def namespace_of(host: KVCache, model_id: int) -> StoreNamespace:
    """The namespace of host's bytes: its layout, its fp8 scales (if fp8) and model_id."""
    ns = StoreNamespace(host.dtype, host.block_size, host.num_layers, host.num_kv_heads, host.head_dim,
                        u64(model_id, "model_id"))
    if not host.fp8:
        return ns
    scales = _cache_scales(host)
    return ns._replace(layer_scales=tuple(scales), scales_per_layer=host.num_kv_heads)


class Store:
    """The store protocol: what Manager.set_store takes, and the base class that supplies its defaults.

    A store has
        table       a kvb_store* (cffi): the callbacks, their user pointer, flags (KVB_STORE_WRITE_THROUGH)
                    and the memory it moves (num_host_blocks, block_bytes: the manager refuses a store over
                    another cache than its host cache); kept alive by the store
        namespace   a StoreNamespace (namespace_of(host_cache, model_id) builds it from the host cache)
        attached(manager)   called by Manager.set_store once the store is registered with manager
        detached(manager)   called once manager no longer has it (set_store(None), another store, or the
                            same store registered again): its gets in flight were abandoned, so a store
                            that fills host blocks later must forget them here
    The defaults below track the managers that hold the store, so that close() is refused while one
    still may call it. A store is registered with one manager at a time (its host_block ids name that
    manager's host blocks); the library refuses a second.

    Most stores need none of this: CallbackStore(backend, host_cache) takes any object with
    exists_prefix / put / get_many / close (see there) and builds the table."""
    table: Any
    namespace: StoreNamespace
    write_through: bool = False

    def __init__(self) -> None:
        self._managers: "weakref.WeakSet[Any]" = weakref.WeakSet()

    def attached(self, mgr: Any) -> None:
        self._managers.add(mgr)

    def detached(self, mgr: Any) -> None:
        self._managers.discard(mgr)

    def _in_use(self) -> bool:
        return any(not m.closed and getattr(m, "_store", None) is self for m in self._managers)

    def _refuse_close_in_use(self) -> None:
        if self._in_use():
            raise KvbArgumentError(f"{type(self).__name__}.close(): a Manager still has this store; close the "
                                   "Manager or call its set_store(None) first")


class DirStore(Store):
    """The library's directory store (kvb_store_dir_create) over the host cache `host_cache`. write_through:
    the manager puts blocks as soon as they reach the host tier (KVB_STORE_WRITE_THROUGH), not only when the
    host tier drops them."""

    def __init__(self, path: str, host_cache: KVCache, *, model_id: int = 0, write_through: bool = False) -> None:
        super().__init__()
        self._regions = _HostRegions(host_cache)
        self.path, self.write_through = str(path), bool(write_through)
        self.namespace = namespace_of(host_cache, model_id)
        lib = _lib.lib
        cfg = ffi.new("kvb_store_dir_config*")
        lib.kvb_store_dir_config_init(cfg)
        path_c = ffi.new("char[]", self.path.encode())
        regions = ffi.new("void*[]", [ffi.cast("void*", b) for b in self._regions.bases])
        cfg.num_host_blocks = self._regions.num_blocks
        cfg.path, cfg.regions, cfg.num_regions = path_c, regions, len(self._regions.bases)
        cfg.region_block_bytes, cfg.region_block_stride = self._regions.block_bytes, self._regions.stride
        out = ffi.new("kvb_store_dir**")
        self.table = ffi.new("kvb_store*")
        lib.kvb_store_init(self.table)
        check(lib.kvb_store_dir_create(cfg, out, self.table))
        self.table.flags = lib.KVB_STORE_WRITE_THROUGH if write_through else 0
        self._dir: Any = out[0]

    def close(self) -> None:
        """Destroys the directory store (its files stay). Refused while a Manager has it."""
        self._refuse_close_in_use()
        if self._dir is not None:
            _lib.lib.kvb_store_dir_destroy(self._dir)
            self._dir = None

    def __del__(self) -> None:
        if getattr(self, "_dir", None) is not None and not self._in_use():
            _lib.lib.kvb_store_dir_destroy(self._dir)
            self._dir = None

    def __repr__(self) -> str:
        return f"<kvblock.DirStore {self.path!r}{' closed' if self._dir is None else ''}>"


class MemoryBackend:
    """A byte-level back end in a dict (tests, and one process's engines)."""

    def __init__(self) -> None:
        self.values: Dict[str, bytes] = {}

    def exists_prefix(self, names: Sequence[str]) -> int:
        n = 0
        while n < len(names) and names[n] in self.values:
            n += 1
        return n

    def put(self, name: str, value: bytes) -> None:
        self.values[name] = value

    def get_many(self, names: Sequence[str]) -> List[Optional[bytes]]:
        return [self.values.get(n) for n in names]

    def close(self) -> None:
        pass


class CallbackStore(Store):
    """A store whose bytes live in `backend`, any object with
        exists_prefix(names) -> int     how many of names, in order, exist (the longest stored prefix)
        put(name, value: bytes)         store a value (raise on failure)
        get_many(names) -> [bytes | None]  the values, None where missing (raise: all of them failed)
    registered through cffi callbacks. A back end that raises never reaches the manager: the callback
    returns a failure (counted in Manager.stats(): store_put_failures, store_get_failures; a failed lookup
    finds nothing), and the exception is kept in .errors (the last 16) with .num_errors counting them all.
    Names are key_prefix + the key's 32 hex digits."""

    def __init__(self, backend: Any, host_cache: KVCache, *, model_id: int = 0, write_through: bool = False,
                 key_prefix: str = "kvb:") -> None:
        super().__init__()
        self.backend, self.key_prefix = backend, key_prefix
        self._regions = _HostRegions(host_cache)
        self.namespace = namespace_of(host_cache, model_id)
        self.write_through = bool(write_through)
        self._queued: List[Tuple[int, int, int, int]] = []  # (ticket, key lo, key hi, host block)
        self._done: Deque[Tuple[int, int]] = collections.deque()  # (ticket, status)
        self.errors: Deque[BaseException] = collections.deque(maxlen=16)
        self.num_errors = 0
        # The callbacks are kept here: cffi frees a callback's trampoline with its Python object.
        self._callbacks = (
            ffi.callback("int(void*, const kvb_store_key*, size_t, size_t*)", self._lookup, error=-1,
                         onerror=self._onerror),
            ffi.callback("int(void*, const kvb_store_key*, int32_t)", self._put, error=-1, onerror=self._onerror),
            ffi.callback("int(void*, const kvb_store_key*, int32_t, uint64_t)", self._get, error=-1,
                         onerror=self._onerror),
            ffi.callback("int(void*, kvb_store_completion*, size_t, size_t*)", self._poll, error=-1,
                         onerror=self._onerror))
        t = self.table = ffi.new("kvb_store*")
        _lib.lib.kvb_store_init(t)
        t.flags = _lib.lib.KVB_STORE_WRITE_THROUGH if write_through else 0
        t.lookup, t.put, t.get, t.poll = self._callbacks
        t.num_host_blocks, t.block_bytes = self._regions.num_blocks, self._regions.payload_bytes

    def name(self, lo: int, hi: int) -> str:
        return self.key_prefix + key_name(lo, hi)

    def detached(self, mgr: Any) -> None:
        """The manager abandoned the gets in flight and reuses their host blocks: never fill them."""
        super().detached(mgr)
        self._queued.clear()
        self._done.clear()

    def _onerror(self, exc_type: Any, exc: BaseException, tb: Any) -> None:
        self.errors.append(exc)
        self.num_errors += 1

    # -- the callbacks (on the thread that called the manager, inside its lock) ------------------------
    def _lookup(self, user: Any, keys: Any, n: int, found: Any) -> int:
        names = [self.name(keys[i].lo, keys[i].hi) for i in range(n)]
        found[0] = max(0, min(n, int(self.backend.exists_prefix(names))))
        return 0

    def _put(self, user: Any, key: Any, host_block: int) -> int:
        payload = self._regions.read(host_block)  # copied now: the manager reuses the block after we return
        checksum = hashlib.blake2b(payload, digest_size=8).digest()
        head = RECORD_HEADER.pack(_MAGIC, _VERSION, 0, key.lo, key.hi, len(payload), checksum)
        self.backend.put(self.name(key.lo, key.hi), head + payload)
        return 0

    def _get(self, user: Any, key: Any, host_block: int, ticket: int) -> int:
        self._queued.append((int(ticket), int(key.lo), int(key.hi), int(host_block)))
        return 0

    def _poll(self, user: Any, done: Any, capacity: int, num_done: Any) -> int:
        if self._queued:
            self._fetch_queued()
        n = 0
        while n < capacity and self._done:
            ticket, status = self._done.popleft()
            done[n].ticket, done[n].status = ticket, status
            n += 1
        num_done[0] = n
        return 0

    # -- gets ------------------------------------------------------------------------------------------
    def _fetch_queued(self) -> None:
        """Every queued get in one batched request; each completes good only if its value checks out."""
        queued, self._queued = self._queued, []
        try:
            values = self.backend.get_many([self.name(lo, hi) for _, lo, hi, _ in queued])
            if len(values) != len(queued):
                raise RuntimeError(f"back end returned {len(values)} values for {len(queued)} keys")
        except Exception as e:  # the back end failed: every get fails, the manager recomputes
            self._onerror(type(e), e, None)
            self._done.extend((t, -1) for t, _, _, _ in queued)
            return
        for (ticket, lo, hi, block), value in zip(queued, values):
            status = -1
            try:
                if value is not None and self._verified(value, lo, hi):
                    self._regions.write(block, memoryview(value)[RECORD_HEADER.size:])
                    status = 0
            except Exception as e:
                self._onerror(type(e), e, None)
            self._done.append((ticket, status))

    def _verified(self, value: bytes, lo: int, hi: int) -> bool:
        if len(value) != RECORD_HEADER.size + self._regions.payload_bytes:
            return False  # short, long, or another layout's
        magic, version, _, klo, khi, size, checksum = RECORD_HEADER.unpack_from(value)
        if magic != _MAGIC or version != _VERSION or (klo, khi) != (lo, hi) or size != self._regions.payload_bytes:
            return False
        return hashlib.blake2b(memoryview(value)[RECORD_HEADER.size:], digest_size=8).digest() == checksum

    def close(self) -> None:
        """Closes the back end. Refused while a Manager has this store."""
        self._refuse_close_in_use()
        self.backend.close()

    def __repr__(self) -> str:
        return f"<kvblock.CallbackStore on {self.backend!r}>"


SPEC_FORMS = "dir:PATH, redis://host:port/db (rediss://, unix:///path.sock), mooncake://host:port?... or memory:"


def check_spec(spec: Any) -> str:
    """spec if it has one of the forms open_store takes (nothing is opened or connected), else
    KvbArgumentError naming it and the forms."""
    if not isinstance(spec, str):
        raise KvbArgumentError(f"store spec must be a string, got {type(spec).__name__}")
    bad = None
    if spec.startswith("dir:"):
        bad = "dir: needs a path" if len(spec) == 4 else None
    elif spec.startswith(("redis://", "rediss://")):
        from urllib.parse import urlsplit
        try:
            u = urlsplit(spec)
            u.port  # noqa: B018 (raises ValueError on a bad port)
            db = u.path.lstrip("/")
            if not u.hostname:
                bad = "no host"
            elif db and not db.isdigit():
                bad = f"the database {db!r} is not a number"
        except ValueError as e:
            bad = str(e)
    elif spec.startswith("unix://"):
        bad = "unix:// needs a socket path" if len(spec) == 7 else None
    elif spec.startswith("mooncake://"):
        bad = "mooncake:// needs a host" if len(spec) == 11 else None
    elif spec != "memory:":
        bad = "unknown form"
    if bad:
        raise KvbArgumentError(f"store spec {spec!r}: {bad}; use {SPEC_FORMS}")
    return spec


def open_store(spec: str, host_cache: KVCache, *, model_id: int = 0, write_through: bool = False) -> Any:
    """A store from its spec: "dir:PATH" (DirStore; the directory and its missing parents are created),
    "redis://host:port/db" (a CallbackStore on Redis; the server must answer now),
    "mooncake://master:port?metadata=..." (on Mooncake Store: kvblock/store_mooncake.py), "memory:" (a
    CallbackStore on a MemoryBackend: one process only). A malformed spec is a KvbArgumentError naming it
    and the forms (check_spec)."""
    check_spec(spec)
    if spec.startswith("dir:"):
        return DirStore(spec[4:], host_cache, model_id=model_id, write_through=write_through)
    if spec.startswith(("redis://", "rediss://", "unix://")):
        from .store_redis import RedisBackend
        return CallbackStore(RedisBackend(spec), host_cache, model_id=model_id, write_through=write_through)
    if spec.startswith("mooncake://"):
        from .store_mooncake import MooncakeBackend
        return CallbackStore(MooncakeBackend(spec), host_cache, model_id=model_id, write_through=write_through)
    return CallbackStore(MemoryBackend(), host_cache, model_id=model_id, write_through=write_through)
