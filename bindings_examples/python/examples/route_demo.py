"""KV-aware routing across libkvblock engines with NVIDIA Dynamo's real KV indexer, on a Mooncake trace.

N engines (one libkvblock manager each, in this process) publish their KV events with
kvblock.events.KvEventPublisher; one `python -m dynamo.indexer` subscribes to all of them. For every
request of the trace a router picks an engine:
  rr       round-robin;
  kv       Dynamo's score (cached prefix tokens per engine, from POST /query), the best engine among
           those whose load is at most (1 + epsilon) x the mean load, ties by lower load then lower id
           (bounded-load routing: without the bound, the one engine that first cached the prefix every
           request shares, such as a common system prompt, would receive every new conversation);
  kv-greedy the best score, ties by load, no bound (shows that hot spot);
  one      for reference, a single engine with all N engines' blocks (no routing at all).
Load = tokens the engine has computed so far (uncached prompt tokens + generated tokens): the work
routing moves around. The engine then replays the request like `kvblock replay` does (allocate the
prompt, commit its uncached part, append and commit the generated tokens, free) and publishes.

Before routing request r+1, the router waits (bounded) until the indexer's score for request r on its
engine equals that engine's own cached count, so each decision sees every earlier event: results do
not depend on timing.

Token expansion (the trace README's): prompt token i = hash_ids[i // 512] * 512 + i % 512. Generated
token k of request r = 2^31 + r * 2048 + k (unique per request and below 2^32, because the wire format
carries u32 token ids; the replay tool's 2^40-based ids would not fit).

With --llmd-topics every engine publishes the way an llm-d router reads it: topic kv@engine-<id>@<model>
(llm-d takes pod and model from it), positional events (encoding "array"); Dynamo's indexer subscribes to
every topic and reads both encodings, so the routing is the same.

Usage: python3 examples/route_demo.py [--trace PATH] [--instances 4] [--num-blocks 131072] [--limit N]
                                     [--llmd-topics]
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

import indexer_client  # this folder's module (sys.path[0] when run as a script)
from kvblock import Manager, events

HASH_BLOCK = 512
GEN_BASE, GEN_STRIDE = 2**31, 2048
# In a source checkout beside ../shared (the project's CI layout); elsewhere pass --trace.
DEFAULT_TRACE = Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"


# One request of the trace: (hash_ids, input_length, output_length).
TraceRequest = Tuple[List[int], int, int]


def load_trace(path: Any, limit: Optional[int] = None) -> List[TraceRequest]:
    out: List[TraceRequest] = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            out.append((r["hash_ids"], r["input_length"], r["output_length"]))
            if limit and len(out) >= limit:
                break
    return out


def prompt_tokens(hash_ids: Sequence[int], n: int) -> np.ndarray:
    ids = np.asarray(hash_ids, np.int64)
    return (np.repeat(ids * HASH_BLOCK, HASH_BLOCK) + np.tile(np.arange(HASH_BLOCK), len(ids)))[:n]


def generated_tokens(r: int, n: int) -> np.ndarray:
    if n > GEN_STRIDE:
        raise ValueError(f"request {r}: {n} generated tokens exceed the {GEN_STRIDE} this expansion allows")
    return np.arange(GEN_BASE + r * GEN_STRIDE, GEN_BASE + r * GEN_STRIDE + n, dtype=np.int64)


class Engine:
    """One libkvblock manager with events, its publisher, and its counters."""

    def __init__(self, instance_id: int, num_blocks: int, block_size: int, model: Optional[str] = None) -> None:
        """model: publish on llm-d's topic for this engine and model (positional events); None: topic ""."""
        self.m = Manager(num_blocks, block_size, events=True)
        self.id = instance_id
        topic = events.llmd_topic(f"engine-{instance_id}", model) if model is not None else ""
        self.pub = events.KvEventPublisher(self.m, endpoint="tcp://127.0.0.1:*", topic=topic,
                                           encoding="array" if model is not None else "map")
        self.requests = self.prompt_tokens = self.cached_tokens = self.computed_tokens = 0

    def serve(self, seq_id: int, prompt: np.ndarray, generated: np.ndarray) -> int:
        """Replays one request; returns its prefix-cached prompt tokens."""
        m = self.m
        cached = m.allocate(seq_id, prompt)
        m.commit(seq_id, len(prompt) - cached)
        if len(generated):
            m.append(seq_id, generated)
            m.commit(seq_id, len(generated))
        m.free(seq_id)
        self.pub.flush()
        self.requests += 1
        self.prompt_tokens += len(prompt)
        self.cached_tokens += cached
        self.computed_tokens += len(prompt) - cached + len(generated)
        return cached

    def full_blocks_cached(self, tokens: np.ndarray) -> Optional[int]:
        """Tokens of `tokens`' full blocks this engine holds as a prefix (what the indexer should score)."""
        return self.m.can_allocate(np.append(tokens, 0))

    def close(self) -> None:
        self.pub.close()
        self.m.close()


def pick(policy: str, scores: Dict[int, int], engines: List[Engine], rr_next: int, epsilon: float) -> Engine:
    if policy in ("rr", "one"):
        return engines[rr_next % len(engines)]
    loads = [e.computed_tokens for e in engines]
    bound = (1 + epsilon) * (sum(loads) / len(loads)) if policy == "kv" else float("inf")
    eligible = [e for e in engines if e.computed_tokens <= bound] or engines
    return max(eligible, key=lambda e: (scores.get(e.id, 0), -e.computed_tokens, -e.id))


