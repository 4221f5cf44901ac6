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
list (ns per token, a 2000-token prompt). Then the two ways a newcomer drives the package one call at a
time, each beside its raw cffi floor measured in the same run:
  per-seq append+commit loop  `m.append(i, [t]); m.commit(i, 1)` for each of the N sequences (no block
                              tables), under it its raw cffi floor: kvb_seq_append + kvb_seq_commit on a
                              prebuilt int64_t[1] (the C work + the bare call cost)
  replay, list tokens         a Mooncake-style request set through `c = m.allocate(i, tokens); m.commit(i,
                              len(tokens) - c); m.free(i)`, the token lists built outside the timing, in ns
                              per prompt token (--trace FILE: a Mooncake JSONL trace instead of the built-in
                              set of 64 requests of up to 16k tokens with shared 512-token-block prefixes);
                              under it its raw cffi floor (the same C calls on int64 arrays converted outside
                              the timing) and the package's conversion of the lists alone
--cpu-time times with the thread's CPU clock (time.thread_time) instead of the wall clock: on a shared
machine its minimum leaves out the time other processes took."""
from __future__ import annotations

import argparse
import json
import platform
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

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


def per_sequence_loop(n: int = 256, length: int = 2000, bs: int = 16, reps: int = 200) -> dict:
    """The per-sequence decode loop without block tables (append + commit per sequence) and its raw cffi
    floor, alternated step by step on one manager: (median, min) us per step of n sequences."""
    m = _manager(n, length, bs, 2 * reps)
    lib, ffi = _lib.lib, _lib.ffi
    h, tok = m._h, ffi.new("int64_t[]", 1)
    append, commit = lib.kvb_seq_append, lib.kvb_seq_commit
    seqs = range(n)

    def package(t: int) -> None:
        for i in seqs:
            m.append(i, [t])
            m.commit(i, 1)

    def raw(t: int) -> None:
        tok[0] = t
        for i in seqs:
            append(h, i, tok, 1)
            commit(h, i, 1)

    times: Dict[str, List[float]] = {"per_seq_loop_us": [], "per_seq_loop_raw_us": []}
    clock = CLOCK
    for t in range(reps):
        for key, step in (("per_seq_loop_us", package), ("per_seq_loop_raw_us", raw))[:: 1 if t % 2 else -1]:
            t0 = clock()
            step(t)
            times[key].append(clock() - t0)
    m.close()
    return {k: (sorted(v)[len(v) // 2] * 1e6, min(v) * 1e6) for k, v in times.items()}


Request = Tuple[List[int], int]  # (hash ids of the 512-token blocks, prompt length)


def builtin_requests(num: int = 64, seed: int = 1) -> List[Request]:
    """A Mooncake-like request set: each prompt starts with one of 8 shared prefixes (1-8 blocks of 512
    tokens, the first prefixes the most popular), then 0-24 blocks of its own, the last one cut short."""
    rng = np.random.default_rng(seed)
    prefixes = [list(range(10 * p, 10 * p + int(rng.integers(1, 9)))) for p in range(8)]
    own = 1000
    out: List[Request] = []
    for _ in range(num):
        ids = prefixes[min(int(rng.geometric(0.35)) - 1, 7)] + list(range(own, own + int(rng.integers(0, 25))))
        own += 25
        out.append((ids, len(ids) * 512 - int(rng.integers(0, 512))))
    return out


def trace_requests(path: str) -> List[Request]:
    """The requests of a Mooncake JSONL trace (hash_ids, input_length), in file order."""
    with open(path) as f:
        return [(r["hash_ids"], r["input_length"]) for r in map(json.loads, f) if r["input_length"] > 0]


def replay(requests: List[Request], bs: int = 16, reps: int = 5) -> dict:
    """allocate(list) + commit + free of every request in order on a pool that holds them all (prompt token i
    of a request is hash_ids[i // 512] * 512 + i % 512, as `kvblock replay` expands a trace), against the
    same C calls on int64 arrays and the conversion alone; each repetition on fresh managers, the three
    alternated. (median, min) ns per prompt token, and the minimum seconds for the whole set."""
    lib, ffi = _lib.lib, _lib.ffi
    blocks: Dict[int, List[int]] = {}  # one list per 512-token block, shared as a tokenizer's output is not

    def tokens(r: Request) -> List[int]:
        out: List[int] = []
        for hid in r[0]:
            b = blocks.get(hid)
            if b is None:
                b = blocks[hid] = list(range(hid * 512, hid * 512 + 512))
            out += b
        del out[r[1]:]
        return out

    pool = sum(-(-n // bs) for _, n in requests) + 16
    total = sum(n for _, n in requests)
    convert = _convert.int64_ptr

    def package(m: Optional[kvblock.Manager]) -> Tuple[float, int]:
        assert m is not None
        spent, cached, clock = 0.0, 0, CLOCK
        for i, r in enumerate(requests):
            toks = tokens(r)
            t0 = clock()
            c = m.allocate(i, toks)
            m.commit(i, len(toks) - c)
            m.free(i)
            spent += clock() - t0
            cached += c
        return spent, cached

    def raw(m: Optional[kvblock.Manager]) -> Tuple[float, int]:
        assert m is not None
        spent, cached, clock = 0.0, 0, CLOCK
        h, got = m._h, ffi.new("size_t*")
        for i, r in enumerate(requests):
            arr = np.array(tokens(r), np.int64)
            ptr, n = ffi.from_buffer("int64_t[]", arr), len(arr)
            t0 = clock()
            lib.kvb_seq_allocate_ex(h, i, ptr, n, ffi.NULL, got)
            lib.kvb_seq_commit(h, i, n - got[0])
            lib.kvb_seq_free(h, i)
            spent += clock() - t0
            cached += got[0]
        return spent, cached

    def conversion(m: Optional[kvblock.Manager]) -> Tuple[float, int]:
        spent, clock = 0.0, CLOCK
        for r in requests:
            toks = tokens(r)
            t0 = clock()
            convert(toks)
            spent += clock() - t0
        return spent, 0

    cases = [("replay_ns", package), ("replay_raw_ns", raw), ("replay_convert_ns", conversion)]
    times: Dict[str, List[float]] = {key: [] for key, _ in cases}
    cached: Dict[str, int] = {}
    for rep in range(reps):
        for key, case in cases[rep % 3:] + cases[: rep % 3]:
            m = kvblock.Manager(num_blocks=pool, block_size=bs) if case is not conversion else None
            spent, got = case(m)
            if m is not None:
                m.close()
                cached[key] = got
            times[key].append(spent)
    assert cached["replay_ns"] == cached["replay_raw_ns"], cached  # the same work
    out: Dict[str, Any] = {k: (sorted(v)[len(v) // 2] * 1e9 / total, min(v) * 1e9 / total) for k, v in times.items()}
    out["replay_set"] = (len(requests), total, cached["replay_ns"], {k: min(v) for k, v in times.items()})
    return out


def main() -> None:
    p = argparse.ArgumentParser(prog="python examples/bench.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seqs", type=int, default=256)
    p.add_argument("--tokens", type=int, default=2000)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--cpu-time", action="store_true", help="time with the thread's CPU clock (time.thread_time)")
    p.add_argument("--trace", help="replay this Mooncake JSONL trace instead of the built-in request set")
    p.add_argument("--replay-reps", type=int, help="repetitions of the replay (default: 10, 1 with --trace)")
    a = p.parse_args()
    global CLOCK
    if a.cpu_time:
        CLOCK = time.thread_time
    r = run(a.seqs, a.tokens, a.block_size, a.reps)
    r.update(per_sequence_loop(a.seqs, a.tokens, a.block_size, a.reps))
    replay_reps = a.replay_reps or (1 if a.trace else 10)
    r.update(replay(trace_requests(a.trace) if a.trace else builtin_requests(), a.block_size, replay_reps))
    print(f"decode step, {a.seqs} sequences of ~{a.tokens} tokens, block size {a.block_size} "
          f"({platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"{'thread CPU time' if a.cpu_time else 'wall clock'})")
    rows = [("per_sequence_us", "per-sequence calls", "us/step", per_sequence_reps(a.reps)),
            ("batched_us", "batched, numpy tokens", "us/step", a.reps),
            ("batched_list_us", "batched, list tokens", "us/step", a.reps),
            ("batched_list_array_ids_us", "batched, list tokens, array ids", "us/step", a.reps),
            ("raw_cffi_us", "raw cffi floor", "us/step", a.reps),
            ("append_commit_us", "append + commit, 1 seq", "us/pair", a.reps),
            ("token_list_ns", f"token list -> int64 ({a.tokens})", "ns/token", a.reps),
            ("per_seq_loop_us", "per-seq append+commit loop", "us/step", a.reps),
            ("per_seq_loop_raw_us", "  raw cffi floor, same calls", "us/step", a.reps),
            ("replay_ns", "replay, list tokens", "ns/token", replay_reps),
            ("replay_raw_ns", "  raw cffi floor, int64 tokens", "ns/token", replay_reps),
            ("replay_convert_ns", "  token lists -> int64 alone", "ns/token", replay_reps)]
    for key, label, unit, reps in rows:
        med, low = r[key]
        print(f"  {label:<31}: median {med:9.2f} {unit:<8}, min {low:9.2f}  ({reps} repetitions)")
    print("  (raw cffi floor: the batched step's three C calls on prebuilt pointers, i.e. the C work + bare call "
          "cost; each 'raw cffi floor, same calls' row: the C calls of the row above it, likewise)")
    num, total, cached, spent = r["replay_set"]
    print(f"  (replay: {a.trace or 'built-in set'}, {num:,} requests, {total:,} prompt tokens, {cached:,} cached; "
          f"min {spent['replay_ns']:.3f} s, raw cffi {spent['replay_raw_ns']:.3f} s, conversion "
          f"{spent['replay_convert_ns']:.3f} s)")


if __name__ == "__main__":
    main()
