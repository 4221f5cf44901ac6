"""Kernels on caller memory (numpy arrays, torch tensors on CPU or CUDA), no copies: a KVCache holding every
layer's K/V and its kvb_cache_desc descriptors, and write_kv, paged_attention (decode), prefill_attention
(with an optional token-tree mask), copy_blocks, copy_slots and swap_blocks. Every argument is checked (dtype,
shape, strides, device) before the C call.
CUDA kernels check their device-side inputs (seq_lens, block tables, slot mapping, query_start) on the device,
after the launching call returned: take_fault() reports what they found."""
from __future__ import annotations

import threading
from typing import Any, List, Optional, Sequence

import numpy as np

from . import _lib
from ._convert import as_index, i64, real, u32, u64
from ._nocopy import OwnsHandle
from ._tensor import CPU, CUDA, View, device_name, require, view
from .errors import KernelFault, KvbArgumentError, KvbError, check

ffi = _lib.ffi
_KVB_DTYPE = {"float16": "KVB_DTYPE_FP16", "bfloat16": "KVB_DTYPE_BF16", "float32": "KVB_DTYPE_FP32",
              "float8_e4m3": "KVB_DTYPE_FP8_E4M3", "float8_e5m2": "KVB_DTYPE_FP8_E5M2"}
# FP8 caches: torch's element types, and the dtypes their q / out / new K and V may have.
_FP8_TORCH = {"float8_e4m3": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}
_FP8_OF_STORAGE = {"float8_e4m3fn": "float8_e4m3", "float8_e5m2": "float8_e5m2"}
_FP8_INPUTS = ("float16", "bfloat16", "float32")


def has_prefill_kernel() -> bool:
    """Whether the loaded library has kvb_prefill_attention (a system libkvblock may be older)."""
    try:
        return "kvb_prefill_attention" in _lib.DECLARATIONS and bool(_lib.lib.kvb_prefill_attention)
    except AttributeError:
        return False


def cuda_device_count() -> int:
    """Usable CUDA devices for libkvblock's kernels (0 without a driver, a device, or a CUDA build)."""
    n = ffi.new("int32_t*")
    status = _lib.lib.kvb_cuda_device_count(n)
    if status == _lib.lib.KVB_ERR_UNSUPPORTED:
        return 0
    check(status)
    return int(n[0])


def take_fault(device: Any = 0, stream: Any = None) -> None:
    """Waits for the work queued on `stream` (None: the default stream) of CUDA device `device` (an index,
    or a KVCache on that device), then reads and clears the device's fault record (kvb_cuda_take_fault).
    Returns None when no kernel met bad input; raises KernelFault with the first fault's details otherwise
    (the record is consumed: the next call returns None unless new faults happened). It synchronises the
    stream: call it outside CUDA-graph capture, e.g. once per engine step or in debug runs.
    KvbError with status UNSUPPORTED from a library built without CUDA, DEVICE without a usable device."""
    if isinstance(device, KVCache):
        if device.device[0] != CUDA:
            raise KvbArgumentError(f"device: the cache is on {device_name(device.device)}; faults are recorded "
                                   "by CUDA kernels only")
        index = device.device[1]
    elif type(device) is int or (isinstance(device, np.integer) and not isinstance(device, np.bool_)):
        index = int(device)
        if not 0 <= index < 2**31:
            raise KvbArgumentError(f"device: index {index} is out of range [0, 2^31)")
    else:
        raise KvbArgumentError(f"device must be a CUDA device index or a KVCache, got {type(device).__name__}")
    lib = _lib.lib
    fault = ffi.new("kvb_kernel_fault*")
    lib.kvb_kernel_fault_init(fault)
    status = lib.kvb_cuda_take_fault(index, _stream(stream), fault)
    if status == lib.KVB_ERR_INVALID_ARGUMENT and fault.kind != lib.KVB_FAULT_NONE:
        raise KernelFault(fault, ffi.string(lib.kvb_last_error()).decode(errors="replace"))
    check(status)
    return None


def _stream(stream: Any) -> Any:
    if stream is None:
        return ffi.NULL
    if isinstance(stream, (int, np.integer)):  # ffi.cast would wrap a handle beyond 64 bits silently
        return ffi.cast("void*", u64(stream, "stream"))
    handle = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream
    if handle is None:
        handle = getattr(stream, "ptr", None)  # cupy Stream
    if handle is None:
        raise KvbArgumentError("stream must be None, an int handle or a CUDA stream object, got "
                               f"{type(stream).__name__}")
    return ffi.cast("void*", int(handle))


