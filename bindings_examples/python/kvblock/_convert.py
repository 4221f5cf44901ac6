"""Token and id arguments: exactly Python sequences of ints and 1-D integer arrays, converted to int64
without loss (no copy for a contiguous native int64 array). Everything else is refused: scalars (numpy
scalars too, which cffi would read as an array *length*), 0-d and 2-D arrays, floats, bools, strings, and
values outside int64."""
from __future__ import annotations

import array
from collections.abc import Sequence
from typing import Any, Tuple, Union

import numpy as np

from . import _lib
from .errors import KvbArgumentError

TokenLike = Union[Sequence, np.ndarray, array.array]
_I64 = np.dtype(np.int64)
_I64_MAX = np.iinfo(np.int64).max


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"a {x.ndim}-D {x.dtype} array"
    if isinstance(x, np.generic):
        return f"a numpy {x.dtype} scalar"
    return type(x).__name__


def as_int64_array(x: Any, what: str = "tokens") -> np.ndarray:
    """A 1-D native int64 numpy array with x's values, or KvbArgumentError naming `what`."""
    if isinstance(x, array.array):
        x = np.frombuffer(x, dtype=x.typecode) if x.typecode in "bBhHiIlLqQ" else np.asarray(x.tolist())
    if isinstance(x, np.ndarray):
        if x.ndim != 1:
            raise KvbArgumentError(f"{what} must be 1-D, got {_describe(x)}")
        kind = x.dtype.kind
        if kind == "i":
            return x if x.dtype == _I64 else x.astype(np.int64)
        if kind == "u":
            if x.dtype.itemsize == 8 and x.size and int(x.max()) > _I64_MAX:
                raise KvbArgumentError(f"{what}: value {int(x.max())} does not fit int64")
            return x.astype(np.int64)
        raise KvbArgumentError(f"{what} must hold integers, got {_describe(x)}")
    if isinstance(x, (str, bytes, bytearray, memoryview)) or not isinstance(x, Sequence):
        raise KvbArgumentError(f"{what} must be a sequence of ints or a 1-D integer array, got {_describe(x)}")
    if type(x) is range:
        if x and not (-_I64_MAX - 1 <= min(x[0], x[-1]) and max(x[0], x[-1]) <= _I64_MAX):
            raise KvbArgumentError(f"{what}: range {x} does not fit int64")
        return np.arange(x.start, x.stop, x.step, dtype=np.int64)
    values = x
    for i, v in enumerate(x):
        t = type(v)
        if t is int:
            continue
        if t is bool or isinstance(v, np.bool_) or not isinstance(v, (int, np.integer)):
            raise KvbArgumentError(f"{what}[{i}] must be an int, got {type(v).__name__} {v!r}")
        values = [int(u) for u in x]  # numpy integers (uint64 beyond int64 included) as Python ints
        break
    try:
        return np.array(values, dtype=np.int64).reshape(-1)
    except OverflowError:
        bad = next(v for v in values if not -_I64_MAX - 1 <= int(v) <= _I64_MAX)
        raise KvbArgumentError(f"{what}: value {bad} does not fit int64") from None


def int64_ptr(x: Any, what: str = "tokens") -> Tuple[Any, int]:
    """(int64_t* cdata keeping its memory alive, length)."""
    a = as_int64_array(x, what)
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return _lib.ffi.from_buffer("int64_t[]", a), a.shape[0]


def as_index(x: Any, what: str) -> int:
    """A Python int from an int or numpy integer (never a bool or a float)."""
    if type(x) is int:
        return x
    if isinstance(x, np.integer) and not isinstance(x, np.bool_):
        return int(x)
    raise KvbArgumentError(f"{what} must be an int, got {_describe(x)} {x!r}")
