"""SeqIds: the sequence ids of a batched decode step, checked and converted to int64 once.

An engine's decode set changes rarely (a sequence joins or finishes every few steps), while each step
passes the same ids to batch_append, batch_export and batch_commit. Given a SeqIds, those calls use its
C array as it is: no conversion and no per-call check (the strict checks ran once, in the constructor).
Plain lists and arrays of ids still work everywhere and are checked on every call."""
from __future__ import annotations

from typing import Any, Iterator, Tuple

import numpy as np

from . import _lib
from ._convert import as_int64_array


class SeqIds:
    """An immutable, checked copy of a step's sequence ids (any sequence of ints or 1-D integer array that
    batch_append accepts). Build a new one when the batch changes; `.array` is the read-only int64 copy."""
    __slots__ = ("array", "_c", "_n")

    def __init__(self, seq_ids: Any) -> None:
        if type(seq_ids) is SeqIds:
            seq_ids = seq_ids.array
        # A copy of its own: a later change to the caller's array must not reach the C calls unseen.
        a = np.array(as_int64_array(seq_ids, "seq_ids"), dtype=np.int64, copy=True)
        a.flags.writeable = False
        self.array: np.ndarray = a
        self._c = _lib.ffi.from_buffer("int64_t[]", a)
        self._n = a.shape[0]

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[int]:
        return iter(self.array.tolist())

    def __reduce__(self) -> Tuple[Any, Tuple[np.ndarray]]:
        return (SeqIds, (self.array,))  # copy and pickle rebuild the C array from the ids

    def __repr__(self) -> str:
        return f"kvblock.SeqIds({self.array.tolist()!r})" if self._n <= 8 else \
            f"kvblock.SeqIds({self.array[:4].tolist()!r}... {self._n} ids)"
