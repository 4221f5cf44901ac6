"""close() of an object that owns a C handle while other threads use it: a call in progress keeps the C
manager alive until it returns, later calls raise KvbClosedError naming the manager, close() is idempotent
from any number of threads, and a close() that interrupts a call on its own thread (a signal handler)
neither deadlocks nor frees the manager under that call. Nothing here waits on a timer: every ordering is
forced with events.

The hammer test crashed the package before the guard (use after free in C: a segfault within a few rounds,
a hang under ASan). To run these tests against the ASan + UBSan build of the library:
    make BUILD=build-san CUDA=0 OPT="-O1 -g -fno-omit-frame-pointer" \
         SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=undefined" lib
    KVBLOCK_LIB=$PWD/build-san/lib/libkvblock.so ASAN_OPTIONS=detect_leaks=0 \
    LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
    python3 -m pytest bindings_examples/python/tests/test_close.py
"""
import gc
import os
import signal
import sys
import threading

import numpy as np
import pytest

import kvblock
from kvblock._guard import GuardedHandle

QUICK = os.environ.get("KVB_TEST_QUICK") == "1"


class FakeC:
    """A stand-in for the C library: destroy records, calls check they run on a live handle."""

    def __init__(self):
        self.destroyed = []
        self.lock = threading.Lock()

    def destroy(self, ptr):
        with self.lock:
            self.destroyed.append(ptr)

    def alive(self, ptr):
        with self.lock:
            return ptr not in self.destroyed


def test_close_waits_for_the_call_in_progress():
    c = FakeC()
    g = GuardedHandle("h", c.destroy, "test handle")
    entered, release = threading.Event(), threading.Event()
    seen = {}

    def slow_call(ptr, x):  # a C call that takes as long as the test wants
        entered.set()
        release.wait()
        seen["alive_at_return"] = c.alive(ptr)
        return x

    caller = threading.Thread(target=lambda: seen.setdefault("result", g.call(slow_call, 7)))
    caller.start()
    entered.wait()
    closers = [threading.Thread(target=lambda: (g.close(), seen.setdefault("closed_after", []).append(c.destroyed[:])))
               for _ in range(3)]
    for t in closers:
        t.start()
    while not g.closed:  # close() has cleared the handle (not a timing assumption: it loops until so)
        threading.Event().wait(0.001)
    with pytest.raises(kvblock.KvbClosedError, match="test handle is closed"):
        g.call(slow_call, 1)
    assert c.destroyed == []  # the call in progress still holds the handle
    release.set()
    caller.join()
    for t in closers:
        t.join()
    assert seen["result"] == 7 and seen["alive_at_return"]
    assert c.destroyed == ["h"]  # once, by whoever settled last
    assert seen["closed_after"] == [["h"]] * 3  # every close() returned after the destroy


def test_close_from_a_signal_handler_inside_a_call():
    """A handler that closes while its own thread is inside a call: close() returns at once (waiting would
    deadlock), the interrupted call finishes on a live handle and destroys it as it returns."""
    c = FakeC()
    g = GuardedHandle("h", c.destroy, "test handle")
    state = {}

    def handler(signum, frame):
        g.close()
        state["destroyed_in_handler"] = c.destroyed[:]
        with pytest.raises(kvblock.KvbClosedError):
            g.call(lambda p: 0)

    def interrupted_call(ptr):
        signal.raise_signal(signal.SIGUSR1)  # the handler runs here, on this thread, inside the call
        state["alive_after_handler"] = c.alive(ptr)
        return 0

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        g.run(interrupted_call)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert state == {"destroyed_in_handler": [], "alive_after_handler": True}
    assert c.destroyed == ["h"] and g.closed


def test_calls_nest_on_one_thread():
    c = FakeC()
    g = GuardedHandle("h", c.destroy, "test handle")
    assert g.call(lambda p: g.call(lambda q: 5 if q == p else -1)) == 5
    g.close()
    g.close()
    assert c.destroyed == ["h"]


def _hammer(m, seqs, started, errors):
    """Decode steps on m's sequences `seqs` (per-sequence and batched calls) until m is closed; records
    anything but that. Each thread has its own sequences: their lengths are its own to check."""
    ids = np.array(seqs, dtype=np.int64)
    bufs = kvblock.BatchBuffers(len(seqs), 8, len(seqs))
    try:
        step = 0
        while True:
            m.batch_append(ids, np.full(len(seqs), step, np.int64))
            m.batch_export(ids, bufs)
            m.batch_commit(ids)
            for i in seqs:
                m.append(i, [step])
                m.commit(i, 1)
                m.block_table(i)
                if m.info(i).num_tokens > 20:
                    m.rollback(i, 10)
            m.stats()
            step += 1
            started.set()
    except kvblock.KvbClosedError as e:
        if "kvblock.Manager(num_blocks=64, block_size=4)" not in str(e):
            errors.append(f"closed error does not name the manager: {e}")
    except Exception as e:  # noqa: BLE001 - anything else is the failure being tested
        errors.append(repr(e))