def _device(device: Any) -> str:
    """"cpu", "cuda" or "cuda:N", refused otherwise before anything is imported or allocated."""
    if isinstance(device, str):
        if device == "cpu" or device == "cuda":
            return device
        head, _, index = device.partition(":")
        if head == "cuda" and index.isdigit() and index.isascii():
            return device
    raise KvbArgumentError(f"device must be 'cpu', 'cuda' or 'cuda:N' (libkvblock's kernels run on CPUs and "
                           f"CUDA GPUs), got {device!r}")


def _alloc(shape: tuple, dtype: str, device: str) -> Any:
    if dtype not in _KVB_DTYPE:
        raise KvbArgumentError(f"dtype must be one of {', '.join(_KVB_DTYPE)}, got {dtype!r}")
    if device == "cpu":
        if dtype == "bfloat16":
            raise KvbArgumentError("dtype bfloat16 on the CPU needs torch tensors (numpy has no bfloat16)")
        return np.zeros(shape, np.uint8 if dtype in _FP8_TORCH else dtype)  # fp8: the bytes, dtype named
    import torch  # CUDA caches: torch is the allocator
    return torch.zeros(shape, dtype=getattr(torch, _FP8_TORCH.get(dtype, dtype)), device=device)


class KVCache(OwnsHandle):
    """K and V caches of every layer, [num_blocks, block_size, num_kv_heads, head_dim] each (NHD), with their
    descriptors built once. Either allocated here (numpy on "cpu", torch on "cuda[:i]") or wrapping the
    caller's arrays / tensors (KVCache.wrap), which must stay alive as long as the cache. Not copyable:
    its descriptors hold raw pointers to those arrays (a deep copy would write into the original's).

    FP8 caches (dtype "float8_e4m3" or "float8_e5m2"): torch float8_e4m3fn / float8_e5m2 tensors, or numpy
    uint8 arrays holding the bytes (the dtype then named). Stored = x / scale rounded to nearest even and
    saturated (abi/kvblock.h states the rule); k_scale / v_scale per layer (a float, or one per layer), and
    optionally per-kv-head scales (num_kv_heads floats, or [num_layers, num_kv_heads]) replacing them. q,
    out and the new K/V of an fp8 cache are float16, bfloat16 or float32 (float32 attention: CPU only)."""
    _what_is_owned = "kvb_cache_desc descriptors holding raw pointers to its K/V memory"

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 dtype: str = "float32", device: str = "cpu", *, k_scale: Any = 1.0, v_scale: Any = 1.0,
                 k_head_scales: Any = None, v_head_scales: Any = None) -> None:
        shape = tuple(u32(v, name) for v, name in ((num_blocks, "num_blocks"), (block_size, "block_size"),
                                                   (num_kv_heads, "num_kv_heads"), (head_dim, "head_dim")))
        num_layers = u32(num_layers, "num_layers")
        if not isinstance(dtype, str) or dtype not in _KVB_DTYPE:
            raise KvbArgumentError(f"dtype must be one of {sorted(_KVB_DTYPE)}, got {dtype!r}")
        device = _device(device)
        ks = [_alloc(shape, dtype, device) for _ in range(num_layers)]
        vs = [_alloc(shape, dtype, device) for _ in range(num_layers)]
        self._init(ks, vs, dtype if dtype in _FP8_TORCH else None, (k_scale, v_scale, k_head_scales, v_head_scales))

    @classmethod
    def wrap(cls, k_layers: Sequence[Any], v_layers: Sequence[Any], dtype: Optional[str] = None, *,
             k_scale: Any = 1.0, v_scale: Any = 1.0, k_head_scales: Any = None,
             v_head_scales: Any = None) -> "KVCache":
        """A cache over existing per-layer K and V arrays (any strides with a contiguous head_dim). dtype names
        the fp8 format of uint8 arrays ("float8_e4m3" / "float8_e5m2"); otherwise it comes from the arrays."""
        self = cls.__new__(cls)
        self._init(list(k_layers), list(v_layers), dtype, (k_scale, v_scale, k_head_scales, v_head_scales))
        return self

    def _fp8_scales(self, scales: tuple) -> None:
        """Per-layer scales into the descriptors; per-head arrays kept alive here (the library reads them
        during each call that is handed the descriptor, never keeps them)."""
        self._head_scales = []
        n, h = self.num_layers, self.num_kv_heads
        per_layer = []
        for name, x in zip(("k_scale", "v_scale"), scales[:2]):
            arr = np.asarray(x, np.float64)
            if arr.ndim == 0:
                arr = np.broadcast_to(arr, (n,))
            if arr.shape != (n,):
                raise KvbArgumentError(f"{name}: a float or one per layer ({n}), got shape {np.shape(x)}")
            per_layer.append(arr)
        heads: List[Optional[np.ndarray]] = []
        for name, x in zip(("k_head_scales", "v_head_scales"), scales[2:]):
            if x is None:
                heads.append(None)
                continue
            a = np.asarray(x, np.float32)
            if a.shape == (h,):
                a = np.broadcast_to(a, (n, h))
            if a.shape != (n, h):
                raise KvbArgumentError(f"{name}: {h} floats or [{n}, {h}], got shape {a.shape}")
            heads.append(a)
        for layer in range(n):
            d = self.descs + layer
            d.k_scale, d.v_scale = float(per_layer[0][layer]), float(per_layer[1][layer])
            for which, per_head in zip(("k_head_scales", "v_head_scales"), heads):
                if per_head is not None:
                    buf = ffi.new("float[]", [float(x) for x in per_head[layer]])
                    self._head_scales.append(buf)
                    setattr(d, which, buf)

    def _init(self, ks: List[Any], vs: List[Any], fp8: Optional[str] = None,
              scales: tuple = (1.0, 1.0, None, None)) -> None:
        if not ks or len(ks) != len(vs):
            raise KvbArgumentError("k_layers and v_layers must be non-empty and equally long, got "
                                   f"{len(ks)} and {len(vs)}")
        self.k, self.v = ks, vs
        self.num_layers = len(ks)
        first = view(ks[0], "k_layers[0]")
        require(first, "k_layers[0]", ndim=4, inner_contiguous=True, writable=True)
        if fp8 is not None and (not isinstance(fp8, str) or fp8 not in _FP8_TORCH):
            raise KvbArgumentError(f"dtype: {fp8!r} is not float8_e4m3 or float8_e5m2")
        if first.dtype in _FP8_OF_STORAGE:
            if fp8 not in (None, _FP8_OF_STORAGE[first.dtype]):
                raise KvbArgumentError(f"dtype {fp8} differs from the tensors' {first.dtype}")
            fp8 = _FP8_OF_STORAGE[first.dtype]
        elif fp8 is not None and first.dtype != "uint8":
            raise KvbArgumentError(f"k_layers[0]: an {fp8} cache needs uint8 arrays or torch float8 tensors, "
                                   f"got {first.dtype}")
        elif fp8 is None and first.dtype not in _KVB_DTYPE:
            raise KvbArgumentError(f"k_layers[0]: dtype must be float16, bfloat16 or float32 (or uint8 with an fp8 "
                                   f"dtype named), got {first.dtype}")
        for name, n in zip(("num_blocks", "block_size", "num_kv_heads", "head_dim"), first.shape):
            u32(n, f"k_layers[0]: dimension {name}")  # the descriptor holds each as uint32_t
        self.num_blocks, self.block_size, self.num_kv_heads, self.head_dim = first.shape
        self.dtype, self.device = (fp8 or first.dtype), first.device
        self.storage_dtype = first.dtype  # the arrays' element type (uint8 / torch float8 for fp8 caches)
        self.fp8 = fp8 is not None
        self.descs = ffi.new("kvb_cache_desc[]", self.num_layers)
        lib = _lib.lib
        for layer in range(self.num_layers):
            kv = [view(ks[layer], f"k_layers[{layer}]"), view(vs[layer], f"v_layers[{layer}]")]
            for name, v in zip(("k_layers", "v_layers"), kv):
                require(v, f"{name}[{layer}]", dtype=self.storage_dtype, shape=first.shape, device=first.device,
                        inner_contiguous=True, writable=True)
                if v.strides != kv[0].strides:
                    raise KvbArgumentError(f"{name}[{layer}]: strides {v.strides} differ from K's {kv[0].strides}")
            d = self.descs + layer
            lib.kvb_cache_desc_init(d)
            d.device_type = lib.KVB_DEVICE_CUDA if first.device[0] == CUDA else lib.KVB_DEVICE_CPU
            d.device_index = first.device[1]
            d.dtype = getattr(lib, _KVB_DTYPE[self.dtype])
            d.k, d.v = ffi.cast("void*", kv[0].ptr), ffi.cast("void*", kv[1].ptr)
            d.num_blocks, d.block_size, d.num_kv_heads, d.head_dim = first.shape
            d.block_stride, d.token_stride, d.head_stride = (i64(st, f"k_layers[{layer}]: stride")
                                                             for st in kv[0].strides[:3])
        if self.fp8:
            self._fp8_scales(scales)
        elif scales != (1.0, 1.0, None, None):
            raise KvbArgumentError(f"k_scale / v_scale / head scales are for fp8 caches, not {self.dtype}")
        self._scales = scales
        self._workspaces = threading.local()

    def alias(self) -> "KVCache":
        """Another KVCache over the same K/V arrays, dtype and scales, with workspaces of its own (a CUDA
        graph's fixed one, apart from the eager calls' that may grow)."""
        return KVCache.wrap(self.k, self.v, self.dtype if self.fp8 else None, k_scale=self._scales[0],
                            v_scale=self._scales[1], k_head_scales=self._scales[2], v_head_scales=self._scales[3])

    def desc(self, layer: int) -> Any:
        if type(layer) is not int:  # numpy integers converted; a bool (an int subclass) is no layer index
            layer = as_index(layer, "layer")
        if not 0 <= layer < self.num_layers:
            raise KvbArgumentError(f"layer {layer} is out of range [0, {self.num_layers})")
        return self.descs + layer

    def workspace(self, nbytes: int) -> Any:
        """A kernel workspace of at least nbytes on the cache's device (void*), reused by the calling thread's
        later calls. Each thread has its own: kernels run with the GIL released, and two calls sharing one
        workspace would mix their partial results (or one would grow it, freeing memory the other uses)."""
        if not nbytes:
            return ffi.NULL
        ws = self._workspaces
        if nbytes > getattr(ws, "nbytes", 0):
            size = max(nbytes, 2 * getattr(ws, "nbytes", 0))
            if self.device[0] == CPU:
                buf = np.zeros(size + 16, np.uint8)
                ptr = buf.__array_interface__["data"][0]
            else:
                import torch
                if getattr(ws, "buf", None) is not None:
                    _retire_cuda_workspace(ws, torch)
                buf = torch.empty(size + 16, dtype=torch.uint8, device=device_name(self.device))
                ptr = buf.data_ptr()
            ws.buf, ws.ptr, ws.nbytes = buf, ffi.cast("void*", (ptr + 15) & ~15), size
        return ws.ptr

