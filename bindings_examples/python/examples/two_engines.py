"""Two engines, one store: a prefill engine and a decode engine, two processes, hand KV blocks to each other
through the store tier (kvblock.store), and a restarted engine finds the prefixes it stored before.

    python examples/two_engines.py                                    # a temporary directory store
    python examples/two_engines.py --store redis://127.0.0.1:6379/0   # a Redis (or Valkey) server
    python examples/two_engines.py --store dir:/shared/kv             # a file system shared by machines

1. A single engine with no store runs the requests: the reference outputs.
2. The prefill engine (a process) computes the prompts (one token each) with --store; its blocks go to
   the store as they reach its host tier, and at exit the rest (StoreTier.flush).
3. The decode engine (another process, empty caches) runs the same requests in full: its prompts come from
   the store (store hit tokens; only each prompt's last block, which is never looked up, is computed) and
   its outputs must be token-exact with the reference.
4. Restart: an engine process runs new requests and exits; the same engine started again (a new process)
   finds their prefixes in the store, and its outputs match the first run's.
Each engine is `python examples/two_engines.py --child ROLE` (JSON on stdout), so the engines share nothing
but the store. Exits 1 if an output differs or a decode engine found nothing in the store."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Tuple

import numpy as np

from kvblock.engine import Engine, EngineConfig, Model, ModelConfig, Request


def requests(a: argparse.Namespace, family_seed: int, max_tokens: int) -> List[Request]:
    rng = np.random.default_rng(family_seed)
    vocab = ModelConfig().vocab
    shared = [rng.integers(0, vocab, a.shared_prefix).tolist() for _ in range(a.families)]
    return [Request(r, shared[r % a.families] + rng.integers(0, vocab, a.prompt).tolist(), max_tokens)
            for r in range(a.requests)]


def run_engine(a: argparse.Namespace, store: Any, family_seed: int, max_tokens: int, flush: bool) -> Dict[str, Any]:
    model = Model(ModelConfig(num_layers=a.layers, seed=a.seed))
    eng = Engine(model, EngineConfig(num_blocks=a.num_blocks, block_size=a.block_size,
                                     num_host_blocks=a.host_blocks, host_cache=True, store=store,
                                     max_num_seqs=a.max_seqs, max_batched_tokens=a.budget))
    for req in requests(a, family_seed, max_tokens):
        eng.add_request(req)
    finished = eng.run()
    st = eng.mgr.stats()  # before the flush, whose placeholder allocations would count as prompts
    flushed = eng.flush_to_store()
    st["store_put_blocks"] = eng.mgr.stats()["store_put_blocks"]
    eng.close()
    return {"outputs": {str(r): [s.output for s in seqs] for r, seqs in sorted(finished.items())},
            "flushed": flushed if flush else 0,
            "stats": {k: st[k] for k in ("query_tokens", "hit_tokens", "computed_tokens", "store_hit_tokens",
                                         "store_get_blocks", "store_get_failures", "store_recomputed_tokens",
                                         "store_put_blocks", "store_put_failures")}}


def child(a: argparse.Namespace, role: str) -> Dict[str, Any]:
    """One engine process. prefill: the prompts of the first family set, one token each; decode: the same
    in full; first / restarted: the second family set, in full."""
    family, tokens = (a.seed, 1) if role == "prefill" else (a.seed, a.max_tokens) if role == "decode" \
        else (a.seed + 1, a.max_tokens)
    return run_engine(a, a.store, family, tokens, flush=True)


def spawn(a: argparse.Namespace, role: str) -> Dict[str, Any]:
    argv = [sys.executable, __file__, "--child", role] + [x for x in a.argv if x != "--child"]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"the {role} engine failed ({r.returncode}):\n{r.stderr}")
    out: Dict[str, Any] = json.loads(r.stdout)
    return out


def parse(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", help="dir:PATH or redis://host:port/db (default: a fresh temporary directory)")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--families", type=int, default=2, help="distinct shared prefixes")
    p.add_argument("--shared-prefix", type=int, default=96)
    p.add_argument("--prompt", type=int, default=40, help="unique tokens per request after the shared prefix")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--num-blocks", type=int, default=256)
    p.add_argument("--host-blocks", type=int, default=64)
    p.add_argument("--max-seqs", type=int, default=16)
    p.add_argument("--budget", type=int, default=256)
    p.add_argument("--child", choices=["prefill", "decode", "first", "restarted"], help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.argv = argv
    return a


def report(name: str, r: Dict[str, Any]) -> str:
    st = r["stats"]
    return (f"{name:<17} {st['query_tokens']:>6} prompt tokens: {st['store_hit_tokens']:>5} from the store "
            f"({st['store_get_blocks']} blocks, {st['store_get_failures']} failed, {st['store_recomputed_tokens']} "
            f"recomputed), {st['hit_tokens'] - st['store_hit_tokens']:>5} device/host hits, "
            f"{st['computed_tokens']:>5} computed; {st['store_put_blocks']} blocks put ({r['flushed']} at exit)")


def spawn_reported(a: argparse.Namespace, role: str, name: str) -> Dict[str, Any]:
    """The role's engine run in a child process, its report printed under name."""
    r = spawn(a, role)
    print(report(name, r))
    return r


def same_and_hit(run: Dict[str, Any], earlier: Dict[str, Any]) -> Tuple[bool, int]:
    """Whether run's outputs are earlier's, and the prompt tokens run found in the store."""
    return run["outputs"] == earlier["outputs"], run["stats"]["store_hit_tokens"]


def main(argv: List[str]) -> int:
    a = parse(argv)
    if a.child:
        print(json.dumps(child(a, a.child)))
        return 0
    tmp = None
    if not a.store:
        tmp = tempfile.TemporaryDirectory(prefix="kvblock-store-")
        a.store = f"dir:{tmp.name}"
        a.argv = a.argv + ["--store", a.store]
    print(f"store: {a.store}; {a.requests} requests x ({a.shared_prefix} shared of {a.families} families + "
          f"{a.prompt} own) tokens -> {a.max_tokens} tokens, block size {a.block_size}")
    ok = True
    reference = run_engine(a, None, a.seed, a.max_tokens, flush=False)
    print(report("single engine:", reference))
    spawn_reported(a, "prefill", "prefill engine:")
    decode = spawn_reported(a, "decode", "decode engine:")
    same, hit = same_and_hit(decode, reference)
    print(f"decode engine:    outputs {'token-exact with' if same else 'DIFFER FROM'} the single engine's; "
          f"{hit} prompt tokens served from the prefill engine's blocks, "
          f"{decode['stats']['computed_tokens']} computed (single engine: {reference['stats']['computed_tokens']})")
    ok &= same and hit > 0
    first = spawn_reported(a, "first", "engine:")
    same, hit = same_and_hit(spawn_reported(a, "restarted", "engine restarted:"), first)
    print(f"restarted engine: found {hit} prompt tokens of its earlier run in the store; outputs "
          f"{'token-exact with' if same else 'DIFFER FROM'} the earlier run's")
    ok &= same and hit > 0
    if tmp is not None:
        tmp.cleanup()
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