@pytest.mark.parametrize("close_with", ["close", "with-exit", "threads"])
def test_close_while_threads_hammer_calls(close_with):
    """Never a crash (in C: a use after free), never an error but KvbClosedError."""
    rounds = 10 if QUICK else 60
    errors = []
    for r in range(rounds):
        m = kvblock.Manager(num_blocks=64, block_size=4)
        for i in range(4):
            m.allocate(i, [i, r, 1, 2, 3])
            m.commit(i, 5)
        started = [threading.Event() for _ in range(2)]
        workers = [threading.Thread(target=_hammer, args=(m, [2 * k, 2 * k + 1], s, errors))
                   for k, s in enumerate(started)]
        for t in workers:
            t.start()
        for s in started:  # both have completed a step: the close lands among calls in progress
            s.wait()
        if close_with == "close":
            m.close()
        elif close_with == "with-exit":
            with m:
                pass
        else:
            closers = [threading.Thread(target=m.close) for _ in range(3)]
            for t in closers:
                t.start()
            for t in closers:
                t.join()
        assert m.closed
        for t in workers:
            t.join()
        assert not errors, errors[:3]


def test_calls_after_close_name_the_manager():
    m = kvblock.Manager(num_blocks=8, block_size=4)
    m.allocate(1, [1, 2, 3])
    m.close()
    m.close()  # idempotent
    assert m.closed and "closed" in repr(m)
    for call in (lambda: m.allocate(2, [1]), lambda: m.block_table(1), lambda: m.drain_copies(),
                 lambda: m.can_allocate([1]), lambda: m.can_append(1), lambda: m.block_hash(0),
                 lambda: m.append(1, [4]), lambda: m.append(1, [4, 5]), lambda: m.commit(1, 1),
                 lambda: m.batch_append([1], [4]), lambda: m.batch_commit([1]), lambda: m.batch_export([1]),
                 lambda: m.num_free_blocks, lambda: m.stats(), lambda: m.drain_events(), lambda: m.swap_out(1),
                 lambda: m.can_swap_in(1), lambda: m.drain_host_transfers(), lambda: m.check_invariants()):
        with pytest.raises(kvblock.KvbClosedError) as e:
            call()
        assert isinstance(e.value, kvblock.KvbArgumentError)  # what callers caught before KvbClosedError
        assert str(e.value) == (f"KVB_ERR_INVALID_ARGUMENT: kvblock.Manager(num_blocks=8, block_size=4) at "
                                f"{id(m):#x} is closed: close() destroyed its C handle; create a new one")


def test_close_inside_with_and_after():
    with kvblock.Manager(num_blocks=8, block_size=4) as m:
        m.allocate(1, [1, 2])
        m.close()  # the with-exit closes again: fine
        with pytest.raises(kvblock.KvbClosedError):
            m.free(1)
    with pytest.raises(ValueError):  # an exception leaving the block still closes the manager
        with kvblock.Manager(num_blocks=8, block_size=4) as m2:
            raise ValueError("boom")
    assert m2.closed


def test_failed_init_and_finalizers_are_quiet():
    """A Manager whose creation failed has no handle: its finalizer must not raise; a dropped open
    Manager is destroyed by the finalizer."""
    unraisable = []
    old = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with pytest.raises(kvblock.KvbError):
            kvblock.Manager(num_blocks=0, block_size=4)  # refused by kvb_manager_create
        m = kvblock.Manager(num_blocks=8, block_size=4)
        guard = m._guard
        del m
        gc.collect()
        assert guard.closed and guard._destroyed.is_set()
    finally:
        sys.unraisablehook = old
    assert not unraisable, [u.exc_value for u in unraisable]


def test_event_publisher_closes_once_from_many_threads():
    """KvEventPublisher (sockets, a sender thread and a wake pipe, no C handle of its own): concurrent
    close() calls do the work once (a second close of the pipe could close a descriptor reused meanwhile),
    each returns after it is done, and the manager may be closed before or after it."""
    pytest.importorskip("zmq", reason="pyzmq not installed (pip install pyzmq msgpack)")
    pytest.importorskip("msgpack", reason="msgpack not installed (pip install pyzmq msgpack)")
    from kvblock.events import KvEventPublisher

    for manager_first in (False, True):
        m = kvblock.Manager(num_blocks=8, block_size=4, events=True)
        m.allocate(1, [1, 2, 3, 4])
        m.commit(1, 4)
        pub = KvEventPublisher(m, endpoint="tcp://127.0.0.1:*")
        if manager_first:
            m.close()
        done = []
        closers = [threading.Thread(target=lambda: (pub.close(), done.append(pub._thread.is_alive())))
                   for _ in range(4)]
        for t in closers:
            t.start()
        for t in closers:
            t.join()
        assert done == [False] * 4  # every close() returned after the sender thread stopped
        assert pub.stats()["events"] == (0 if manager_first else 1)
        with pytest.raises(kvblock.KvbClosedError, match=r"is closed: close\(\) stopped its sender thread"):
            pub.flush()  # as a Manager's calls after close() (issue 20 item 5; a RuntimeError before)
        pub.close()
        m.close()
