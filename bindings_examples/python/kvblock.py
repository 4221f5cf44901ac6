"""kvblock: a thin Pythonic wrapper over libkvblock through cffi in ABI mode (no compilation).

The library is found through $KVBLOCK_LIB, else the build tree (../../build/lib/libkvblock.so from this
file), else the system loader path. The declarations are the public header itself, run through
`cc -E -P -DKVB_CDEF` ($CC, default cc); without a C compiler the cdef file that `make cdef` writes
($KVBLOCK_CDEF, else kvblock_cdef.h in the build directory holding the library) is used instead.
"""
import enum
import os
import shutil
import subprocess
from pathlib import Path

import cffi

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parent.parent
_HEADER = Path(os.environ.get("KVBLOCK_HEADER", _REPO / "abi" / "kvblock.h"))


def _library_path():
    if os.environ.get("KVBLOCK_LIB"):
        return os.environ["KVBLOCK_LIB"]
    built = _REPO / "build" / "lib" / "libkvblock.so"
    if built.exists():
        return str(built)
    return "libkvblock.so.0"  # the system loader path (ldconfig, LD_LIBRARY_PATH)


def _cdef_source(lib_path):
    """Returns (declarations, where they came from)."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc and _HEADER.exists():
        text = subprocess.run([cc, "-E", "-P", "-DKVB_CDEF", str(_HEADER)], check=True,
                              capture_output=True, text=True).stdout
        return text, f"{Path(cc).name} -E {_HEADER}"
    candidates = [os.environ.get("KVBLOCK_CDEF"), Path(lib_path).parent.parent / "kvblock_cdef.h",
                  _REPO / "build" / "kvblock_cdef.h"]
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c).read_text(), str(c)
    raise ImportError("kvblock: no C compiler to preprocess abi/kvblock.h and no cdef file; "
                      "run `make cdef` or set KVBLOCK_CDEF")


LIBRARY_PATH = _library_path()
ffi = cffi.FFI()
_decls, CDEF_SOURCE = _cdef_source(LIBRARY_PATH)
ffi.cdef(_decls)
try:
    lib = ffi.dlopen(LIBRARY_PATH)
except OSError as e:
    raise ImportError(f"kvblock: cannot load {LIBRARY_PATH} ({e}); run `make` at the repository root, "
                      "set KVBLOCK_LIB, or install libkvblock") from None

# KVB_OK, KVB_ERR_OUT_OF_BLOCKS, ... as Status.OK, Status.OUT_OF_BLOCKS, ... (read from the header).
Status = enum.IntEnum("Status", {name.removeprefix("KVB_").removeprefix("ERR_"): value
                                 for value, name in sorted(ffi.typeof("kvb_status").elements.items())})

#: True when the header declares the kernel API (CPU paged attention and friends).
HAS_KERNELS = "kvb_paged_attention" in _decls


class KvbError(Exception):
    """Every libkvblock failure: .status (Status), .name ("KVB_ERR_..."), .message (kvb_last_error())."""

    def __init__(self, status, message):
        try:
            self.status = Status(status)
        except ValueError:
            self.status = status
        self.name = ffi.string(lib.kvb_status_string(status)).decode()
        self.message = message
        super().__init__(f"{self.name}: {message}")


def _check(status):
    if status != lib.KVB_OK:
        raise KvbError(status, ffi.string(lib.kvb_last_error()).decode(errors="replace"))


def _tokens(tokens):
    """An int64_t[] view of tokens: no copy for a contiguous int64 buffer (numpy, array('q'), ...)."""
    try:
        view = memoryview(tokens)
    except TypeError:
        return ffi.new("int64_t[]", list(tokens))
    if view.ndim == 1 and view.c_contiguous and view.itemsize == 8 and view.format.lstrip("@=<") in ("q", "l"):
        return ffi.from_buffer("int64_t[]", tokens)  # keeps tokens alive, shares its memory
    return ffi.new("int64_t[]", view.tolist())


def version():
    return ffi.string(lib.kvb_version_string()).decode()


def hash_tokens(tokens, parent=None):
    """The public xxh64 block hash (identical to nano-vllm's compute_hash)."""
    buf = _tokens(tokens)
    parent_ptr = ffi.new("uint64_t*", parent) if parent is not None else ffi.NULL
    return lib.kvb_hash_tokens(parent_ptr, buf, len(buf))


class Manager:
    """A KV-cache block manager. Use it as a context manager, or call close()."""

    _m = None

    def __init__(self, num_blocks, block_size=16, *, num_host_blocks=0, watermark=0.0):
        cfg = ffi.new("kvb_config*")
        lib.kvb_config_init(cfg)
        cfg.num_blocks = num_blocks
        cfg.block_size = block_size
        cfg.num_host_blocks = num_host_blocks
        cfg.watermark = watermark
        out = ffi.new("kvb_manager**")
        _check(lib.kvb_manager_create(cfg, out))
        self._m = out[0]
        self.block_size = block_size

    def close(self):
        if self._m is not None:
            lib.kvb_manager_destroy(self._m)
            self._m = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    @property
    def _handle(self):
        if self._m is None:
            raise ValueError("kvblock.Manager is closed")
        return self._m

    # -- sequences ------------------------------------------------------------------------------
    def can_allocate(self, tokens):
        """Cached tokens an allocate would reuse, or None if the pool cannot hold the prompt now."""
        buf = _tokens(tokens)
        cached = ffi.new("size_t*")
        status = lib.kvb_seq_can_allocate(self._handle, buf, len(buf), cached)
        if status == lib.KVB_ERR_OUT_OF_BLOCKS:
            return None
        _check(status)
        return cached[0]

    def allocate(self, seq_id, tokens):
        """Creates sequence seq_id for the prompt; returns the number of prefix-cached tokens."""
        buf = _tokens(tokens)
        cached = ffi.new("size_t*")
        _check(lib.kvb_seq_allocate(self._handle, seq_id, buf, len(buf), cached))
        return cached[0]

    def commit(self, seq_id, num_tokens):
        _check(lib.kvb_seq_commit(self._handle, seq_id, num_tokens))

    def can_append(self, seq_id, num_tokens=1):
        status = lib.kvb_seq_can_append(self._handle, seq_id, num_tokens)
        if status == lib.KVB_ERR_OUT_OF_BLOCKS:
            return False
        _check(status)
        return True

    def append(self, seq_id, tokens):
        buf = _tokens(tokens)
        _check(lib.kvb_seq_append(self._handle, seq_id, buf, len(buf)))

    def free(self, seq_id):
        _check(lib.kvb_seq_free(self._handle, seq_id))

    def block_table(self, seq_id):
        n = ffi.new("size_t*")
        status = lib.kvb_seq_block_table(self._handle, seq_id, ffi.NULL, 0, n)
        if status != lib.KVB_ERR_BUFFER_TOO_SMALL:
            _check(status)
        out = ffi.new("int32_t[]", n[0])
        _check(lib.kvb_seq_block_table(self._handle, seq_id, out, n[0], n))
        return list(out[0:n[0]])

    # -- pool -----------------------------------------------------------------------------------
    @property
    def num_free_blocks(self):
        n = ffi.new("size_t*")
        _check(lib.kvb_num_free_blocks(self._handle, n))
        return n[0]

    def stats(self):
        """The counters of kvb_stats as a dict."""
        s = ffi.new("kvb_stats*")
        lib.kvb_stats_init(s)
        _check(lib.kvb_get_stats(self._handle, s))
        return {name: getattr(s, name) for name, _ in ffi.typeof("kvb_stats").fields if name != "struct_size"}

    def check_invariants(self):
        _check(lib.kvb_check_invariants(self._handle))


# -- CPU kernels on numpy buffers (only when the header declares them) ----------------------------
_DTYPES = {"float16": "KVB_DTYPE_FP16", "float32": "KVB_DTYPE_FP32"}


def _ptr(array, what, dtype, ctype="char[]"):
    """A pointer into a C-contiguous numpy array of the given dtype (no copy)."""
    if array.dtype != dtype:
        raise TypeError(f"{what} must be {dtype}, got {array.dtype}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous")
    return ffi.from_buffer(ctype, array)


def _cache_desc(k_cache, v_cache):
    """kvb_cache_desc for dense NHD numpy caches [num_blocks, block_size, num_kv_heads, head_dim]."""
    if k_cache.shape != v_cache.shape or k_cache.dtype != v_cache.dtype or k_cache.ndim != 4:
        raise ValueError("k_cache and v_cache must be equal-shaped 4-D arrays")
    if k_cache.dtype.name not in _DTYPES:
        raise TypeError(f"unsupported cache dtype {k_cache.dtype}")
    d = ffi.new("kvb_cache_desc*")
    lib.kvb_cache_desc_init(d)
    d.device_type = lib.KVB_DEVICE_CPU
    d.dtype = getattr(lib, _DTYPES[k_cache.dtype.name])
    d.k, d.v = _ptr(k_cache, "k_cache", k_cache.dtype), _ptr(v_cache, "v_cache", k_cache.dtype)
    d.num_blocks, d.block_size, d.num_kv_heads, d.head_dim = k_cache.shape
    return d


def write_kv(k_cache, v_cache, key, value, slot_mapping):
    """reshape_and_cache on CPU: key/value [num_tokens, num_kv_heads, head_dim] into their slots."""
    desc = _cache_desc(k_cache, v_cache)
    args = ffi.new("kvb_write_kv_args*")
    lib.kvb_write_kv_args_init(args)
    args.num_tokens = key.shape[0]
    args.key, args.value = _ptr(key, "key", k_cache.dtype), _ptr(value, "value", k_cache.dtype)
    args.slot_mapping = _ptr(slot_mapping, "slot_mapping", "int64", "int64_t[]")
    _check(lib.kvb_write_kv(desc, args, ffi.NULL))


def paged_attention(k_cache, v_cache, q, block_tables, seq_lens, out, scale=0.0):
    """Paged decode attention on CPU: q, out [num_seqs, num_q_heads, head_dim]."""
    desc = _cache_desc(k_cache, v_cache)
    args = ffi.new("kvb_attention_args*")
    lib.kvb_attention_args_init(args)
    args.num_seqs, args.num_q_heads = q.shape[0], q.shape[1]
    args.max_blocks_per_seq = block_tables.shape[1]
    args.q, args.out = _ptr(q, "q", k_cache.dtype), _ptr(out, "out", k_cache.dtype)
    args.block_tables = _ptr(block_tables, "block_tables", "int32", "int32_t[]")
    args.seq_lens = _ptr(seq_lens, "seq_lens", "int32", "int32_t[]")
    args.scale = scale
    size = ffi.new("size_t*")
    _check(lib.kvb_paged_attention_workspace_size(desc, args, size))
    workspace = ffi.new("char[]", size[0]) if size[0] else ffi.NULL
    args.workspace, args.workspace_size = workspace, size[0]
    _check(lib.kvb_paged_attention(desc, args, ffi.NULL))
