"""kvblock.events read the way llm-d reads vLLM's events: a SUB on the prefix "kv@", pod and model from the
topic "kv@<pod>@<model>", every event a positional array decoded by position with length guards, the cache
salt folded into the first block's extra features, replay answers of three frames [topic, seq, payload].

The decoder below is written from a reading of llm-d-kv-cache's vLLM adapter and llm-d-router's ZMQ
subscriber (2026); it is deliberately as strict as they are, so these tests fail where llm-d would drop a
batch, mis-attribute it, or never score a salted prompt."""
import pytest

zmq = pytest.importorskip("zmq", reason="pyzmq not installed (pip install pyzmq msgpack)")
msgpack = pytest.importorskip("msgpack", reason="msgpack not installed (pip install pyzmq msgpack)")

import event_helpers as S  # noqa: E402
from kvblock.cache_salts import CacheSalts  # noqa: E402
from test_events_wire import subscribe as wire_subscribe  # noqa: E402

ev = S.events
WAIT_MS = 10000
LLMD_PREFIX = b"kv@"


# -- an llm-d-style reader ------------------------------------------------------------------------------
class LlmdDecodeError(ValueError):
    pass


def parse_topic(topic):
    """(pod, model): three "@"-separated parts, else the whole topic is the pod and the model is empty."""
    parts = topic.split("@")
    return (parts[1], parts[2]) if len(parts) == 3 else (topic, "")


def _at(fields, i):
    return fields[i] if i < len(fields) else None


def decode_event(raw):
    """One event: must be an array whose first element is the tag (a map is an error, as in llm-d-kv-cache
    of 2026-06: "failed to decode tagged union")."""
    if not isinstance(raw, list):
        raise LlmdDecodeError(f"failed to decode tagged union: {type(raw).__name__} is not an array")
    if not raw or not isinstance(raw[0], str):
        raise LlmdDecodeError("malformed tagged union: no string tag")
    tag = raw[0]
    if tag == "BlockStored":
        if len(raw) < 5:
            raise LlmdDecodeError(f"BlockStored: need at least 5 fields, got {len(raw)}")
        extra = _at(raw, 8)
        if extra is not None and not all(k is None or isinstance(k, list) for k in extra):
            raise LlmdDecodeError(f"extra_keys entries must be arrays or nil: {extra!r}")
        return dict(type=tag, hashes=list(raw[1]), parent=raw[2] or 0, tokens=list(raw[3]), block_size=raw[4],
                    medium=_at(raw, 6) or "", lora_name=_at(raw, 7), extra_keys=extra)
    if tag == "BlockRemoved":
        if len(raw) < 2:
            raise LlmdDecodeError(f"BlockRemoved: need at least 2 fields, got {len(raw)}")
        return dict(type=tag, hashes=list(raw[1]), medium=_at(raw, 2) or "")
    if tag == "AllBlocksCleared":
        return dict(type=tag)
    raise LlmdDecodeError(f"unknown vLLM event tag: {tag}")


def decode_message(frames):
    """A live (or replayed) message [topic, seq, payload] -> (pod, model, seq, events)."""
    if len(frames) != 3 or len(frames[1]) < 8:
        raise LlmdDecodeError(f"malformed event frame with {len(frames)} frames")
    batch = msgpack.unpackb(frames[2], raw=False, strict_map_key=False)
    if not isinstance(batch, list) or len(batch) < 2:
        raise LlmdDecodeError("event batch is not an array [ts, events, ...]")
    pod, model = parse_topic(frames[0].decode())
    return pod, model, int.from_bytes(frames[1][:8], "big"), [decode_event(e) for e in batch[1]]


def block_features(extra_keys):
    """Per block, the strings that taint its key: bare strings, or the first element of a legacy
    [str, ...] array; other entries (numbers, maps) are skipped. None = a plain text block."""
    if extra_keys is None:
        return None
    out = []
    for keys in extra_keys:
        got = []
        for k in keys or []:
            if isinstance(k, str):
                got.append(k)
            elif isinstance(k, list) and k and isinstance(k[0], str):
                got.append(k[0])
        out.append(got or None)
    return out


