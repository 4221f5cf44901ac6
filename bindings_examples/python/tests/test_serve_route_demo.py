"""examples/serve_route_demo.py's parts that need no server: the router's choice (best Dynamo score among
the servers within the load bound, round-robin otherwise) and the multi-turn conversation trace (each turn
extends its conversation's previous prompt; turns of different conversations interleave)."""
import json

import serve_route_demo as demo


def test_pick_takes_the_best_score_within_the_load_bound() -> None:
    assert demo.pick("kv", {0: 64, 1: 128}, [0, 0], 0, 0.5) == 1
    assert demo.pick("kv", {}, [3, 1], 0, 0.5) == 1                 # no score: the less loaded
    assert demo.pick("kv", {0: 999, 1: 16}, [9, 1], 0, 0.5) == 1   # 9 > 1.5 x mean 5 + 1: over the bound
    assert [demo.pick("rr", {0: 999}, [0, 0], t, 0.5) for t in range(4)] == [0, 1, 0, 1]


def test_conversation_trace_extends_each_conversation(tmp_path) -> None:
    path = tmp_path / "c.jsonl"
    demo.conversation_trace(str(path), conversations=3, turns=3)
    rows = [json.loads(line)["hash_ids"] for line in path.read_text().splitlines()]
    assert len(rows) == 9 and all(r[0] == 0 for r in rows)
    for i in range(3, 9):
        assert rows[i][:-2] == rows[i - 3] and len(rows[i]) == len(rows[i - 3]) + 2
    assert len({r[1] for r in rows[:3]}) == 3
