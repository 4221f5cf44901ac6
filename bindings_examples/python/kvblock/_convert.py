"""Arguments at the boundary, checked once, before any C call, with the argument's name in every refusal
(KvbArgumentError, a TypeError and a ValueError), never a bare OverflowError from cffi.

Token and id arrays: exactly Python sequences of ints and 1-D integer arrays, converted to int64 without
loss (no copy for a contiguous native int64 array). Everything else is refused: scalars (numpy scalars
too, which cffi would read as an array *length*), 0-d and 2-D arrays, floats, bools, strings, and values
outside int64.

Scalars: i64 / u64 / u32 / i32 / size give the Python int for a C argument of that type, from an int or a
numpy integer (never a bool or a float), refusing values the C type cannot hold.

Cost: these run on every call of a per-sequence decode loop, so each has one fast path that decides with
a type identity test and one chained comparison (a scalar), or one C-level conversion (a short list of
exact ints through cffi, a longer list through struct; a native int64 array with no conversion at all).
The bool check of a long list costs one vector comparison unless it holds a 0 or a 1 (the only
values a bool converts to); only then are those elements' types looked at."""
from __future__ import annotations

import array
import struct
from collections.abc import Sequence
from typing import Any, NoReturn, Tuple, Union

import numpy as np

from . import _lib
from .errors import KvbArgumentError

TokenLike = Union[Sequence, np.ndarray, array.array]
_I64 = np.dtype(np.int64)
_U64 = np.dtype(np.uint64)
I64_MIN, I64_MAX = -2**63, 2**63 - 1
U64_MAX, U32_MAX, I32_MIN, I32_MAX = 2**64 - 1, 2**32 - 1, -2**31, 2**31 - 1
_BOUNDS = {I64_MIN: "-2^63", I64_MAX: "2^63 - 1", U64_MAX: "2^64 - 1", U32_MAX: "2^32 - 1", I32_MIN: "-2^31",
           I32_MAX: "2^31 - 1"}
_SMALL_LIST = 32  # up to here cffi converts a list itself (one call); above, struct + one numpy min
_INT_ONLY = {int}
# cffi's C functions behind ffi.new / ffi.from_buffer, called with the int64_t[] type resolved once: the
# FFI methods are Python wrappers that look the type string up on every call (two Python frames, about
# 2,000 instructions: a tenth of a batched decode step's overhead over its bare C calls, which converts
# four arrays).
_I64_ARRAY = _lib.ffi.typeof("int64_t[]")
_backend = getattr(_lib.ffi, "_backend", None)
if _backend is not None and hasattr(_backend, "newp") and hasattr(_backend, "from_buffer"):
    _newp, _backend_from_buffer = _backend.newp, _backend.from_buffer
else:  # a cffi without that layout: the FFI methods, which take the type object too
    _newp, _backend_from_buffer = _lib.ffi.new, _lib.ffi.from_buffer


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"a {x.ndim}-D {x.dtype} array"
    if isinstance(x, np.generic):
        return f"a numpy {x.dtype} scalar"
    return type(x).__name__


# -- scalars ---------------------------------------------------------------------------------------------
def scalar(x: Any, what: str, lo: int, hi: int, ctype: str) -> int:
    """The int value of x for a C argument `ctype` holding [lo, hi], or KvbArgumentError naming `what`."""
    if type(x) is not int:
        if isinstance(x, np.integer) and not isinstance(x, np.bool_):
            x = int(x)
        else:
            raise KvbArgumentError(f"{what} must be an int, got {_describe(x)} {x!r}")
    if lo <= x <= hi:
        return x
    raise KvbArgumentError(f"{what}: {x} is out of range [{_BOUNDS.get(lo, lo)}, {_BOUNDS.get(hi, hi)}] "
                           f"of {ctype}")


def i64(x: Any, what: str) -> int:
    if type(x) is int and I64_MIN <= x <= I64_MAX:
        return x
    return scalar(x, what, I64_MIN, I64_MAX, "int64_t")


def u64(x: Any, what: str) -> int:
    if type(x) is int and 0 <= x <= U64_MAX:
        return x
    return scalar(x, what, 0, U64_MAX, "uint64_t")


def size(x: Any, what: str) -> int:
    """A size_t count (the package supports 64-bit platforms only)."""
    if type(x) is int and 0 <= x <= U64_MAX:
        return x
    return scalar(x, what, 0, U64_MAX, "size_t")


def u32(x: Any, what: str) -> int:
    if type(x) is int and 0 <= x <= U32_MAX:
        return x
    return scalar(x, what, 0, U32_MAX, "uint32_t")


def i32(x: Any, what: str) -> int:
    if type(x) is int and I32_MIN <= x <= I32_MAX:
        return x
    return scalar(x, what, I32_MIN, I32_MAX, "int32_t")


def as_index(x: Any, what: str) -> int:
    """A Python int from an int or numpy integer (never a bool or a float), any size."""
    if type(x) is int:
        return x
    if isinstance(x, np.integer) and not isinstance(x, np.bool_):
        return int(x)
    raise KvbArgumentError(f"{what} must be an int, got {_describe(x)} {x!r}")


def real(x: Any, what: str) -> float:
    """A float from an int, a float or a numpy real (never a bool, a string or a complex)."""
    if type(x) is float or type(x) is int:
        return float(x)
    if isinstance(x, (np.integer, np.floating)) and not isinstance(x, np.bool_):
        return float(x)
    raise KvbArgumentError(f"{what} must be a real number, got {_describe(x)} {x!r}")


