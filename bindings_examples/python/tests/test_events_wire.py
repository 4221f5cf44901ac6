"""kvblock.events on the wire, read back with a plain ZMQ SUB / DEALER: frames, sequence numbers, both
encodings, chain grouping, resync markers for every kind of gap, the 32-bit token check, replay."""
import random
import time

import numpy as np
import pytest

zmq = pytest.importorskip("zmq", reason="pyzmq not installed (pip install pyzmq msgpack)")
pytest.importorskip("msgpack", reason="msgpack not installed (pip install pyzmq msgpack)")

import event_helpers as S  # noqa: E402

ev = S.events
WAIT_MS = 10000  # bounded waits; nothing here depends on timing otherwise


@pytest.fixture
def mgr():
    m = S.EvManager(num_blocks=16, block_size=4)
    yield m
    m.close()


def subscribe(pub, topic=b"", never="subscription never arrived"):
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(pub.bound_endpoint)
    sub.subscribe(topic)
    assert pub.wait_for_subscribers(1, WAIT_MS / 1000), never
    return sub


def recv(sub):
    assert sub.poll(WAIT_MS), "no batch within the bounded wait"
    topic, seq, payload = sub.recv_multipart()
    ts, events, dp = ev.decode_batch(payload)
    return topic, int.from_bytes(seq, "big"), events, dp


def wait_queue_empty(pub):
    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline:
        if pub._queue.qsize() == 0:
            return
        time.sleep(0.001)
    raise AssertionError("the sender thread never took the queued batch")


def chain_hashes(tokens, bs):
    """The manager's public hash chain for full blocks of tokens (kvb_hash_tokens)."""
    out, parent = [], None
    for i in range(0, len(tokens) - len(tokens) % bs, bs):
        parent = S.kvblock.hash_tokens(tokens[i:i + bs], parent)
        out.append(parent)
    return out


def test_map_form_frames_and_grouping(mgr):
    with ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", topic="kv@w1", dp_rank=3) as pub:
        sub = subscribe(pub)
        prompt = list(range(1, 15))  # 3 full blocks + 2 tokens
        mgr.run(prompt)
        assert pub.flush() == 1
        topic, seq, events, dp = recv(sub)
        assert (topic, seq, dp) == (b"kv@w1", 0, 3)
        assert events == [{"type": "BlockStored", "block_hashes": chain_hashes(prompt, 4), "parent_block_hash": None,
                           "token_ids": prompt[:12], "block_size": 4, "lora_id": None, "medium": "GPU",
                           "lora_name": None}]
        # a continuation of the cached prefix: its first new block's parent is the last cached hash
        longer = prompt[:12] + list(range(50, 58))
        mgr.run(longer)
        pub.flush()
        _, seq, events, _ = recv(sub)
        hs = chain_hashes(longer, 4)
        assert seq == 1 and events[0]["block_hashes"] == hs[3:5] and events[0]["parent_block_hash"] == hs[2]
        assert events[0]["token_ids"] == longer[12:20]
        assert pub.flush() == 0  # nothing pending: no message, no sequence number used


def test_array_form_and_removals(mgr):
    with ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", encoding="array") as pub:
        sub = subscribe(pub)
        a = list(range(1, 33))  # 8 blocks: half the pool
        mgr.run(a)
        b = list(range(100, 164))  # 16 blocks: evicts all of a
        mgr.run(b)
        pub.flush()
        _, _, events, dp = recv(sub)
        ha, hb = chain_hashes(a, 4), chain_hashes(b, 4)
        assert dp == 0
        assert events[0] == ["BlockStored", ha, None, a, 4, None, "GPU", None]
        removed = [h for e in events if e[0] == "BlockRemoved" for h in e[1]]
        stored = [h for e in events[1:] if e[0] == "BlockStored" for h in e[1]]
        assert sorted(removed) == sorted(ha) and stored == hb
        assert all(e[2] == "GPU" for e in events if e[0] == "BlockRemoved")
        mgr.reset()
        pub.flush()
        assert recv(sub)[2] == [["AllBlocksCleared"]]


