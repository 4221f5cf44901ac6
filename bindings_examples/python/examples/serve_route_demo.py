"""Many engines, one workload: servers (python -m kvblock.engine serve) on loopback that publish KV events
and share a store tier, and a router in front that sends each request to the server holding its longest
cached prefix, scored by NVIDIA Dynamo's KV indexer (as route_demo.py uses it), against round-robin and
against one server with all the servers' blocks. The load is loadgen.py's replay of a trace (token-id
prompts, streamed); per policy it reports the prefix-cache hit rate per tier (from the servers' /metrics),
time to first token and throughput.

Router "kv": Dynamo's scores (cached prefix tokens per server), the best server among those with at most
(1 + epsilon) x the mean requests in flight (+1), ties by fewer in flight (bounded load, as route_demo.py).

  python3 examples/serve_route_demo.py --model-dir DIR --servers 2 --trace TRACE --limit 96
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any, Dict, List, Optional, Sequence, Tuple

import indexer_client
import loadgen

MODEL = "default"


class ServerProc:
    def __init__(self, a: argparse.Namespace, num_blocks: int, store: str, events_port: int) -> None:
        self.events = f"tcp://127.0.0.1:{events_port}"
        cmd = [sys.executable, "-m", "kvblock.engine", "serve", "--model", a.model_dir, "--port", "0",
               "--device", a.device, "--num-blocks", str(num_blocks), "--block-size", str(a.block_size),
               "--max-seqs", str(a.max_seqs), "--host-blocks", str(a.host_blocks), "--host-cache",
               "--store", store, "--kv-events", self.events]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seen = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            seen.append(line)
            m = re.search(r"on (http://[\d.]+:\d+)", line)
            if m:
                self.url = m.group(1)
                return
        raise RuntimeError("a server did not start:\n" + "".join(seen))

    def metrics(self) -> Dict[str, float]:
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
            text = r.read().decode()
        out: Dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, v = line.rsplit(" ", 1)
                out[re.sub(r'model_name="[^"]*",?', "", name).replace("{}", "")] = float(v)
        return out

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def conversation_trace(path: str, conversations: int, turns: int, input_less: int = 0,
                       output_length: int = 1000) -> None:
    """A multi-turn trace: every conversation starts with a shared system block (hash id 0) and each turn
    repeats the previous turn's prompt and adds two blocks; the turns of different conversations
    interleave (an odd count keeps round-robin from pinning a conversation to a server by accident).
    A turn's input is its blocks' 512 tokens each, less input_less."""
    history: Dict[int, List[int]] = {}
    next_id = 1
    with open(path, "w") as f:
        for t in range(turns):
            for c in range(conversations):
                ids = history.get(c, [0]) + [next_id, next_id + 1]
                next_id += 2
                history[c] = ids
                f.write(json.dumps({"timestamp": 0, "input_length": len(ids) * 512 - input_less,
                                    "output_length": output_length, "hash_ids": ids}) + "\n")


def pick(policy: str, scores: Dict[int, int], in_flight: List[int], turn: int, epsilon: float) -> int:
    n = len(in_flight)
    if policy != "kv":
        return turn % n
    bound = (1 + epsilon) * sum(in_flight) / n + 1
    eligible = [i for i in range(n) if in_flight[i] <= bound] or list(range(n))
    return max(eligible, key=lambda i: (scores.get(i, 0), -in_flight[i], -i))


async def replay(policy: str, a: argparse.Namespace, reqs: Sequence[loadgen.LoadRequest], urls: List[str],
                 indexer: Optional[indexer_client.DynamoIndexer]) -> Tuple[List[loadgen.Result], float]:
    sem = asyncio.Semaphore(a.concurrency)
    in_flight = [0] * len(urls)
    turns = itertools.count()
    start = time.perf_counter()

    async def one(r: loadgen.LoadRequest) -> loadgen.Result:
        delay = r.arrival - (time.perf_counter() - start)
        if delay > 0:
            await asyncio.sleep(delay)
        async with sem:
            scores: Dict[int, int] = {}
            if policy == "kv" and indexer is not None:
                scores = await asyncio.to_thread(indexer.scores, r.prompt, MODEL)
            i = pick(policy, scores, in_flight, next(turns), a.epsilon)
            in_flight[i] += 1
            try:
                return await loadgen.send(urls[i], None, r, None)
            finally:
                in_flight[i] -= 1

    results = list(await asyncio.gather(*(one(r) for r in reqs)))
    return results, time.perf_counter() - start


def run_policy(policy: str, a: argparse.Namespace, reqs: Sequence[loadgen.LoadRequest]) -> Dict[str, Any]:
    n = 1 if policy == "one" else a.servers
    blocks = a.num_blocks * (a.servers if policy == "one" else 1)
    with tempfile.TemporaryDirectory() as store_dir:
        servers: List[ServerProc] = []
        indexer = None
        try:
            servers = [ServerProc(a, blocks, f"dir:{store_dir}", indexer_client.free_port()) for _ in range(n)]
            if policy == "kv":
                indexer = indexer_client.DynamoIndexer(python=a.dynamo_python)
                for i, s in enumerate(servers):
                    indexer.register(i, s.events, a.block_size, model_name=MODEL)
                indexer.wait_listening(n, MODEL)
            results, elapsed = asyncio.run(replay(policy, a, reqs, [s.url for s in servers], indexer))
            ms = [s.metrics() for s in servers]
        finally:
            if indexer is not None:
                indexer.stop()
            for s in servers:
                s.stop()
    q = sum(m["kvblock_prefix_cache_queries_total"] for m in ms)
    hits = {t: sum(m[f'kvblock_prefix_cache_hits_total{{tier="{t}"}}'] for m in ms) for t in ("device", "host",
                                                                                              "store")}
    out = loadgen.summary(results, elapsed)
    out.update(policy=policy, servers=n, blocks=blocks, queried=q, hits=hits,
               hit_rate={t: v / q if q else 0.0 for t, v in hits.items()},
               per_server=[int(m["kvblock_requests_total"]) for m in ms])
    return out


def main(argv: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--policies", default="kv,rr,one")
    p.add_argument("--num-blocks", type=int, default=256, help="device blocks per server ('one': x servers)")
    p.add_argument("--host-blocks", type=int, default=256)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-seqs", type=int, default=16)
    p.add_argument("--device", default="cpu")
    p.add_argument("--epsilon", type=float, default=0.5)
    p.add_argument("--dynamo-python", default=None, help="interpreter with ai-dynamo-runtime (default: this one)")
    p.add_argument("--trace", default=str(loadgen.DEFAULT_TRACE))
    p.add_argument("--conversations", type=int, default=0, metavar="C",
                   help="instead of --trace: C interleaved multi-turn conversations (conversation_trace)")
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--limit", type=int, default=96)
    p.add_argument("--rate", default="inf")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--block-tokens", type=int, default=16)
    p.add_argument("--max-prompt", type=int, default=512)
    p.add_argument("--max-output", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    a = p.parse_args(argv)
    la = argparse.Namespace(trace=a.trace, limit=a.limit, rate=a.rate, time_scale=1.0, seed=0, namespace=0,
                            block_tokens=a.block_tokens, max_prompt=a.max_prompt, max_output=a.max_output,
                            vocab=a.vocab, reserved_tokens=16)
    if a.conversations:
        la.trace = os.path.join(tempfile.mkdtemp(), f"conversations_{a.conversations}x{a.turns}.jsonl")
        conversation_trace(la.trace, a.conversations, a.turns)
    reqs = loadgen.load_requests(la)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    out = []
    print(f"{len(reqs)} requests of {os.path.basename(la.trace)} ({a.block_tokens} tokens per hash id, outputs <= "
          f"{a.max_output}), {a.concurrency} in flight; {a.servers} servers x {a.num_blocks} blocks of "
          f"{a.block_size} + {a.host_blocks} host blocks, a shared dir: store\n")
    print("| policy | requests per server (failed) | prefix hit rate: all (device / host / store) | "
          "TTFT mean / p50 / p90 (ms) | output tokens/s |")
    print("| --- | --- | --- | --- | ---: |")
    for policy in a.policies.split(","):
        s = run_policy(policy, a, reqs)
        out.append(s)
        hr, t = s["hit_rate"], s["ttft_s"]
        name = policy if policy != "one" else f"one server ({a.servers}x blocks)"
        print(f"| {name} | {' / '.join(map(str, s['per_server']))} ({s['failed']}) | "
              f"{100 * sum(hr.values()):.1f}% ({100 * hr['device']:.1f}% / {100 * hr['host']:.1f}% / "
              f"{100 * hr['store']:.1f}%) | {1000 * t['mean']:.0f} / {1000 * t['p50']:.0f} / {1000 * t['p90']:.0f} | "
              f"{s['output_throughput']:.1f} |", flush=True)
        for e in s["errors"]:
            print(f"  error: {e}")
    return out


if __name__ == "__main__":
    main()