def request_features(num_blocks, cache_salt):
    """What the router computes for a text prompt with this cache_salt: the salt on the first block."""
    if not cache_salt or not num_blocks:
        return None
    return [[cache_salt]] + [None] * (num_blocks - 1)


def replay(endpoint, start_seq):
    """A replay client as llm-d's router runs it: every answer, after the empty delimiter, is three
    frames; [_, _, b""] ends it; anything else fails the replay (the router then clears the pod)."""
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(endpoint)
    try:
        dealer.send_multipart([b"", start_seq.to_bytes(8, "big")])
        got, expect = [], start_seq
        while True:
            assert dealer.poll(WAIT_MS), "no replay answer within the bounded wait"
            frames = dealer.recv_multipart()
            if frames and frames[0] == b"":
                frames = frames[1:]
            if len(frames) == 3 and frames[2] == b"":
                return got
            if len(frames) != 3 or len(frames[1]) < 8:
                raise LlmdDecodeError(f"malformed replay frame with {len(frames)} frames")
            msg = decode_message(frames)
            if msg[2] != expect:
                raise LlmdDecodeError(f"incomplete replay: expected sequence {expect}, got {msg[2]}")
            got.append(msg)
            expect += 1
    finally:
        dealer.close()


# -- helpers --------------------------------------------------------------------------------------------
@pytest.fixture
def mgr():
    m = S.EvManager(num_blocks=16, block_size=4)
    yield m
    m.close()


def subscribe(pub):
    return wire_subscribe(pub, LLMD_PREFIX, "llm-d's prefix subscription never matched our topic")


def recv(sub):
    assert sub.poll(WAIT_MS), "no batch within the bounded wait"
    return decode_message(sub.recv_multipart())


# -- tests ----------------------------------------------------------------------------------------------
def test_llmd_topic_and_positional_events(mgr):
    with ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", topic=ev.llmd_topic("10.0.0.7", "org/Model-8B"),
                             encoding="array") as pub:
        sub = subscribe(pub)
        a = list(range(1, 15))
        mgr.run(a)
        pub.flush()
        pod, model, seq, events = recv(sub)
        assert (pod, model, seq) == ("10.0.0.7", "org/Model-8B", 0)
        ha = [S.kvblock.hash_tokens(a[:4])]
        for i in (4, 8):
            ha.append(S.kvblock.hash_tokens(a[i:i + 4], ha[-1]))
        assert events == [dict(type="BlockStored", hashes=ha, parent=0, tokens=a[:12], block_size=4,
                               medium="GPU", lora_name=None, extra_keys=None)]
        mgr.run(list(range(100, 164)))  # evicts a
        mgr.reset()
        pub.flush()
        _, _, seq, events = recv(sub)
        assert seq == 1 and events[-1] == {"type": "AllBlocksCleared"}
        removed = {h for e in events if e["type"] == "BlockRemoved" for h in e["hashes"]}
        assert set(ha) <= removed and all(e["medium"] == "GPU" for e in events if e["type"] == "BlockRemoved")


def test_map_encoding_is_what_llmd_kv_cache_2026_06_cannot_read(mgr):
    """The default stays vLLM's ("map"); llm-d-kv-cache of 2026-06 needs encoding="array" (README)."""
    with ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", topic="kv@p@m") as pub:
        assert pub.encoding == "map"
        sub = subscribe(pub)
        mgr.run([1, 2, 3, 4, 5])
        pub.flush()
        assert sub.poll(WAIT_MS)
        with pytest.raises(LlmdDecodeError, match="failed to decode tagged union"):
            decode_message(sub.recv_multipart())