def _retire_cuda_workspace(ws: Any, torch: Any) -> None:
    """The outgrown workspace may still be read by kernels queued on a stream the caller passed (torch's
    allocator only knows the stream it was allocated on), so it must not go back to the allocator before
    they finish: wait for the device; while a CUDA graph is being captured (no waiting allowed), keep it
    alive with the cache instead (growth doubles, so the kept ones stay under the live one's size)."""
    if torch.cuda.is_current_stream_capturing():
        ws.retired = getattr(ws, "retired", []) + [ws.buf]
    else:
        torch.cuda.synchronize(ws.buf.device)
        ws.retired = []
    ws.buf = None


def _int_array(x: Any, what: str, dtype: str, ndim: int, cache: KVCache, shape: Optional[tuple] = None) -> View:
    v = view(x, what)
    require(v, what, dtype=dtype, ndim=ndim, shape=shape, device=cache.device, contiguous=True)
    return v


def _rows(x: Any, what: str, cache: KVCache, heads: int, *, writable: bool = False,
          dtype: Optional[str] = None) -> View:
    """[rows, heads, head_dim] in the cache's dtype, or for an fp8 cache in `dtype` (checked to be one of
    float16, bfloat16, float32; None: whichever of those x has)."""
    v = view(x, what)
    if cache.fp8:
        dtype = dtype or v.dtype
        if dtype not in _FP8_INPUTS:
            raise KvbArgumentError(f"{what}: dtype must be float16, bfloat16 or float32 for an {cache.dtype} cache, "
                                   f"got {v.dtype}")
    require(v, what, dtype=dtype or cache.dtype, ndim=3, shape=(None, heads, cache.head_dim), device=cache.device,
            inner_contiguous=True, writable=writable)
    return v


