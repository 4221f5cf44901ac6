"""Zero-copy views of caller arrays for the kernels: numpy arrays and other __array_interface__ objects,
__cuda_array_interface__ objects (CuPy, Numba, PyTorch CUDA tensors), PyTorch tensors (CPU and CUDA, through
their data pointer and strides, as DLPack would give them) and other CPU DLPack producers (np.from_dlpack).
Nothing is copied: a wrong dtype, shape, stride or device is refused with a message naming the argument."""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

from .errors import KvbArgumentError

CPU, CUDA = 0, 1
_TYPESTR = {"<f2": "float16", "<f4": "float32", "<i4": "int32", "<i8": "int64", "<u8": "uint64", "<u1": "uint8",
            "|u1": "uint8", "|i1": "int8"}
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "int32": 4, "int64": 8, "uint64": 8, "uint8": 1, "int8": 1,
             "float8_e4m3fn": 1, "float8_e5m2": 1}


class View(NamedTuple):
    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]     # in elements
    dtype: str                   # "float16", "bfloat16", "float32", "int32", "int64", ...
    device: Tuple[int, int]      # (CPU or CUDA, index)
    readonly: bool


def _elem_strides(byte_strides: Optional[Tuple[int, ...]], shape: Tuple[int, ...], itemsize: int,
                  what: str) -> Tuple[int, ...]:
    if byte_strides is None:  # C-contiguous
        out, acc = [], 1
        for s in reversed(shape):
            out.append(acc)
            acc *= s
        return tuple(reversed(out))
    if any(s % itemsize for s in byte_strides):
        raise KvbArgumentError(f"{what}: strides {byte_strides} are not multiples of the item size {itemsize}")
    return tuple(s // itemsize for s in byte_strides)


def _from_interface(ai: dict, device: Tuple[int, int], what: str) -> View:
    typestr = ai["typestr"]
    dtype = _TYPESTR.get(typestr.replace("=", "<"), None)
    if dtype is None:
        raise KvbArgumentError(f"{what}: unsupported element type {typestr!r}")
    shape = tuple(ai["shape"])
    ptr, readonly = ai["data"]
    return View(ptr or 0, shape, _elem_strides(ai.get("strides"), shape, _ITEMSIZE[dtype], what), dtype, device,
                bool(readonly))


def _torch_view(x: Any, what: str) -> View:
    name = str(x.dtype).removeprefix("torch.")
    if name not in _ITEMSIZE:
        raise KvbArgumentError(f"{what}: unsupported torch dtype {x.dtype}")
    dev = x.device
    if dev.type == "cpu":
        device = (CPU, 0)
    elif dev.type == "cuda":
        device = (CUDA, dev.index or 0)
    else:
        raise KvbArgumentError(f"{what}: tensors on {dev} are not supported (CPU or CUDA)")
    return View(x.data_ptr(), tuple(x.shape), tuple(x.stride()), name, device, False)


def view(x: Any, what: str) -> View:
    """The View of x, with no copy. A dimension of more than one element with stride 0 (np.broadcast_to,
    torch's expand) is refused: the C API reads a 0 stride as the dense default, so passing it through
    would make the kernel read (or write) elements that are not the view's."""
    v = _view(x, what)
    if 0 in v.shape:  # no element at all (numpy may give such arrays any strides, 0 included)
        return v
    for i, (n, s) in enumerate(zip(v.shape, v.strides)):
        if s == 0 and n > 1:
            raise KvbArgumentError(f"{what}: dimension {i} has stride 0 (a broadcast view, shape {v.shape}, strides "
                                   f"{v.strides}); the kernels need every element stored: pass a materialised copy")
    return v


def _view(x: Any, what: str) -> View:
    if isinstance(x, np.ndarray):
        if not x.dtype.isnative:
            raise KvbArgumentError(f"{what}: byte order {x.dtype.str} is not native")
        dtype = x.dtype.name
        if dtype not in _ITEMSIZE:
            raise KvbArgumentError(f"{what}: unsupported dtype {x.dtype}")
        return View(x.__array_interface__["data"][0], x.shape,
                    _elem_strides(x.strides, x.shape, x.itemsize, what), dtype, (CPU, 0), not x.flags.writeable)
    if type(x).__module__ == "torch" and hasattr(x, "data_ptr"):
        return _torch_view(x, what)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        dev = getattr(x, "device", None)
        index = getattr(dev, "id", None)
        if index is None:
            index = getattr(dev, "index", 0) or 0
        return _from_interface(cai, (CUDA, int(index)), what)
    ai = getattr(x, "__array_interface__", None)
    if ai is not None:
        return _from_interface(ai, (CPU, 0), what)
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        dev_type, _ = x.__dlpack_device__()
        if int(dev_type) == 1:  # kDLCPU
            return _view(np.from_dlpack(x), what)
        raise KvbArgumentError(f"{what}: DLPack device type {int(dev_type)} needs __cuda_array_interface__ or torch")
    raise KvbArgumentError(f"{what} must be a numpy array, a torch tensor or an object with __array_interface__, "
                           f"__cuda_array_interface__ or DLPack; got {type(x).__name__}")


def require(v: View, what: str, *, dtype: Optional[str] = None, ndim: Optional[int] = None,
            shape: Optional[Tuple[Optional[int], ...]] = None, device: Optional[Tuple[int, int]] = None,
            contiguous: bool = False, inner_contiguous: bool = False, writable: bool = False) -> None:
    """Checks v against the kernel's needs; the message names the argument and both values."""
    if dtype is not None and v.dtype != dtype:
        raise KvbArgumentError(f"{what}: dtype must be {dtype}, got {v.dtype}")
    if ndim is not None and len(v.shape) != ndim:
        raise KvbArgumentError(f"{what}: must be {ndim}-D, got shape {v.shape}")
    if shape is not None:
        for i, (got, want) in enumerate(zip(v.shape, shape)):
            if want is not None and got != want:
                raise KvbArgumentError(f"{what}: dimension {i} must be {want}, got shape {v.shape}")
    if device is not None and v.device != device:
        raise KvbArgumentError(f"{what}: is on {device_name(v.device)}, the cache is on {device_name(device)}")
    if contiguous and v.strides != _elem_strides(None, v.shape, 1, what) and not _dense(v.shape, v.strides):
        raise KvbArgumentError(f"{what}: must be contiguous, got strides {v.strides} for shape {v.shape}")
    if inner_contiguous and v.shape and v.shape[-1] > 1 and v.strides[-1] != 1 and 0 not in v.shape:
        raise KvbArgumentError(f"{what}: the last dimension must be contiguous, got strides {v.strides}")
    if writable and v.readonly:
        raise KvbArgumentError(f"{what}: is read-only")


def _dense(shape: Tuple[int, ...], strides: Tuple[int, ...]) -> bool:
    """Whether the elements lie in row-major order with no gaps, as numpy's C_CONTIGUOUS flag and torch's
    is_contiguous() say: a dimension of one element is never stepped over, so its stride does not matter
    (numpy gives a new axis stride 0, torch may keep any stride there)."""
    if 0 in shape:
        return True
    want = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != want:
            return False
        want *= n
    return True


def device_name(d: Tuple[int, int]) -> str:
    return "cpu" if d[0] == CPU else f"cuda:{d[1]}"
