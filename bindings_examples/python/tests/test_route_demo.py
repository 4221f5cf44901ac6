"""The routing demo on a small multi-turn trace, end to end through Dynamo's indexer: KV-aware routing
keeps each conversation on the engine that caches it, so it hits more than round-robin; the greedy
variant piles everything on one engine; the bounded one keeps load within its bound."""
import argparse

import pytest

pytest.importorskip("zmq", reason="pyzmq not installed (pip install pyzmq msgpack)")
pytest.importorskip("msgpack", reason="msgpack not installed (pip install pyzmq msgpack)")

import indexer_client as ic  # noqa: E402  (examples/, on sys.path through conftest.py)
import route_demo  # noqa: E402
import serve_route_demo  # noqa: E402

_PY = ic.indexer_python()
pytestmark = pytest.mark.skipif(
    _PY is None,
    reason=f"SKIP dynamo: ai-dynamo-runtime not installed (pip install ai-dynamo-runtime=={ic.PINNED_VERSION})")


def conversation_trace(path, conversations=7, turns=4):
    """serve_route_demo's multi-turn trace with short outputs (7 conversations: round-robin does not keep
    a conversation on one engine by accident)."""
    serve_route_demo.conversation_trace(str(path), conversations, turns, input_less=100, output_length=20)


def test_kv_routing_beats_round_robin(tmp_path):
    trace_path = tmp_path / "conv.jsonl"
    conversation_trace(trace_path)
    trace = route_demo.load_trace(trace_path)
    args = argparse.Namespace(instances=4, num_blocks=4096, block_size=16, epsilon=0.25, progress=False,
                              llmd_topics=False)
    with ic.DynamoIndexer(_PY) as idx:
        res = {p: route_demo.run_policy(p, trace, args, idx, f"demo-{p}", 100 * (i + 1))
               for i, p in enumerate(["rr", "kv", "kv-greedy", "one"])}

    def hits(r):
        return sum(p[3] for p in r["per"]) / sum(p[2] for p in r["per"])

    def loads(r):
        return [p[4] for p in r["per"]]

    # one engine with every block caches each earlier turn: the most any routing can reach here
    assert hits(res["kv"]) > hits(res["rr"])
    assert hits(res["kv"]) <= hits(res["one"])
    assert max(loads(res["kv"])) <= 1.25 * sum(loads(res["kv"])) / 4 + max(
        p[2] for p in res["kv"]["per"])  # within the bound, up to one request's overshoot
    assert [p[1] for p in res["kv-greedy"]["per"]].count(0) == 3  # the hot spot
    assert all(r["dropped"] == 0 for r in res.values())


def test_llmd_topics_route_the_same(tmp_path):
    """--llmd-topics: engines publish on kv@engine-<id>@<model> with positional events; the indexer reads
    them and the kv policy routes exactly as with the plain topic."""
    trace_path = tmp_path / "conv.jsonl"
    conversation_trace(trace_path, conversations=5, turns=3)
    trace = route_demo.load_trace(trace_path)
    res = {}
    with ic.DynamoIndexer(_PY) as idx:
        for i, llmd in enumerate((False, True)):
            args = argparse.Namespace(instances=3, num_blocks=4096, block_size=16, epsilon=0.25, progress=False,
                                      llmd_topics=llmd)
            res[llmd] = route_demo.run_policy("kv", trace, args, idx, f"demo-topics-{i}", 1000 * (i + 1))
    assert res[True]["topics"] == [f"kv@engine-{2000 + k + 1}@demo-topics-1" for k in range(3)]
    assert res[False]["topics"] == [""] * 3
    assert [p[1:] for p in res[True]["per"]] == [p[1:] for p in res[False]["per"]]
    assert sum(p[3] for p in res[True]["per"]) > 0 and res[True]["dropped"] == 0