def write_kv(cache: KVCache, layer: int, key: Any, value: Any, slot_mapping: Any, stream: Any = None) -> None:
    """reshape_and_cache: key/value [num_tokens, num_kv_heads, head_dim] into slots slot_mapping[i] (-1 skips)."""
    k = _rows(key, "key", cache, cache.num_kv_heads)
    v = _rows(value, "value", cache, cache.num_kv_heads, dtype=k.dtype if cache.fp8 else None)
    n = k.shape[0]
    if v.shape[0] != n:
        raise KvbArgumentError(f"value: {v.shape[0]} tokens, key has {n}")
    s = _int_array(slot_mapping, "slot_mapping", "int64", 1, cache, (n,))
    a = ffi.new("kvb_write_kv_args*")
    _lib.lib.kvb_write_kv_args_init(a)
    if cache.fp8:
        a.input_dtype = getattr(_lib.lib, _KVB_DTYPE[k.dtype])
    a.num_tokens = n
    a.key, a.value = ffi.cast("void*", k.ptr), ffi.cast("void*", v.ptr)
    a.key_token_stride, a.key_head_stride = k.strides[0], k.strides[1]
    a.value_token_stride, a.value_head_stride = v.strides[0], v.strides[1]
    a.slot_mapping = ffi.cast("int64_t*", s.ptr)
    check(_lib.lib.kvb_write_kv(cache.desc(layer), a, _stream(stream)))