def test_manager_drop_ends_batch_with_clear():
    m = S.EvManager(num_blocks=16, block_size=4, event_capacity=3)
    try:
        with ev.KvEventPublisher(m, endpoint="tcp://127.0.0.1:*") as pub:
            sub = subscribe(pub)
            m.run(list(range(1, 25)))  # 6 stored events into a 3-event buffer: 3 dropped
            pub.flush()
            _, _, events, _ = recv(sub)
            assert [e["type"] for e in events] == ["BlockStored", "AllBlocksCleared"]
            assert len(events[0]["block_hashes"]) == 3
            st = pub.stats()
            assert st["dropped_events"] == 3 and st["resyncs"] == 1
            m.run(list(range(200, 208)))  # after the resync, new events flow again
            pub.flush()
            assert [e["type"] for e in recv(sub)[2]] == ["BlockStored"]
    finally:
        m.close()


def test_queue_drop_starts_next_batch_with_clear(mgr):
    pub = ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", max_queue_batches=1)
    try:
        sub = subscribe(pub)
        blocks = [list(range(k, k + 4)) for k in (10, 20, 30, 40)]
        with pub._stats_lock:  # stalls the sender thread right after it sends a batch
            mgr.run(blocks[0])
            pub.flush()  # A: taken by the sender, which then waits on the lock
            wait_queue_empty(pub)
            mgr.run(blocks[1])
            pub.flush()  # B: fills the one-batch queue
            mgr.run(blocks[2])
            pub.flush()  # C: queue full -> dropped, counted
            assert pub._stats["dropped_events"] == 1 and pub._stats["resyncs"] == 1
        wait_queue_empty(pub)
        mgr.run(blocks[3])
        pub.flush()  # D: begins with the resync marker
        got = [recv(sub) for _ in range(3)]
        assert [seq for _, seq, _, _ in got] == [0, 1, 2]  # no sequence gap: the loss is in-band
        assert got[0][2][0]["token_ids"] == blocks[0] and got[1][2][0]["token_ids"] == blocks[1]
        assert got[2][2][0] == {"type": "AllBlocksCleared"} and got[2][2][1]["token_ids"] == blocks[3]
    finally:
        pub.close()


def test_token_ids_must_fit_32_bits(mgr):
    with ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*") as pub:
        sub = subscribe(pub)
        mgr.run([1, 2, 3, 2**32, 5])
        with pytest.raises(ev.TokenIdRangeError, match="token id 4294967296 does not fit 32 bits"):
            pub.flush()
        assert recv(sub)[2] == [{"type": "AllBlocksCleared"}]  # the refused batch is a gap: resync
        mgr.run([7, 8, 9, 2**32 - 1, 1])  # the largest u32 is fine
        pub.flush()
        assert recv(sub)[2][0]["token_ids"] == [7, 8, 9, 2**32 - 1]


def test_bad_arguments(mgr):
    with pytest.raises(ValueError, match="encoding"):
        ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", encoding="json")
    with pytest.raises(ValueError, match="dp_rank"):
        ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", dp_rank=-1)
    with pytest.raises(OSError, match="cannot bind"):
        ev.KvEventPublisher(mgr, endpoint="tcp://256.0.0.1:1")


@pytest.mark.parametrize("replay_frames", ev.REPLAY_FRAMES)
def test_replay_serves_missed_batches(mgr, replay_frames):
    """Both layouts: "topic" repeats the live message's topic frame (and ends with an empty one),
    "legacy" has none."""
    with ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", topic="kv@p@m", replay_frames=replay_frames,
                             replay_endpoint="tcp://127.0.0.1:*", replay_buffer=2) as pub:
        sent = []
        for i in range(3):  # nobody listens: on a PUB socket these are gone, the replay buffer keeps 2
            mgr.run(list(range(1000 * (i + 1), 1000 * (i + 1) + 4)))
            pub.flush()
            sent.append(chain_hashes(list(range(1000 * (i + 1), 1000 * (i + 1) + 4)), 4))
        assert pub.wait_sent(WAIT_MS / 1000)
        dealer = zmq.Context.instance().socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(pub.bound_replay_endpoint)
        try:
            dealer.send_multipart([b"", (0).to_bytes(8, "big")])
            got = []
            while True:
                assert dealer.poll(WAIT_MS)
                frames = dealer.recv_multipart()
                assert frames[0] == b"" and len(frames) == (4 if replay_frames == "topic" else 3), frames
                seq, payload = frames[-2:]
                if replay_frames == "topic":
                    assert frames[1] == (b"" if payload == b"" else b"kv@p@m")
                if payload == b"":
                    assert seq == ev.END_SEQ
                    break
                got.append((int.from_bytes(seq, "big"), ev.decode_batch(payload)[1][0]["block_hashes"]))
            assert got == [(1, sent[1]), (2, sent[2])]
        finally:
            dealer.close()


