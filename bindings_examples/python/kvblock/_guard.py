"""GuardedHandle: a C handle (kvb_manager*) that threads share and one of them may close at any time.

The C library lets several threads call one manager at once, but kvb_manager_destroy must not overlap any
other call on it: it frees what that call is using. So every call announces itself before it reads the
handle and withdraws after the C function returns; close() clears the handle first, and the handle is
destroyed only once no announced call is left, by close() itself or by the last call to finish. Every call
that reads the cleared handle raises KvbClosedError naming the object.

Why it is safe: a call appends a token to `_busy`, then reads `_ptr`; close() sets `_ptr` to None, then
reads `_busy`. These four steps are totally ordered (by the GIL; in free-threaded builds list.append,
`del list[-1]` and list.copy each take the list's own lock, PEP 703, and `_settle` reads the list through
list.copy). So either close() sees the token, and the destroy waits until the call withdraws it, or the
call reads None and never touches the C manager. The destroy is claimed by popping the one-element
`_pending`: of several settlers, one wins.

Why not a lock held around each call: acquire + release of a threading.Lock costs ~130 ns on this machine,
about what the C call of kvb_num_free_blocks costs, and an engine that calls once per sequence per step
pays it on every call (+10% on the per-sequence step of `python examples/bench.py`, against +5% for the
token). The batched decode step makes three calls per step, where either is lost in the noise. The token
also leaves calls concurrent, as the C library allows (it serialises them on its own mutex).

Reentrancy: a signal handler (or a finalizer) may run on a thread that is inside a call on this handle.
Calls from there nest like any other. close() from there cannot wait for the interrupted call (it would
wait for itself forever), so it returns at once and that call destroys the handle when it returns.

Written out: the batched decode step's calls (Manager.batch_append, batch_export, batch_commit) and the
per-sequence loop's (Manager.append, commit, block_table) repeat run()'s body with the C function named in
place (its frame and argument tuples cost ~0.15 us a call); they register with inline_call() so that
close() finds them on the stack too. A change to the protocol here changes them as well.
"""
from __future__ import annotations

import sys
import threading
from types import CodeType, FrameType
from typing import Any, Callable, Dict, Optional, TypeVar

from .errors import KvbClosedError, check

F = TypeVar("F", bound=Callable[..., Any])


class GuardedHandle:
    __slots__ = ("_ptr", "_busy", "_pending", "_destroy", "_destroyed", "name")

    def __init__(self, ptr: Any, destroy: Callable[[Any], None], name: str) -> None:
        self._ptr = ptr
        self._busy: list = []           # one token per call in progress
        self._pending = [ptr]           # the handle still to destroy; popped exactly once
        self._destroy = destroy
        self._destroyed = threading.Event()
        self.name = name  # how errors name the owner, e.g. "kvblock.Manager(num_blocks=64, ...) at 0x7f..."

    def call(self, fn: Callable[..., int], *args: Any) -> int:
        """fn(handle, *args), the handle kept alive until fn returns; returns fn's kvb_status."""
        busy = self._busy
        busy.append(None)
        try:
            ptr = self._ptr
            if ptr is None:
                raise KvbClosedError(self.name)
            return fn(*((ptr,) + args))  # not fn(ptr, *args): that builds a list first, ~80 ns more
        finally:
            del busy[-1]  # any token: they are all alike (a little cheaper than pop())
            if self._ptr is None:  # closing: the last call out destroys
                self._settle()

    def run(self, fn: Callable[..., int], *args: Any) -> None:
        """call(), raising KvbError for a failed status (kvb_last_error is per thread: read after is fine).
        call()'s body is repeated here rather than called: one Python frame less on every call."""
        busy = self._busy
        busy.append(None)
        try:
            ptr = self._ptr
            if ptr is None:
                raise KvbClosedError(self.name)
            status = fn(*((ptr,) + args))
        finally:
            del busy[-1]  # any token: they are all alike (a little cheaper than pop())
            if self._ptr is None:
                self._settle()
        if status:
            check(status)

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def unguarded(self) -> Any:
        """The raw handle, not kept alive: only for code that guarantees no close() meanwhile (benchmarks)."""
        if self._ptr is None:
            raise KvbClosedError(self.name)
        return self._ptr

    def close(self, wait: bool = True) -> None:
        """Clears the handle (later calls raise) and destroys it once no call is in progress. Idempotent.
        wait: return only after the destroy (every concurrent close() too), unless this thread is itself
        inside a call on the handle; False (finalizers) never blocks."""
        self._ptr = None
        self._settle()
        if wait and not self._destroyed.is_set() and not self._inside_call():
            self._destroyed.wait()

    def _settle(self) -> None:
        if self._busy.copy():  # a call still holds the handle: it settles when it finishes
            return
        try:
            ptr = self._pending.pop()
        except IndexError:  # destroyed already, or another settler won
            return
        self._destroy(ptr)
        self._destroyed.set()

    def _inside_call(self) -> bool:
        """Whether this thread's stack holds a call or run on this handle (close() from a signal handler)."""
        frame: Optional[FrameType] = sys._getframe(1)
        while frame is not None:
            local = _CALL_CODES.get(frame.f_code)
            if local is not None and frame.f_locals.get(local) is self:
                return True
            frame = frame.f_back
        return False


# The functions that hold a GuardedHandle during a C call: their code -> the local naming the handle.
_CALL_CODES: Dict[CodeType, str] = {GuardedHandle.call.__code__: "self", GuardedHandle.run.__code__: "self"}


def inline_call(fn: F) -> F:
    """Decorator of a function that runs call()'s protocol itself, its GuardedHandle in the local `g`."""
    _CALL_CODES[fn.__code__] = "g"
    return fn