def _attention_common(cache: KVCache, q: Any, out: Any, block_tables: Any, seq_lens: Any,
                      num_seqs: int) -> tuple[View, View, View, View, int]:
    qv = view(q, "q")
    if cache.fp8 and qv.dtype not in _FP8_INPUTS:
        raise KvbArgumentError(f"q: dtype must be float16, bfloat16 or float32 for an {cache.dtype} cache, "
                               f"got {qv.dtype}")
    require(qv, "q", dtype=qv.dtype if cache.fp8 else cache.dtype, ndim=3, shape=(None, None, cache.head_dim),
            device=cache.device, inner_contiguous=True)
    heads = qv.shape[1]
    if heads % cache.num_kv_heads:
        raise KvbArgumentError(f"q: {heads} query heads is not a multiple of {cache.num_kv_heads} kv heads")
    ov = _rows(out, "out", cache, heads, writable=True, dtype=qv.dtype if cache.fp8 else None)
    if ov.shape[0] != qv.shape[0]:
        raise KvbArgumentError(f"out: {ov.shape[0]} rows, q has {qv.shape[0]}")
    bt = _int_array(block_tables, "block_tables", "int32", 2, cache, (num_seqs, None))
    sl = _int_array(seq_lens, "seq_lens", "int32", 1, cache, (num_seqs,))
    return qv, ov, bt, sl, heads