def test_grouping_matches_a_simple_model():
    """group_events against a one-event-per-block model: the same hashes, parents, tokens and media, in
    order (so blocks of different media are never merged into one event)."""
    rng = random.Random(5)
    Event = S.kvblock.Event
    # the media that have a wire name (an unnamed medium is refused, as test_media_override_and_unknown_medium
    # checks)
    named_media = sorted(ev.MEDIA)
    for _ in range(200):
        raw, parent = [], None
        for _ in range(rng.randrange(0, 12)):
            r = rng.random()
            if r < 0.6:
                h = rng.getrandbits(64)
                kind = 1 if (parent is not None and rng.random() < 0.7) else rng.choice([0, 2])
                ph = parent if kind == 1 else None
                if kind == 1 and rng.random() < 0.2:
                    ph = rng.getrandbits(64)  # a parent that is not the previous event
                salt = rng.getrandbits(64) if kind == 2 else None
                extra = rng.getrandbits(64) if rng.random() < 0.2 else None
                toks = np.array([rng.randrange(2**32) for _ in range(2)], np.int64)
                raw.append(Event("stored", h, ph, salt, extra, toks, rng.randrange(100), rng.choice(named_media)))
                parent = h
            elif r < 0.9:
                raw.append(Event("removed", rng.getrandbits(64), None, None, None, np.empty(0, np.int64), 0,
                                 rng.choice(named_media)))
                parent = None if rng.random() < 0.5 else parent
            else:
                raw.append(Event("cleared", 0, None, None, None, np.empty(0, np.int64), -1))
                parent = None
        flat = []
        for e in ev.group_events(raw, 2):
            if e["type"] == "BlockStored":
                assert len(e["token_ids"]) == 2 * len(e["block_hashes"])
                extras = e.get("extra_keys", [None] * len(e["block_hashes"]))
                assert len(extras) == len(e["block_hashes"])
                p = e["parent_block_hash"]
                for i, h in enumerate(e["block_hashes"]):
                    flat.append(("stored", h, p, e["token_ids"][2 * i:2 * i + 2], extras[i], e["medium"]))
                    p = h
            elif e["type"] == "BlockRemoved":
                flat += [("removed", h, e["medium"]) for h in e["block_hashes"]]
            else:
                flat.append(("cleared",))
        model = []
        for r in raw:
            if r.type == "removed":
                model.append(("removed", r.block_hash, ev.MEDIA[r.medium]))
            elif r.type == "cleared":
                model.append(("cleared",))
            else:
                keys = (([["kvb_extra_key", r.extra_key]] if r.extra_key is not None else [])
                        + ([str(r.cache_salt)] if r.cache_salt is not None else []))
                model.append(("stored", r.block_hash, r.parent_hash, r.tokens.tolist(), keys or None,
                              ev.MEDIA[r.medium]))
        assert flat == model


def test_subscribers_counted_by_topic(mgr):
    with ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", topic=b"kv.w1") as pub:
        other = zmq.Context.instance().socket(zmq.SUB)
        other.setsockopt(zmq.LINGER, 0)
        other.connect(pub.bound_endpoint)
        other.subscribe(b"kv.w2")  # another worker's topic: not a subscriber of ours
        sub = subscribe(pub, b"kv.")  # a prefix of ours: receives our messages
        assert pub.stats()["subscribers"] == 1
        mgr.run([1, 2, 3, 4])
        pub.flush()
        assert recv(sub)[0] == b"kv.w1"
        assert other.poll(0) == 0
        sub.close()
        deadline = time.monotonic() + WAIT_MS / 1000
        while pub.stats()["subscribers"] and time.monotonic() < deadline:
            time.sleep(0.001)
        assert pub.stats()["subscribers"] == 0
        other.close()


