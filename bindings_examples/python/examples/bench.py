"""python examples/bench.py: one decode step of a Python engine through the package, for N running sequences
of ~L tokens (append one token each, block tables + slot mapping for the kernels, commit), three ways:
  per-sequence  the Manager's per-sequence calls in a Python loop (what the old wrapper allowed)
  batched       batch_append + batch_export into preallocated BatchBuffers + batch_commit (no Python loop),
                the ids a kvblock.SeqIds (checked and converted once, as an engine keeps its decode set)
  batched list  the same with the step's tokens as a Python list (what a sampler's .tolist() hands over)
  array ids     the same with the ids as a numpy array (converted on each of the three calls)
  raw cffi      the same three C calls on prebuilt cffi pointers: the C work plus the bare call cost,
                the floor that the batched figure is compared against.
and the per-call costs under them: an append + commit pair of one sequence, and the conversion of a token
list (ns per token, a 2000-token prompt). --cpu-time times with the thread's CPU clock (time.thread_time)
instead of the wall clock: on a shared machine its minimum leaves out the time other processes took."""
from __future__ import annotations

import argparse
import platform
import time
from typing import Callable, List, Tuple

import numpy as np

import kvblock
from kvblock import _convert, _lib

CLOCK: Callable[[], float] = time.perf_counter  # main() sets time.thread_time for --cpu-time


def _median_us(step: Callable[[int], object], reps: int) -> Tuple[float, float]:
    """(median, min) microseconds per call: the min is the figure least disturbed by a shared machine."""
    times: List[float] = []
    clock = CLOCK
    for t in range(reps):
        t0 = clock()
        step(t)
        times.append(clock() - t0)
    times.sort()
    return times[len(times) // 2] * 1e6, times[0] * 1e6


def _manager(n: int, length: int, bs: int, reps: int) -> kvblock.Manager:
    m = kvblock.Manager(num_blocks=n * ((length + reps) // bs + 2), block_size=bs)
    for i in range(n):
        prompt = np.arange(length, dtype=np.int64) + i * 1_000_003
        m.allocate(i, prompt)
        m.commit(i, length)
    return m


def per_sequence_reps(reps: int) -> int:
    """The per-sequence step is ~50x slower than the batched one: it runs a tenth of the repetitions."""
    return max(20, reps // 10)


def run(n: int = 256, length: int = 2000, bs: int = 16, reps: int = 200) -> dict:
    """Every figure as (median, min) in microseconds (ns per token for token_list_ns)."""
    ids = np.arange(n, dtype=np.int64)
    out = {}

    m = _manager(n, length, bs, per_sequence_reps(reps) + reps)  # + the append + commit pairs of sequence 0

    def per_sequence(t: int) -> None:
        for i in range(n):
            m.append(i, [t])
        tables = [m.block_table(i) for i in range(n)]
        width = max(len(r) for r in tables)
        bt = np.full((n, width), -1, np.int32)
        for i, r in enumerate(tables):
            bt[i, : len(r)] = r
        pos = length + t
        _slots = np.array([tables[i][pos // bs] * bs + pos % bs for i in range(n)], np.int64)
        for i in range(n):
            m.commit(i, 1)

    out["per_sequence_us"] = _median_us(per_sequence, per_sequence_reps(reps))

    def append_commit(t: int) -> None:
        m.append(0, [t])
        m.commit(0, 1)

    out["append_commit_us"] = _median_us(append_commit, reps)
    m.close()

    m = _manager(n, length, bs, 3 * reps)  # three cases of reps tokens each
    bufs = kvblock.BatchBuffers(n, (length + 3 * reps) // bs + 8, n)
    toks = np.zeros(n, np.int64)
    seq_ids = kvblock.SeqIds(ids)

    def batched(t: int) -> None:
        toks.fill(t)
        m.batch_append(seq_ids, toks)
        m.batch_export(seq_ids, bufs)
        m.batch_commit(seq_ids)

    out["batched_us"] = _median_us(batched, reps)
    lists = [[t] * n for t in range(reps)]  # the sampler's lists, built outside the timed step

    def batched_list(t: int) -> None:
        m.batch_append(seq_ids, lists[t])
        m.batch_export(seq_ids, bufs)
        m.batch_commit(seq_ids)

    out["batched_list_us"] = _median_us(batched_list, reps)

    def batched_list_array_ids(t: int) -> None:
        m.batch_append(ids, lists[t])
        m.batch_export(ids, bufs)
        m.batch_commit(ids)

    out["batched_list_array_ids_us"] = _median_us(batched_list_array_ids, reps)
    batch = m.batch_export(ids, bufs)
    assert batch.block_tables.shape == (n, bufs.capacity[1]) and batch.num_slots == 0
    prompt = list(range(length))
    convert = _convert.int64_ptr
    med, low = _median_us(lambda t: convert(prompt), reps)
    out["token_list_ns"] = (med * 1e3 / length, low * 1e3 / length)
    m.close()

    m = _manager(n, length, bs, reps)
    lib, ffi = _lib.lib, _lib.ffi
    bufs = kvblock.BatchBuffers(n, (length + reps) // bs + 8, n)
    c_ids, c_toks = ffi.from_buffer("int64_t[]", ids), ffi.from_buffer("int64_t[]", toks)
    h, b = m._h, bufs.c

    def raw(t: int) -> None:
        lib.kvb_batch_append(h, c_ids, c_toks, n)
        lib.kvb_batch_export(h, c_ids, n, b)
        lib.kvb_batch_commit(h, c_ids, ffi.NULL, n)

    out["raw_cffi_us"] = _median_us(raw, reps)
    m.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(prog="python examples/bench.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seqs", type=int, default=256)
    p.add_argument("--tokens", type=int, default=2000)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--cpu-time", action="store_true", help="time with the thread's CPU clock (time.thread_time)")
    a = p.parse_args()
    global CLOCK
    if a.cpu_time:
        CLOCK = time.thread_time
    r = run(a.seqs, a.tokens, a.block_size, a.reps)
    print(f"decode step, {a.seqs} sequences of ~{a.tokens} tokens, block size {a.block_size} "
          f"({platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"{'thread CPU time' if a.cpu_time else 'wall clock'})")
    rows = [("per_sequence_us", "per-sequence calls", "us/step", per_sequence_reps(a.reps)),
            ("batched_us", "batched, numpy tokens", "us/step", a.reps),
            ("batched_list_us", "batched, list tokens", "us/step", a.reps),
            ("batched_list_array_ids_us", "batched, list tokens, array ids", "us/step", a.reps),
            ("raw_cffi_us", "raw cffi floor", "us/step", a.reps),
            ("append_commit_us", "append + commit, 1 seq", "us/pair", a.reps),
            ("token_list_ns", f"token list -> int64 ({a.tokens})", "ns/token", a.reps)]
    for key, label, unit, reps in rows:
        med, low = r[key]
        print(f"  {label:<31}: median {med:9.2f} {unit:<8}, min {low:9.2f}  ({reps} repetitions)")
    print("  (raw cffi floor: the same three C calls on prebuilt pointers, i.e. the C work + bare call cost)")


if __name__ == "__main__":
    main()