def wait_applied(indexer: indexer_client.DynamoIndexer, engine: Engine, tokens: np.ndarray, model: str,
                 timeout: float = 60.0) -> None:
    want = engine.full_blocks_cached(tokens)
    deadline = time.monotonic() + timeout
    while indexer.scores(tokens, model).get(engine.id, 0) != want:
        if time.monotonic() > deadline:
            raise RuntimeError(f"indexer never reflected engine {engine.id}'s events ({want} tokens expected)\n"
                               + indexer.log_tail())
        time.sleep(0.0005)


def run_policy(policy: str, trace: List[TraceRequest], args: argparse.Namespace,
               indexer: Optional[indexer_client.DynamoIndexer], model: str, id_base: int) -> Dict[str, Any]:
    topic_model = model if args.llmd_topics else None
    if policy == "one":
        engines = [Engine(id_base + 1, args.num_blocks * args.instances, args.block_size, topic_model)]
    else:
        engines = [Engine(id_base + i + 1, args.num_blocks, args.block_size, topic_model)
                   for i in range(args.instances)]
    try:
        uses_indexer = policy not in ("rr", "one")
        if uses_indexer:
            assert indexer is not None  # main() starts one for the policies that use it
            for e in engines:
                indexer.register(e.id, e.pub.bound_endpoint, args.block_size, model_name=model)
            for e in engines:
                if not e.pub.wait_for_subscribers(1, 60):
                    raise RuntimeError("the indexer never subscribed to engine %d" % e.id)
        t0 = time.monotonic()
        prev: Optional[Tuple[Engine, np.ndarray]] = None
        for r, (hash_ids, n_in, n_out) in enumerate(trace):
            prompt = prompt_tokens(hash_ids, n_in)
            gen = generated_tokens(r, n_out)
            scores: Dict[int, int] = {}
            if uses_indexer:
                assert indexer is not None  # main() starts one for the policies that use it
                if prev is not None:
                    wait_applied(indexer, *prev, model)
                scores = indexer.scores(prompt, model)
            e = pick(policy, scores, engines, r, args.epsilon)
            e.serve(r, prompt, gen)
            prev = (e, np.concatenate([prompt, gen]))
            if args.progress and (r + 1) % 1000 == 0:
                print(f"  {policy}: {r + 1}/{len(trace)} requests, {time.monotonic() - t0:.0f} s", file=sys.stderr)
        elapsed = time.monotonic() - t0
        for e in engines:
            if not e.pub.wait_sent(60):
                raise RuntimeError(f"engine {e.id}: events still queued after 60 s")
        dropped = sum(e.pub.stats()["dropped_events"] for e in engines)
        published = sum(e.pub.stats()["events"] for e in engines)
        return dict(policy=policy, elapsed=elapsed, dropped=dropped, published=published,
                    topics=[e.pub.topic.decode() for e in engines],
                    per=[(e.id, e.requests, e.prompt_tokens, e.cached_tokens, e.computed_tokens) for e in engines])
    finally:
        for e in engines:
            e.close()


def report(results: List[Dict[str, Any]], args: argparse.Namespace, n_requests: int) -> None:
    print(f"\n{n_requests} requests of {os.path.basename(args.trace)}, {args.instances} engines x "
          f"{args.num_blocks} blocks of {args.block_size} tokens, kv epsilon {args.epsilon}\n")
    print("| policy | prefix hit ratio | requests per engine | computed tokens per engine (M) | load spread max/mean |")
    print("| --- | ---: | --- | --- | ---: |")
    for res in results:
        per = res["per"]
        prompt = sum(p[2] for p in per)
        cached = sum(p[3] for p in per)
        comp = [p[4] for p in per]
        mean = sum(comp) / len(comp)
        name = res["policy"] if res["policy"] != "one" else f"one ({args.instances}x blocks)"
        print(f"| {name} | {100.0 * cached / prompt:.2f}% | {' / '.join(str(p[1]) for p in per)} | "
              f"{' / '.join(f'{c / 1e6:.1f}' for c in comp)} | {max(comp) / mean:.2f} |")
    print()
    for res in results:
        print(f"{res['policy']}: {res['elapsed']:.0f} s, {res['published']} wire events published, "
              f"{res['dropped']} dropped")


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python examples/route_demo.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=str(DEFAULT_TRACE), help="Mooncake trace (JSON lines with hash_ids)")
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--num-blocks", type=int, default=131072, help="blocks per engine")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--limit", type=int, default=0, help="first N requests only")
    ap.add_argument("--policies", default="rr,kv,kv-greedy,one")
    ap.add_argument("--epsilon", type=float, default=0.25, help="kv: load bound above the mean")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--llmd-topics", action="store_true",
                    help="publish on llm-d's topics kv@engine-<id>@<model> with positional events")
    args = ap.parse_args(argv)
    if not os.path.isfile(args.trace):
        ap.error(f"no trace at {args.trace}: pass --trace PATH (e.g. mooncake_conversation_trace.jsonl from "
                 "kvcache-ai/Mooncake, FAST25-release/traces)")
    trace = load_trace(args.trace, args.limit or None)
    policies = args.policies.split(",")
    for p in policies:
        if p not in ("rr", "kv", "kv-greedy", "one"):
            ap.error(f"unknown policy {p!r}")
    results = []
    indexer = indexer_client.DynamoIndexer() if any(p in ("kv", "kv-greedy") for p in policies) else None
    try:
        for i, p in enumerate(policies):
            # instance ids are global in the indexer: each policy's engines get their own
            results.append(run_policy(p, trace, args, indexer, f"route-demo-{i}", 100 * (i + 1)))
    finally:
        if indexer is not None:
            indexer.stop()
    report(results, args, len(trace))


if __name__ == "__main__":
    main()
