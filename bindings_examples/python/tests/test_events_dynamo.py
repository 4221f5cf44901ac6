"""kvblock.events against the real consumer: NVIDIA Dynamo's standalone KV indexer
(`python -m dynamo.indexer`, package ai-dynamo-runtime, pinned 1.6.1 by .ci/run). Everything runs on
127.0.0.1 and is started and stopped here, with bounded waits. Without the package the tests SKIP with
the reason (pytest -rs prints it); they never pass silently.

The oracle for a router score is the manager itself: the indexer's score of a prompt for an engine must
equal the tokens of the prompt's full blocks that the engine's kvb_seq_can_allocate finds cached."""
import random
import time

import pytest

pytest.importorskip("zmq", reason="pyzmq not installed (pip install pyzmq msgpack)")
pytest.importorskip("msgpack", reason="msgpack not installed (pip install pyzmq msgpack)")

import event_helpers as S  # noqa: E402

ev, ic = S.events, S.indexer_client
WAIT_S = 30.0  # upper bound for the indexer to apply what was published; correctness never waits on it

_PY = ic.indexer_python()
pytestmark = pytest.mark.skipif(
    _PY is None, reason=f"SKIP dynamo: ai-dynamo-runtime not installed "
                        f"(pip install ai-dynamo-runtime=={ic.PINNED_VERSION}; or set KVBLOCK_DYNAMO_PYTHON)")


@pytest.fixture(scope="module")
def indexer():
    idx = ic.DynamoIndexer(_PY)
    yield idx
    idx.stop()


_model_counter = iter(range(1_000_000))
_instance_counter = iter(range(1, 1_000_000))  # instance ids are global in the indexer, across models


class Engine:
    """A manager + publisher registered with the indexer as one worker of `model`."""

    def __init__(self, indexer, model, encoding="map", num_blocks=64, block_size=4,
                 event_capacity=65536, replay=False, dp_rank=0, topic="", replay_frames="topic",
                 salt_names=None, **manager_options):
        self.m = S.EvManager(num_blocks, block_size, event_capacity, **manager_options)
        self.pub = ev.KvEventPublisher(self.m, endpoint="tcp://127.0.0.1:*", encoding=encoding,
                                       replay_endpoint="tcp://127.0.0.1:*" if replay else None,
                                       dp_rank=dp_rank, topic=topic, replay_frames=replay_frames,
                                       salt_names=salt_names)
        self.dp_rank = dp_rank
        self.id, self.indexer, self.model = next(_instance_counter), indexer, model

    def register(self):
        self.indexer.register(self.id, self.pub.bound_endpoint, self.m.block_size, model_name=self.model,
                              replay_endpoint=self.pub.bound_replay_endpoint, dp_rank=self.dp_rank)
        assert self.pub.wait_for_subscribers(1, WAIT_S), "the indexer never subscribed:\n" + self.indexer.log_tail()

    def close(self):
        self.pub.close()
        self.m.close()


@pytest.fixture
def model():
    return f"kvb-test-{next(_model_counter)}"  # one indexer partition per test: tests stay independent


def eventually(indexer, model, expect, what, kind="scores"):
    """Polls until the indexer's `kind` (scores, or tier_scores) of every prompt equal expect's (bounded);
    fails with the diff."""
    query = getattr(indexer, kind)
    deadline = time.monotonic() + WAIT_S
    while True:
        diff = {}
        for name, (prompt, want) in expect.items():
            got = query(prompt, model)
            if got != want:
                diff[name] = (got, want)
        if not diff:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: indexer {kind} (got, want) differ after {WAIT_S} s: {diff}\n"
                                 + indexer.log_tail())
        time.sleep(0.02)


@pytest.mark.parametrize("encoding", ["map", "array"])
def test_stored_evicted_reset(indexer, model, encoding):
    e = Engine(indexer, model, encoding=encoding, num_blocks=16)
    try:
        e.register()
        a = list(range(1, 19))  # 4 full blocks + 2 tokens
        e.m.run(a)
        e.pub.flush()
        assert e.m.cached_blocks_tokens(a) == 16
        eventually(indexer, model, {"a": (a, {e.id: 16})}, "stored prompt")
        e.m.run(list(range(500, 564)))  # 16 blocks: every block of a is evicted
        e.pub.flush()
        assert e.m.cached_blocks_tokens(a) == 0
        eventually(indexer, model, {"a": (a, {}), "b": (list(range(500, 564)), {e.id: 64})}, "evicted prompt")
        e.m.reset()
        e.pub.flush()
        eventually(indexer, model, {"b": (list(range(500, 564)), {})}, "reset")
    finally:
        e.close()