def paged_attention(cache: KVCache, layer: int, q: Any, block_tables: Any, seq_lens: Any, out: Any, *,
                    scale: float = 0.0, soft_cap: float = 0.0, window: int = 0, sink: int = 0,
                    stream: Any = None, prefix_groups: Any = None) -> Any:
    """Decode attention: q, out [num_seqs, num_q_heads, head_dim]; block_tables [num_seqs, max_blocks] int32;
    seq_lens [num_seqs] int32. prefix_groups: a kvblock.PrefixGroups of the same batch (batch_export(...,
    prefix_groups=True)) to read shared blocks once per group. Returns out."""
    qv0 = view(q, "q")
    num_seqs = qv0.shape[0] if qv0.shape else 0
    qv, ov, bt, sl, heads = _attention_common(cache, q, out, block_tables, seq_lens, num_seqs)
    lib = _lib.lib
    a = ffi.new("kvb_attention_args*")
    lib.kvb_attention_args_init(a)
    if cache.fp8:
        a.q_dtype = getattr(lib, _KVB_DTYPE[qv.dtype])
    a.num_seqs, a.num_q_heads, a.max_blocks_per_seq = num_seqs, heads, bt.shape[1]
    a.q, a.q_seq_stride, a.q_head_stride = ffi.cast("void*", qv.ptr), qv.strides[0], qv.strides[1]
    a.out, a.out_seq_stride, a.out_head_stride = ffi.cast("void*", ov.ptr), ov.strides[0], ov.strides[1]
    a.block_tables, a.seq_lens = ffi.cast("int32_t*", bt.ptr), ffi.cast("int32_t*", sl.ptr)
    a.scale, a.logits_soft_cap = real(scale, "scale"), real(soft_cap, "soft_cap")
    a.window_tokens, a.sink_tokens = u32(window, "window"), u32(sink, "sink")
    if prefix_groups is not None:  # before the workspace query: a CUDA cache's shared-prefix path needs more
        a.prefix_groups = _prefix_groups_arg(prefix_groups)
    size = ffi.new("size_t*")
    d = cache.desc(layer)
    check(lib.kvb_paged_attention_workspace_size(d, a, size))
    a.workspace, a.workspace_size = cache.workspace(size[0]), size[0]
    check(lib.kvb_paged_attention(d, a, _stream(stream)))
    return out


def prefill_attention(cache: KVCache, layer: int, q: Any, query_start: Any, seq_lens: Any, block_tables: Any,
                      out: Any, *, scale: float = 0.0, soft_cap: float = 0.0, window: int = 0, sink: int = 0,
                      allow_tf32: bool = False, stream: Any = None, prefix_groups: Any = None,
                      tree_mask: Any = None) -> Any:
    """Prefill / extend attention over a ragged batch (query_start as batch_export writes it; seq_lens include
    the new tokens, whose K/V are already written). q, out [total_q_tokens, num_q_heads, head_dim].
    allow_tf32: an fp32 cache on CUDA may use TF32 tensor cores (inputs rounded to a 10-bit mantissa, fp32
    accumulation: ~1e-3 relative error, several times faster); default False: exact fp32.
    tree_mask: [total_q_tokens] uint64 (int64 accepted) on the cache's device, or None: for a sequence of at
    most 64 new tokens, row j sees the committed prefix, itself, and new token b < j iff bit b of its word
    is set (kvb_prefill_args.tree_mask); longer sequences stay causal."""
    qs = _int_array(query_start, "query_start", "int32", 1, cache)
    num_seqs = qs.shape[0] - 1
    if num_seqs < 0:
        raise KvbArgumentError("query_start: needs num_seqs + 1 entries, got 0")
    qv, ov, bt, sl, heads = _attention_common(cache, q, out, block_tables, seq_lens, num_seqs)
    lib = _lib.lib
    if not has_prefill_kernel():
        raise KvbError(lib.KVB_ERR_UNSUPPORTED, f"{_lib.LIBRARY_PATH} predates kvb_prefill_attention")
    a = ffi.new("kvb_prefill_args*")
    lib.kvb_prefill_args_init(a)
    if cache.fp8:
        a.q_dtype = getattr(lib, _KVB_DTYPE[qv.dtype])
    a.num_seqs, a.num_q_heads, a.max_blocks_per_seq, a.total_q_tokens = num_seqs, heads, bt.shape[1], qv.shape[0]
    a.q, a.q_token_stride, a.q_head_stride = ffi.cast("void*", qv.ptr), qv.strides[0], qv.strides[1]
    a.out, a.out_token_stride, a.out_head_stride = ffi.cast("void*", ov.ptr), ov.strides[0], ov.strides[1]
    a.query_start, a.seq_lens = ffi.cast("int32_t*", qs.ptr), ffi.cast("int32_t*", sl.ptr)
    a.block_tables = ffi.cast("int32_t*", bt.ptr)
    a.scale, a.logits_soft_cap = real(scale, "scale"), real(soft_cap, "soft_cap")
    a.window_tokens, a.sink_tokens = u32(window, "window"), u32(sink, "sink")
    a.allow_tf32 = 1 if allow_tf32 else 0
    if tree_mask is not None:
        tv = view(tree_mask, "tree_mask")
        require(tv, "tree_mask", dtype=tv.dtype if tv.dtype in ("uint64", "int64") else "uint64", ndim=1,
                shape=(qv.shape[0],), device=cache.device, contiguous=True)
        a.tree_mask = ffi.cast("uint64_t*", tv.ptr)
    size = ffi.new("size_t*")
    d = cache.desc(layer)
    check(lib.kvb_prefill_attention_workspace_size(d, a, size))
    a.workspace, a.workspace_size = cache.workspace(size[0]), size[0]
    if prefix_groups is not None:
        a.prefix_groups = _prefix_groups_arg(prefix_groups)
    check(lib.kvb_prefill_attention(d, a, _stream(stream)))
    return out