@pytest.mark.parametrize("encoding", ["map", "array"])
def test_host_cache_media_on_the_wire(encoding):
    """Each wire event carries its own block's medium: an offload is a device removal ("GPU") and a host
    store ("CPU"), a host hit loaded back a device store. A subscriber that replays the stream per medium
    holds exactly the hashes each level holds, and every hash alternates stored / removed per medium."""
    m = S.EvManager(4, 4, num_host_blocks=8, host_cache=True)
    a, b = list(range(1, 10)), list(range(100, 109))  # 2 full blocks + 1 token each
    ha, hb = chain_hashes(a, 4), chain_hashes(b, 4)
    try:
        with ev.KvEventPublisher(m, endpoint="tcp://127.0.0.1:*", encoding=encoding) as pub:
            sub = subscribe(pub)
            m.run(a)
            m.run(b)  # takes a's freed blocks: a's second block goes to the host
            sid, cached = m.run(a, keep=True)  # a's first block from the device, its second from the host
            assert cached == 8 and m.stats()["host_hit_tokens"] == 4
            pub.flush()
            _, _, events, _ = recv(sub)
            held = {"GPU": set(), "CPU": set()}
            for e in events:
                if encoding == "array":
                    e = ({"type": e[0], "block_hashes": e[1], "medium": e[6]} if e[0] == "BlockStored"
                         else {"type": e[0], "block_hashes": e[1], "medium": e[2]})
                for h in e["block_hashes"]:
                    if e["type"] == "BlockStored":
                        assert h not in held[e["medium"]], (e, held)
                        held[e["medium"]].add(h)
                    else:
                        assert e["type"] == "BlockRemoved" and h in held[e["medium"]], (e, held)
                        held[e["medium"]].remove(h)
            on_device = {m.block_hash(x) for x in range(m.num_blocks)} - {None}
            assert held["GPU"] == on_device == {ha[0], ha[1], hb[0]}
            assert held["CPU"] == {ha[1], hb[1]} and m.stats()["cached_host_blocks"] == 2
            m.free(sid)
    finally:
        m.close()


def test_media_override_and_unknown_medium(mgr):
    Event, Medium = S.kvblock.Event, S.kvblock.Medium
    raw = [Event("stored", 1, None, None, None, np.array([1, 2]), 0, Medium.DEVICE),
           Event("stored", 2, 1, None, None, np.array([3, 4]), 5, Medium.HOST),
           Event("removed", 1, None, None, None, np.empty(0, np.int64), 0, Medium.DEVICE),
           Event("removed", 3, None, None, None, np.empty(0, np.int64), 1, Medium.HOST)]
    out = ev.group_events(raw, 2, {Medium.DEVICE: "GPU", Medium.HOST: "CPU_PINNED"})
    assert [(e["type"], e["block_hashes"], e["medium"]) for e in out] == [
        ("BlockStored", [1], "GPU"), ("BlockStored", [2], "CPU_PINNED"),
        ("BlockRemoved", [1], "GPU"), ("BlockRemoved", [3], "CPU_PINNED")]
    assert out[1]["parent_block_hash"] == 1  # a chain that changes medium starts a new event, parent kept
    with pytest.raises(ev.UnknownMediumError, match="medium 7"):
        ev.group_events([raw[0]._replace(medium=7)], 2)
    with pytest.raises(ValueError, match="media"):
        ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", media={Medium.DEVICE: 1})
    with ev.KvEventPublisher(mgr, endpoint="tcp://127.0.0.1:*", media={Medium.HOST: "CPU_PINNED"}) as pub:
        assert pub.media == {Medium.DEVICE: "GPU", Medium.HOST: "CPU_PINNED", Medium.STORE: "STORE"}