def test_two_workers_told_apart(indexer, model):
    w1, w2 = Engine(indexer, model), Engine(indexer, model, encoding="array", dp_rank=1)
    try:
        w1.register()
        w2.register()
        shared = list(range(1, 9))
        a, b = shared + list(range(100, 113)), shared + list(range(200, 205))
        w1.m.run(a)
        w2.m.run(b)
        w1.pub.flush()
        w2.pub.flush()
        eventually(indexer, model, {"a": (a, {w1.id: 20, w2.id: 8}), "b": (b, {w1.id: 8, w2.id: 12}),
                                    "other": ([9, 9, 9, 9, 9], {})}, "two workers")
        # the batch's data_parallel_rank reaches the indexer: w2's blocks are scored under rank 1
        assert indexer.query(b, model)["scores"] == {str(w1.id): {"0": 8}, str(w2.id): {"1": 12}}
    finally:
        w1.close()
        w2.close()


@pytest.mark.parametrize("encoding", ["map", "array"])
def test_random_workload_scores_equal_manager(indexer, model, encoding):
    """Random prompts sharing prefixes on a small pool (evictions, concurrent identical prompts, resets):
    after each round the indexer's score of every prompt equals the manager's own cached count."""
    rng = random.Random(14 if encoding == "map" else 15)
    e = Engine(indexer, model, encoding=encoding, num_blocks=40)
    try:
        e.register()
        stems = [[rng.randrange(1, 50) for _ in range(rng.randrange(4, 30))] for _ in range(6)]
        prompts = []
        for rnd in range(6):
            live = []
            for _ in range(rng.randrange(3, 8)):
                p = rng.choice(stems)[: rng.randrange(1, 30)]
                p += [rng.randrange(1, 50) for _ in range(rng.randrange(1, 12))]
                prompts.append(p)
                keep = rng.random() < 0.3  # some stay live: shared, in use
                try:
                    if rng.random() < 0.2:
                        e.m.run_twins(p)
                    else:
                        sid, _ = e.m.run(p, keep=keep)
                        if keep:
                            live.append(sid)
                except S.kvblock.KvbError as err:  # the pool is full of live sequences
                    assert err.status == S.kvblock.Status.OUT_OF_BLOCKS
                    break
            for sid in live:
                e.m.free(sid)
            if rnd == 3:
                e.m.reset()
            e.pub.flush()
            expect = {}
            for i, p in enumerate(prompts[-25:]):
                c = e.m.cached_blocks_tokens(p)
                expect[i] = (p, {e.id: c} if c else {})
            eventually(indexer, model, expect, f"round {rnd}")
    finally:
        e.close()


def test_manager_drop_resyncs_router(indexer, model):
    """Events lost in the manager's buffer: the indexer forgets the engine (AllBlocksCleared) instead of
    keeping a picture that may be wrong, and relearns from the events that follow."""
    e = Engine(indexer, model, num_blocks=64, event_capacity=4)
    try:
        e.register()
        a = list(range(1, 13))
        e.m.run(a)
        e.pub.flush()
        eventually(indexer, model, {"a": (a, {e.id: 12})}, "before the gap")
        e.m.run(list(range(100, 124)))  # 6 blocks into a 4-event buffer: 2 events lost
        e.pub.flush()
        assert e.pub.stats()["dropped_events"] == 2
        c = list(range(300, 309))
        e.m.run(c)
        e.pub.flush()
        assert e.m.cached_blocks_tokens(a) == 12  # the engine still has a, the router no longer claims it
        eventually(indexer, model, {"a": (a, {}), "c": (c, {e.id: 8})}, "after the gap")
    finally:
        e.close()


@pytest.mark.parametrize("replay_frames", ev.REPLAY_FRAMES)
def test_replay_recovers_batches_sent_before_subscribe(indexer, model, replay_frames):
    """Both replay layouts (vLLM's current one with the topic frame, and its older one) against Dynamo
    1.6.1, on an llm-d-style topic, so one configuration serves both routers."""
    e = Engine(indexer, model, replay=True, topic=ev.llmd_topic("pod-1", model), replay_frames=replay_frames)
    try:
        a, b = list(range(1, 10)), list(range(50, 59))
        e.m.run(a)
        e.pub.flush()  # seq 0, nobody subscribed yet: lost on PUB, kept for replay
        assert e.pub.wait_sent(WAIT_S)
        e.register()
        e.m.run(b)
        e.pub.flush()  # seq 1: the indexer sees a gap from 0 and asks the replay socket
        eventually(indexer, model, {"a": (a, {e.id: 8}), "b": (b, {e.id: 8})}, "replay")
        assert e.pub.stats()["replay_requests"] >= 1
    finally:
        e.close()


