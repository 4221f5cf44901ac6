"""python -m kvblock.bench: one decode step of a Python engine through the package, for N running sequences
of ~L tokens (append one token each, block tables + slot mapping for the kernels, commit), three ways:
  per-sequence  the Manager's per-sequence calls in a Python loop (what the old wrapper allowed)
  batched       batch_append + batch_export into preallocated BatchBuffers + batch_commit (no Python loop)
  raw cffi      the same three C calls on prebuilt cffi pointers: the C work plus the bare call cost,
                the floor that the batched figure is compared against."""
from __future__ import annotations

import argparse
import platform
import time
from typing import Callable, List

import numpy as np

import kvblock
from kvblock import _lib


def _median_us(step: Callable[[int], None], reps: int) -> tuple:
    """(median, min) microseconds per call: the min is the figure least disturbed by a shared machine."""
    times: List[float] = []
    for t in range(reps):
        t0 = time.perf_counter()
        step(t)
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1e6, times[0] * 1e6


def _manager(n: int, length: int, bs: int, reps: int) -> kvblock.Manager:
    m = kvblock.Manager(num_blocks=n * ((length + reps) // bs + 2), block_size=bs)
    for i in range(n):
        prompt = np.arange(length, dtype=np.int64) + i * 1_000_003
        m.allocate(i, prompt)
        m.commit(i, length)
    return m


def run(n: int = 256, length: int = 2000, bs: int = 16, reps: int = 200) -> dict:
    ids = np.arange(n, dtype=np.int64)
    out = {}

    m = _manager(n, length, bs, reps)

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

    out["per_sequence_us"] = _median_us(per_sequence, max(20, reps // 10))
    m.close()

    m = _manager(n, length, bs, reps)
    bufs = kvblock.BatchBuffers(n, (length + reps) // bs + 8, n)
    toks = np.zeros(n, np.int64)

    def batched(t: int) -> None:
        toks.fill(t)
        m.batch_append(ids, toks)
        m.batch_export(ids, bufs)
        m.batch_commit(ids)

    out["batched_us"] = _median_us(batched, reps)
    batch = m.batch_export(ids, bufs)
    assert batch.block_tables.shape == (n, bufs.capacity[1]) and batch.num_slots == 0
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
    p = argparse.ArgumentParser(prog="python -m kvblock.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seqs", type=int, default=256)
    p.add_argument("--tokens", type=int, default=2000)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--reps", type=int, default=200)
    a = p.parse_args()
    r = run(a.seqs, a.tokens, a.block_size, a.reps)
    print(f"decode step, {a.seqs} sequences of ~{a.tokens} tokens, block size {a.block_size} "
          f"({a.reps} repetitions; {platform.processor() or platform.machine()}, python {platform.python_version()})")
    for key, label in [("per_sequence_us", "per-sequence calls"), ("batched_us", "batched (package) "),
                       ("raw_cffi_us", "raw cffi floor    ")]:
        med, low = r[key]
        print(f"  {label}: median {med:9.1f} us/step, min {low:9.1f}")
    print("  (raw cffi floor: the same three C calls on prebuilt pointers, i.e. the C work + bare call cost)")


if __name__ == "__main__":
    main()