def test_topic_the_router_cannot_split(mgr):
    """The old default topic "" reaches no llm-d subscriber; llmd_topic refuses names llm-d would mis-split."""
    with ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*") as pub:
        sub = zmq.Context.instance().socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.connect(pub.bound_endpoint)
        sub.subscribe(LLMD_PREFIX)
        assert not pub.wait_for_subscribers(1, 0.2)  # the subscription does not match topic b""
        sub.close()
    for pod, model in (("a@b", "m"), ("p", "org@m"), ("", "m"), ("p", ""), ("p", None)):
        with pytest.raises(ValueError, match="without '@'"):
            ev.llmd_topic(pod, model)
    assert parse_topic(ev.llmd_topic("pod-3", "m")) == ("pod-3", "m")


@pytest.mark.parametrize("replay_frames", ev.REPLAY_FRAMES)
def test_replay_read_by_llmds_router(mgr, replay_frames):
    """The default ("topic", vLLM since #45177) replays as llm-d's router expects, topic included; the
    legacy layout is the one it rejects ("malformed replay frame with 2 frames")."""
    layout = {} if replay_frames == "topic" else {"replay_frames": replay_frames}  # "topic": the default
    with ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", topic=ev.llmd_topic("pod-9", "m"),
                             encoding="array", replay_endpoint="tcp://127.0.0.1:*", **layout) as pub:
        for k in range(3):  # nobody subscribed: only the replay buffer has them
            mgr.run(list(range(100 * k + 1, 100 * k + 6)))
            pub.flush()
        assert pub.wait_sent(WAIT_MS / 1000)
        if replay_frames == "legacy":
            with pytest.raises(LlmdDecodeError, match="malformed replay frame with 2 frames"):
                replay(pub.bound_replay_endpoint, 0)
            return
        got = replay(pub.bound_replay_endpoint, 1)
        assert [(pod, model, seq) for pod, model, seq, _ in got] == [("pod-9", "m", 1), ("pod-9", "m", 2)]
        assert [e[3][0]["tokens"] for e in got] == [list(range(101, 105)), list(range(201, 205))]
        assert replay(pub.bound_replay_endpoint, 3) == []  # nothing after the last batch: just the end marker


def test_salt_features_match_the_routers_request_side():
    """A salted prompt: the event's first block carries the request's cache_salt string as a bare extra key,
    so the features llm-d derives from the event equal those it folds into the request's keys. The block
    with a caller extra key lists it before the salt; later blocks are plain text."""
    salts = CacheSalts()
    m = S.EvManager(num_blocks=16, block_size=4)
    try:
        with ev.KvEventPublisher(m, endpoint="tcp://127.0.0.1:*", topic="kv@p@m", encoding="array",
                                 salt_names=salts) as pub:
            sub = subscribe(pub)
            prompt = list(range(1, 14))  # 3 full blocks
            for tenant in ("tenant-a", "tenant-b"):
                sid = m.new_seq_id()
                m.allocate(sid, prompt, cache_salt=salts.salt(tenant))
                m.commit(sid, len(prompt))
                m.free(sid)
                pub.flush()
                _, _, _, events = recv(sub)
                assert len(events) == 1 and len(events[0]["hashes"]) == 3 and events[0]["parent"] == 0
                assert block_features(events[0]["extra_keys"]) == request_features(3, tenant)
            numeric = 77  # a salt the table does not know goes out as its decimal digits
            sid = m.new_seq_id()
            m.allocate(sid, prompt, cache_salt=numeric, extra_keys={0: 5})
            m.commit(sid, len(prompt))
            m.free(sid)
            pub.flush()
            events = recv(sub)[3]
            assert events[0]["extra_keys"][0] == [["kvb_extra_key", 5], "77"]
            assert block_features(events[0]["extra_keys"])[0] == ["kvb_extra_key", "77"]
    finally:
        m.close()


def test_cache_salts_table():
    salts = CacheSalts()
    s = salts.salt("tenant-a")
    assert s == CacheSalts.salt_of("tenant-a") == salts.salt("tenant-a") and 0 <= s < 2**64
    assert salts[s] == "tenant-a" and len(salts) == 1 and list(salts) == [s]
    assert ev.salt_wire_name(s, salts) == "tenant-a" and ev.salt_wire_name(5, salts) == "5"
    assert salts.salt("tenant-b") != s
    for bad in ("", None, 5, b"x"):
        with pytest.raises(ValueError, match="non-empty str"):
            salts.salt(bad)
    salts._names[CacheSalts.salt_of("c")] = "not-c"  # forge a collision: never silent
    with pytest.raises(ValueError, match="map to the same 64-bit salt"):
        salts.salt("c")