@pytest.mark.parametrize("encoding", ["map", "array"])
def test_salted_blocks_do_not_break_a_batch(indexer, model, encoding):
    """A batch with salted blocks (the salt a bare string in extra_keys, as vLLM sends cache_salt, on an
    llm-d-style topic) is still decoded by Dynamo 1.6.1: the unsalted prompt stored in the same batch is
    scored. (Dynamo keys blocks by their tokens alone, so it does not tell salts apart.)"""
    from kvblock.cache_salts import CacheSalts
    salts = CacheSalts()
    e = Engine(indexer, model, encoding=encoding, topic=ev.llmd_topic("pod-1", model), salt_names=salts)
    try:
        e.register()
        salted, plain = list(range(1, 10)), list(range(50, 59))
        sid = e.m.new_seq_id()
        e.m.allocate(sid, salted, cache_salt=salts.salt("tenant-a"), extra_keys={1: 9})
        e.m.commit(sid, len(salted))
        e.m.free(sid)
        e.m.run(plain)
        e.pub.flush()
        eventually(indexer, model, {"plain": (plain, {e.id: 8})}, "batch with salted blocks")
        assert e.pub.stats()["dropped_events"] == 0
    finally:
        e.close()


def test_mini_engine_publishes(indexer, model):
    """`python -m kvblock.engine --kv-events ...`: the mini engine's own steps (chunked prefill, decode,
    preemption in a small pool) reach the indexer, whose scores match the engine's manager."""
    import numpy as np

    from kvblock.engine.engine import Engine as MiniEngine
    from kvblock.engine.engine import EngineConfig
    from kvblock.engine.model import Model, ModelConfig
    from kvblock.engine.sequence import Request

    mdl = Model(ModelConfig(seed=3))
    eng = MiniEngine(mdl, EngineConfig(num_blocks=24, block_size=8, max_batched_tokens=48,
                                       kv_events_endpoint="tcp://127.0.0.1:*", kv_events_encoding="array"))
    iid = next(_instance_counter)
    try:
        indexer.register(iid, eng.publisher.bound_endpoint, 8, model_name=model)
        assert eng.publisher.wait_for_subscribers(1, WAIT_S)
        rng = np.random.default_rng(1)
        shared = rng.integers(0, mdl.cfg.vocab, 40).tolist()
        prompts = [shared[: 40 - 8 * (r % 3)] + rng.integers(0, mdl.cfg.vocab, 4 + 3 * r).tolist() for r in range(6)]
        for r, p in enumerate(prompts):
            eng.add_request(Request(r, p, 6))
        eng.run()
        assert eng.publisher.stats()["dropped_events"] == 0
        expect = {}
        for r, p in enumerate(prompts):
            c = eng.mgr.can_allocate(p + [0])
            expect[r] = (p, {iid: c} if c else {})
        assert any(want for _, want in expect.values())
        eventually(indexer, model, expect, "mini engine")
    finally:
        eng.close()
        eng.mgr.close()


@pytest.mark.parametrize("encoding", ["map", "array"])
def test_host_cache_tiers(indexer, model, encoding):
    """A manager with the host prefix cache: every event goes out with its own block's medium (device
    "GPU", host "CPU"), and Dynamo keeps a tier per medium. After each round of random prompts on a device
    pool smaller than the workload (offloads, host hits loaded back, host evictions), the indexer's "gpu"
    match of every prompt equals the prefix the device holds, and its "cpu" match (device or host, block by
    block) equals the manager's own cached count across both levels."""
    rng = random.Random(21 if encoding == "map" else 22)
    e = Engine(indexer, model, encoding=encoding, num_blocks=24, num_host_blocks=16, host_cache=True)
    try:
        e.register()
        stems = [[rng.randrange(1, 50) for _ in range(rng.randrange(8, 30))] for _ in range(6)]
        prompts = []
        for rnd in range(5):
            for _ in range(rng.randrange(3, 8)):
                p = rng.choice(stems)[: rng.randrange(4, 30)]
                p += [rng.randrange(1, 50) for _ in range(rng.randrange(1, 8))]
                prompts.append(p)
                e.m.run(p)
            e.pub.flush()
            expect = {}
            for i, p in enumerate(prompts[-25:]):
                gpu, cpu = e.m.device_blocks_tokens(p), e.m.cached_blocks_tokens(p)
                expect[i] = (p, {e.id: (gpu, cpu)} if cpu else {})
            eventually(indexer, model, expect, f"round {rnd}", "tier_scores")
        st = e.m.stats()
        assert st["host_hit_tokens"] > 0 and st["offloaded_blocks"] > 0 and st["host_evictions"] > 0, st
    finally:
        e.close()


@pytest.mark.parametrize("encoding", ["map", "array"])
def test_hybrid_model_events_accepted(indexer, model, encoding):
    """A manager with KV cache groups (window + full) publishes every group's events with vLLM's group
    fields (issue 20 item 1); Dynamo 1.6.1 reads both encodings of them and scores the stored prompt."""
    e = Engine(indexer, model, encoding=encoding, num_blocks=64, groups=[("window", 8, 0), ("full",)])
    try:
        e.register()
        a = list(range(1, 19))
        e.m.run(a, keep=True)
        assert e.pub.flush() > 0
        assert e.m.cached_blocks_tokens(a) == 16
        eventually(indexer, model, {"a": (a, {e.id: 16})}, "hybrid stored prompt")
    finally:
        e.close()