# -- token and id arrays ---------------------------------------------------------------------------------
def _refuse_element(x: Sequence, what: str) -> NoReturn:
    """Names the first element that is not an int in int64 (after cffi or array('q') refused one)."""
    for i, v in enumerate(x):
        if type(v) is bool or isinstance(v, np.bool_) or not isinstance(v, (int, np.integer)):
            raise KvbArgumentError(f"{what}[{i}] must be an int, got {type(v).__name__} {v!r}")
        if not I64_MIN <= int(v) <= I64_MAX:
            raise KvbArgumentError(f"{what}: value {int(v)} does not fit int64")
    raise KvbArgumentError(f"{what} must hold ints")  # unreachable unless x changed under us


def _refuse_bools(x: Sequence, what: str, where: Any) -> None:
    """Raises for a bool among x[i], i in where (the positions holding 0 or 1)."""
    for i in where:
        v = x[i]
        if type(v) is bool or isinstance(v, np.bool_):
            raise KvbArgumentError(f"{what}[{i}] must be an int, got {type(v).__name__} {v!r}")


def _packer(n: int) -> struct.Struct:
    packer = struct.Struct(f"={n}q")
    if n <= 4096:  # the lengths of decode batches and short prompts recur; long prompts do not
        _PACKERS[n] = packer
    return packer


def _list_q(x: Sequence, what: str) -> bytes:
    """A list or tuple as native int64 bytes, in one C-level pass: struct's "q" takes only __index__
    (refusing floats, numpy's too, strings, None) and refuses values outside int64, at ~5 ns per token
    (array('q') and np.array take ~13). Bools, which it takes as 0 and 1, are refused here, looking at
    the elements only when the minimum is 0 or 1. (int64_ptr repeats this body for long lists: a decode
    step's tokens, where one Python frame is a tenth of the conversion.)"""
    n = len(x)
    try:
        b = (_PACKERS.get(n) or _packer(n)).pack(*x)
    except struct.error:
        _refuse_element(x, what)
    if n:
        u = _frombuffer(b, _U64)  # negatives are huge as unsigned: < 2 is exactly {0, 1}
        if u[u.argmin()] < 2:  # (argmin + index: half the cost of min() on a decode batch)
            _refuse_bools(x, what, np.flatnonzero(u < 2).tolist())
    return b


_PACKERS: dict = {}
_frombuffer = np.frombuffer


def _list_array(x: Sequence, what: str) -> np.ndarray:
    return np.frombuffer(_list_q(x, what), np.int64)  # read-only: the C API reads token arrays only


def as_int64_array(x: Any, what: str = "tokens") -> np.ndarray:
    """A 1-D native int64 numpy array with x's values, or KvbArgumentError naming `what`."""
    t = type(x)
    if t is np.ndarray and x.dtype is _I64 and x.ndim == 1:
        return x
    if t is list or t is tuple:
        return _list_array(x, what)
    if isinstance(x, array.array):
        x = np.frombuffer(x, dtype=x.typecode) if x.typecode in "bBhHiIlLqQ" else np.asarray(x.tolist())
    if isinstance(x, np.ndarray):
        if x.ndim != 1:
            raise KvbArgumentError(f"{what} must be 1-D, got {_describe(x)}")
        kind = x.dtype.kind
        if kind == "i":
            return x if x.dtype == _I64 else x.astype(np.int64)
        if kind == "u":
            if x.dtype.itemsize == 8 and x.size and int(x.max()) > I64_MAX:
                raise KvbArgumentError(f"{what}: value {int(x.max())} does not fit int64")
            return x.astype(np.int64)
        raise KvbArgumentError(f"{what} must hold integers, got {_describe(x)}")
    if isinstance(x, (str, bytes, bytearray, memoryview)) or not isinstance(x, Sequence):
        raise KvbArgumentError(f"{what} must be a sequence of ints or a 1-D integer array, got {_describe(x)}")
    if isinstance(x, range) and t is range:  # (the isinstance tells the type checker what t is says)
        if x and not (I64_MIN <= min(x[0], x[-1]) and max(x[0], x[-1]) <= I64_MAX):
            raise KvbArgumentError(f"{what}: range {x} does not fit int64")
        return np.arange(x.start, x.stop, x.step, dtype=np.int64)
    return _list_array(list(x), what)


def int64_ptr(x: Any, what: str = "tokens") -> Tuple[Any, int]:
    """(int64_t* cdata keeping its memory alive, length)."""
    t = type(x)
    if t is list or t is tuple:
        n = len(x)
        if n > _SMALL_LIST:  # _list_q's body, inlined (see there)
            try:
                b = (_PACKERS.get(n) or _packer(n)).pack(*x)
            except struct.error:
                _refuse_element(x, what)
            u = _frombuffer(b, _U64)
            if u[u.argmin()] < 2:
                _refuse_bools(x, what, np.flatnonzero(u < 2).tolist())
            return _backend_from_buffer(_I64_ARRAY, b, False), n
        # A decode step's [token]: one cffi conversion, no numpy. Only exact ints go this way: cffi would
        # also take bools and truncate numpy floats (through __int__), which array('q') refuses.
        if (n == 1 and type(x[0]) is int) or (n > 1 and set(map(type, x)) == _INT_ONLY):
            try:
                return _newp(_I64_ARRAY, x), n
            except OverflowError:
                _refuse_element(x, what)
        return _backend_from_buffer(_I64_ARRAY, _list_q(x, what), False), n
    if t is np.ndarray and x.dtype is _I64 and x.ndim == 1 and x.flags.c_contiguous:
        return _backend_from_buffer(_I64_ARRAY, x, False), len(x)
    a = as_int64_array(x, what)
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return _backend_from_buffer(_I64_ARRAY, a, False), a.shape[0]
