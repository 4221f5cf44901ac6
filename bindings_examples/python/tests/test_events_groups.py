"""Events of a hybrid-model manager (KV cache groups) reach the wire, each with its group, as vLLM's
events of hybrid models carry them (issue 20 item 1: flush() raised for every manager with >= 2 groups,
since Manager.drain_events called the plain kvb_drain_events, which such a manager refuses)."""
import numpy as np
import pytest

zmq = pytest.importorskip("zmq", reason="pyzmq not installed (pip install pyzmq msgpack)")
pytest.importorskip("msgpack", reason="msgpack not installed (pip install pyzmq msgpack)")

import kvblock  # noqa: E402
from kvblock import events as ev  # noqa: E402
from test_events_wire import chain_hashes, recv, subscribe  # noqa: E402

BS = 4
GROUPS = [("window", 8, 0), ("full",)]


def hybrid(**kw):
    return kvblock.Manager(32, BS, events=True, groups=GROUPS, **kw)


def test_drain_events_gives_each_event_its_group():
    with hybrid() as m:
        assert m.groups == (("window", 8, 0), ("full",))
        tokens = list(range(17))  # 4 full blocks
        m.allocate(1, tokens)
        m.commit(1, len(tokens))
        got, dropped = m.drain_events()
        assert dropped == 0
        stored = {(e.group, e.block_hash) for e in got if e.type == "stored"}
        # the full group stores every full block; the window group only those its window still holds
        assert {(1, h) for h in chain_hashes(tokens, BS)} <= stored
        assert {g for g, _ in stored} == {0, 1}
    with kvblock.Manager(8, BS, events=True) as plain:  # without groups: group 0, as before
        plain.allocate(1, list(range(9)))
        plain.commit(1, 9)
        assert plain.groups == () and {e.group for e in plain.drain_events()[0]} == {0}


@pytest.mark.parametrize("encoding", ["map", "array"])
def test_publisher_sends_every_group_with_vllm_group_fields(encoding):
    m = hybrid()
    pub = ev.KvEventPublisher(m, endpoint="tcp://127.0.0.1:*", encoding=encoding)
    sub = subscribe(pub)
    try:
        tokens = list(range(17))
        m.allocate(1, tokens)
        m.commit(1, len(tokens))
        assert pub.flush() > 0  # raised KvbError (BAD_STATE) before
        _, _, events, _ = recv(sub)
        if encoding == "array":  # [tag, hashes, parent, tokens, bs, lora_id, medium, lora_name, extra, group...]
            events = [dict(type=e[0], block_hashes=e[1], medium=e[6], extra_keys=e[8], group_idx=e[9],
                           kv_cache_spec_kind=e[10], kv_cache_spec_sliding_window=(e[11] if len(e) > 11 else None))
                      for e in events]
        assert all(e["type"] == "BlockStored" for e in events)
        by_group = {}
        for e in events:
            by_group.setdefault(e["group_idx"], []).extend(e["block_hashes"])
            if e["group_idx"] == 0:
                assert e["kv_cache_spec_kind"] == "sliding_window" and e["kv_cache_spec_sliding_window"] == 8
            else:
                assert e["kv_cache_spec_kind"] == "full_attention"
                assert e.get("kv_cache_spec_sliding_window") is None
        assert by_group[1] == chain_hashes(tokens, BS)
        assert set(by_group[0]) <= set(by_group[1]) and by_group[0]
        # a reset removes every group's blocks: BlockRemoved events carry the group too
        m.free(1)
        m.reset_prefix_cache()
        pub.flush()
        _, _, events, _ = recv(sub)
        removed = [e for e in events if (e["type"] if encoding == "map" else e[0]) == "BlockRemoved"]
        groups = {e["group_idx"] if encoding == "map" else e[3] for e in removed}
        assert groups <= {0, 1}
    finally:
        sub.close()
        pub.close()
        m.close()


def test_events_of_one_chain_in_two_groups_never_merge():
    """Blocks of different groups are different cache entries: consecutive events of two groups stay apart
    even where the second continues the first's hash chain."""
    E = kvblock.Event
    h = chain_hashes(list(range(8)), BS)
    raw = [E("stored", h[0], None, None, None, np.arange(4), 0, kvblock.Medium.DEVICE, 1),
           E("stored", h[1], h[0], None, None, np.arange(4, 8), 1, kvblock.Medium.DEVICE, 0)]
    out = ev.group_events(raw, BS, groups=(("window", 8, 0), ("full",)))
    assert [(e["group_idx"], e["block_hashes"]) for e in out] == [(1, [h[0]]), (0, [h[1]])]
    plain = ev.group_events(raw, BS)  # no groups: one chain, no group fields (the wire before groups)
    assert len(plain) == 1 and "group_idx" not in plain[0] and len(ev.to_array_form(plain[0])) == 8