def test_salt_name_not_a_string_is_refused_and_resyncs(mgr):
    """A salt_names value that is not a str is never sent as something a router would misread: that
    batch is refused (SaltNameError names the salt) and the stream resyncs, as for a bad token id."""
    with ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", topic="kv@p@m", encoding="array",
                             salt_names={7: 1234}) as pub:
        sub = subscribe(pub)
        sid = mgr.new_seq_id()
        mgr.allocate(sid, [1, 2, 3, 4, 5], cache_salt=7)
        mgr.commit(sid, 5)
        mgr.free(sid)
        with pytest.raises(ev.SaltNameError, match=r"salt_names\[0x0000000000000007\] is 1234"):
            pub.flush()
        assert recv(sub)[3] == [{"type": "AllBlocksCleared"}]
        assert pub.stats()["resyncs"] == 1


def test_publisher_argument_checks(mgr):
    with pytest.raises(ValueError, match="replay_frames"):
        ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", replay_frames="v2")
    with pytest.raises(ValueError, match="salt_names"):
        ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", salt_names=lambda s: "x")


def test_mini_engine_cli_publishes_on_an_llmd_topic():
    """python -m kvblock.engine --kv-events-topic kv@<pod>@<model> --kv-events-encoding array: every batch
    reaches an llm-d-style subscriber, attributed to that pod and model, and decodes."""
    import socket
    import subprocess
    import sys
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(f"tcp://127.0.0.1:{port}")
    sub.subscribe(LLMD_PREFIX)
    proc = subprocess.Popen([sys.executable, "-m", "kvblock.engine", "--requests", "4", "--shared-prefix", "32",
                             "--prompt", "8", "--max-tokens", "4", "--num-blocks", "64", "--block-size", "16",
                             "--kv-events", f"tcp://127.0.0.1:{port}", "--kv-events-topic", "kv@engine-0@tiny",
                             "--kv-events-encoding", "array", "--kv-events-wait", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        stored, seqs = 0, []
        while sub.poll(2000):
            pod, model, seq, events = decode_message(sub.recv_multipart())
            assert (pod, model) == ("engine-0", "tiny")
            seqs.append(seq)
            stored += sum(len(e["hashes"]) for e in events if e["type"] == "BlockStored")
        assert seqs and seqs == list(range(len(seqs))) and stored > 0, out
        assert "0 dropped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sub.close()


def test_mini_engine_request_cache_salt_on_the_wire():
    """Request(cache_salt="tenant-a") in the mini engine: its prompt's first block goes out with the string,
    as vLLM sends a request's cache_salt; a second tenant does not share the first one's blocks."""
    from kvblock.engine.engine import Engine, EngineConfig
    from kvblock.engine.model import Model, ModelConfig
    from kvblock.engine.sequence import Request
    eng = Engine(Model(ModelConfig(seed=3)), EngineConfig(num_blocks=32, block_size=8, max_batched_tokens=64,
                                                          kv_events_endpoint="tcp://127.0.0.1:*",
                                                          kv_events_topic="kv@p@m", kv_events_encoding="array"))
    try:
        sub = subscribe(eng.publisher)
        prompt = list(range(1, 20))  # 2 full blocks
        for r, tenant in enumerate(("tenant-a", "tenant-b")):
            eng.add_request(Request(r, prompt, 1, cache_salt=tenant))
            eng.run()
            first = [e for e in recv(sub)[3] if e["type"] == "BlockStored"][0]
            assert first["parent"] == 0 and first["tokens"][:8] == prompt[:8]
            assert block_features(first["extra_keys"])[0] == [tenant]
        assert eng.mgr.stats()["hit_tokens"] == 0  # tenant-b reused nothing of tenant-a's
    finally:
        eng.close()
        eng.mgr.close()