def _prefix_groups_arg(pg: Any) -> Any:
    """The kvb_prefix_groups* of a kvblock.PrefixGroups (or of a batch that carries one)."""
    pg = getattr(pg, "prefix_groups", pg)
    c = getattr(pg, "c", None)
    if c is None or ffi.typeof(c) is not ffi.typeof("kvb_prefix_groups*"):
        raise KvbArgumentError(f"prefix_groups must be a kvblock.PrefixGroups (batch_export(..., prefix_groups=True)), "
                               f"got {type(pg).__name__}")
    return c


def _pairs(pairs: Any) -> tuple:
    p = pairs
    if not isinstance(p, np.ndarray):  # a list of [src, dst]: integers only (never floats, never truncated)
        p = np.asarray(p)
        if p.dtype.kind not in "iu" and p.size:
            raise KvbArgumentError(f"pairs must hold integers, got {p.dtype}")
        lo, hi = (int(p.min()), int(p.max())) if p.size else (0, 0)
        if lo < -2**31 or hi >= 2**31:
            raise KvbArgumentError(f"pairs: block id {hi if hi >= 2**31 else lo} does not fit int32")
        p = p.astype(np.int32).reshape(p.shape if p.size else (0, 2))
    if p.dtype != np.int32 or p.ndim != 2 or p.shape[1:] != (2,):
        raise KvbArgumentError(f"pairs must be an [n, 2] int32 array (src, dst), got {p.dtype} {p.shape}")
    p = np.ascontiguousarray(p)
    return ffi.from_buffer("int32_t[]", p), p.shape[0]


def copy_blocks(cache: KVCache, pairs: Any, stream: Any = None) -> None:
    """Copies block src -> dst for every (src, dst) row of pairs in every layer (Manager.drain_copies)."""
    buf, n = _pairs(pairs)
    if n:
        check(_lib.lib.kvb_copy_blocks(cache.descs, cache.num_layers, buf, n, _stream(stream)))


def copy_slots(cache: KVCache, pairs: Any, stream: Any = None) -> None:
    """Copies the K and V rows (every kv head) of token slot src to slot dst for every (src, dst) row of pairs
    ([n, 2] int64, host) in every layer: token-tree compaction. Every pair reads its source as it was before
    the call, so a slot may be one pair's destination and another's source (kvb_copy_slots)."""
    p = pairs
    if not isinstance(p, np.ndarray):
        p = np.asarray(p)
        if p.dtype.kind not in "iu" and p.size:
            raise KvbArgumentError(f"pairs must hold integers, got {p.dtype}")
        p = p.astype(np.int64).reshape(p.shape if p.size else (0, 2))
    if p.dtype != np.int64 or p.ndim != 2 or p.shape[1:] != (2,):
        raise KvbArgumentError(f"pairs must be an [n, 2] int64 array (src slot, dst slot), got {p.dtype} {p.shape}")
    p = np.ascontiguousarray(p)
    if p.shape[0]:
        check(_lib.lib.kvb_copy_slots(cache.descs, cache.num_layers, ffi.from_buffer("int64_t[]", p), p.shape[0],
                                      _stream(stream)))


def swap_blocks(src: KVCache, dst: KVCache, pairs: Any, stream: Any = None) -> None:
    """Copies block pairs[i, 0] of src to pairs[i, 1] of dst in every layer (Manager.swap_out / swap_in)."""
    if src.num_layers != dst.num_layers:
        raise KvbArgumentError(f"dst: {dst.num_layers} layers, src has {src.num_layers}")
    buf, n = _pairs(pairs)
    if n:
        check(_lib.lib.kvb_swap_blocks(src.descs, dst.descs, src.num_layers, buf, n, 0, _stream(stream)))
