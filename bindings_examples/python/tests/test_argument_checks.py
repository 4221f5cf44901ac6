"""Every scalar argument of every public entry point is checked once, at the boundary: a value its C type
cannot hold, a bool, a float or a wrong type is a KvbArgumentError (a TypeError and a ValueError) whose
message names the argument; never a bare OverflowError from cffi, an AttributeError, a KeyError, an
import of torch, or a silent truncation (issue 20 items 4 and 5). A refused call changes nothing."""
import traceback

import numpy as np
import pytest

import kvblock

BS, KVH, QH, D = 4, 1, 2, 8
BIG64, BIG32 = 2**64, 2**32


class Ctx:
    """A manager holding sequence 1 (9 tokens, committed), its batch buffers and a small CPU cache."""

    def __init__(self):
        self.m = kvblock.Manager(64, BS)
        self.m.allocate(1, list(range(9)))
        self.m.commit(1, 9)
        self.bufs = kvblock.BatchBuffers(4, 8, 4)
        self.ids = np.array([1], np.int64)
        self.cache = kvblock.KVCache(1, 16, BS, KVH, D)
        self.q = np.zeros((1, QH, D), np.float32)
        self.out = np.zeros((1, QH, D), np.float32)
        self.bt = np.zeros((1, 4), np.int32)
        self.sl = np.ones(1, np.int32)
        self.qs = np.array([0, 1], np.int32)

    def attention(self, **kw):
        kvblock.paged_attention(self.cache, 0, self.q, self.bt, self.sl, self.out, **kw)

    def prefill(self, **kw):
        kvblock.prefill_attention(self.cache, 0, self.q, self.qs, self.sl, self.bt, self.out, **kw)


class _HugeCache:
    """An array interface declaring 2^32 + 1 blocks over a one-block buffer (never read: refused first)."""

    def __init__(self):
        self._buf = np.zeros((1, BS, KVH, D), np.float32)
        self.__array_interface__ = {"shape": (BIG32 + 1, BS, KVH, D), "typestr": "<f4", "version": 3,
                                    "data": (self._buf.ctypes.data, False), "strides": None}


M = kvblock.Manager
# (case id, call on a Ctx, regex the message must match: it names the argument)
CASES = [
    # Manager(...): sizes are uint32, the seed uint64, the watermark a real number
    ("Manager num_blocks -1", lambda c: M(-1), r"num_blocks: -1 is out of range \[0, 2\^32 - 1\] of uint32_t"),
    ("Manager num_blocks 2^32", lambda c: M(BIG32), r"num_blocks: 4294967296 is out of range"),
    ("Manager block_size -1", lambda c: M(8, -1), "block_size: -1 is out of range"),
    ("Manager block_size 2^32", lambda c: M(8, BIG32), "block_size: 4294967296"),
    ("Manager num_host_blocks -1", lambda c: M(8, num_host_blocks=-1), "num_host_blocks: -1"),
    ("Manager num_host_blocks 2^32", lambda c: M(8, num_host_blocks=BIG32), "num_host_blocks: 4294967296"),
    ("Manager event_capacity -1", lambda c: M(8, events=True, event_capacity=-1), "event_capacity: -1"),
    ("Manager event_capacity 2^32", lambda c: M(8, event_capacity=BIG32), "event_capacity: 4294967296"),
    ("Manager index_seed -1", lambda c: M(8, index_seed=-1), r"index_seed: -1 .*uint64_t"),
    ("Manager index_seed 2^64", lambda c: M(8, index_seed=BIG64), "index_seed: 18446744073709551616"),
    ("Manager twin percent -1", lambda c: M(8, host_cache_twin_percent=-1), "host_cache_twin_percent: -1"),
    ("Manager twin percent 2^32", lambda c: M(8, host_cache_twin_percent=BIG32), "host_cache_twin_percent"),
    ("Manager watermark str", lambda c: M(8, watermark="0.1"), "watermark must be a real number, got str"),
    ("Manager watermark bool", lambda c: M(8, watermark=True), "watermark must be a real number, got bool"),
    ("Manager num_blocks bool", lambda c: M(True), "num_blocks must be an int, got bool"),
    ("Manager num_blocks float", lambda c: M(8.0), "num_blocks must be an int, got float"),
    # group specs
    ("groups window -1", lambda c: M(8, groups=[("window", -1)]), r"groups\[0\] window: -1 is out of range"),
    ("groups window 2^32", lambda c: M(8, groups=[("window", BIG32)]), r"groups\[0\] window: 4294967296"),
    ("groups sinks -1", lambda c: M(8, groups=[("window", 8, -1)]), r"groups\[0\] sinks: -1"),
    ("groups sinks 2^32", lambda c: M(8, groups=[("full",), ("window", 8, BIG32)]), r"groups\[1\] sinks"),
    ("groups dict spec", lambda c: M(8, groups=[{"a": 1}]), r"groups\[0\] = \{'a': 1\}: use \('full',\)"),
    ("groups int spec", lambda c: M(8, groups=[5]), r"groups\[0\] = 5: use"),
    ("groups str spec", lambda c: M(8, groups=["full"]), r"groups\[0\] = 'full': use"),
    ("groups not a list", lambda c: M(8, groups=5), "groups must be a list of group specs, got int"),
    # sequence ids are int64
    ("allocate id 2^63", lambda c: c.m.allocate(2**63, [1]), r"seq_id: 9223372036854775808 is out of range "
                                                               r"\[-2\^63, 2\^63 - 1\] of int64_t"),
    ("allocate id -2^63-1", lambda c: c.m.allocate(-2**63 - 1, [1]), "seq_id: -9223372036854775809"),
    ("allocate id bool", lambda c: c.m.allocate(True, [1]), "seq_id must be an int, got bool"),
    ("commit id 2^63", lambda c: c.m.commit(2**63, 1), "seq_id: 9223372036854775808"),
    ("can_append id 2^63", lambda c: c.m.can_append(2**63), "seq_id: 9223372036854775808"),
    ("append id 2^63", lambda c: c.m.append(2**63, [1]), "seq_id: 9223372036854775808"),
    ("free id 2^63", lambda c: c.m.free(2**63), "seq_id: 9223372036854775808"),
    # append and commit (the per-sequence decode loop) check the types in Python and leave the ranges to
    # cffi, turning its OverflowError into these refusals: each case here would pass a bare OverflowError,
    # or reach the library with a bool or a truncated float, if a check were lost
    ("append id -2^63-1", lambda c: c.m.append(-2**63 - 1, [1]), "seq_id: -9223372036854775809 is out of range"),
    ("commit id -2^63-1", lambda c: c.m.commit(-2**63 - 1, 1), "seq_id: -9223372036854775809 is out of range"),
    ("append id bool", lambda c: c.m.append(True, [1]), "seq_id must be an int, got bool"),
    ("append id float", lambda c: c.m.append(1.0, [1]), "seq_id must be an int, got float"),
    ("append id numpy float32", lambda c: c.m.append(np.float32(1), [1]), "seq_id must be an int, got a numpy float32"),
    ("commit id float", lambda c: c.m.commit(1.0, 1), "seq_id must be an int, got float"),
    ("commit count bool", lambda c: c.m.commit(1, True), "num_tokens must be an int, got bool"),
    ("commit count float", lambda c: c.m.commit(1, 1.0), "num_tokens must be an int, got float"),
    ("commit count numpy float32", lambda c: c.m.commit(1, np.float32(1)), "num_tokens must be an int, got a numpy f"),
    ("append token 2^63", lambda c: c.m.append(1, [2**63]), "tokens: value 9223372036854775808 does not fit int64"),
    ("append token -2^63-1", lambda c: c.m.append(1, [-2**63 - 1]), "tokens: value -9223372036854775809 does not"),
    ("append token 2^64 id 2^63", lambda c: c.m.append(2**63, [2**64]), "seq_id: 9223372036854775808"),
    ("append token bool", lambda c: c.m.append(1, [True]), r"tokens\[0\] must be an int, got bool"),
    ("append token float", lambda c: c.m.append(1, [1.0]), r"tokens\[0\] must be an int, got float"),
    ("append token numpy float64", lambda c: c.m.append(1, [np.float64(1)]), r"tokens\[0\] must be an int"),
    ("append token numpy float32", lambda c: c.m.append(1, [np.float32(1)]), r"tokens\[0\] must be an int"),
    ("append token str", lambda c: c.m.append(1, ["1"]), r"tokens\[0\] must be an int, got str"),
    ("append tokens 2 ints, 2^63", lambda c: c.m.append(1, [1, 2**63]), "tokens: value 9223372036854775808"),
    ("block_table id 2^63", lambda c: c.m.block_table(2**63), "seq_id: 9223372036854775808"),
    ("info id 2^63", lambda c: c.m.info(2**63), "seq_id: 9223372036854775808"),
    ("fork parent 2^63", lambda c: c.m.fork(2**63, 5), "parent_id: 9223372036854775808"),
    ("fork child 2^63", lambda c: c.m.fork(1, 2**63), "child_id: 9223372036854775808"),
    ("fork_at child 2^63", lambda c: c.m.fork_at(1, 2**63, 4), "child_id: 9223372036854775808"),
    ("rollback id 2^63", lambda c: c.m.rollback(2**63, 0), "seq_id: 9223372036854775808"),
    ("set_window id 2^63", lambda c: c.m.set_window(2**63, 8), "seq_id: 9223372036854775808"),
    ("set_extra_key id 2^63", lambda c: c.m.set_extra_key(2**63, 0, 1), "seq_id: 9223372036854775808"),
    ("can_swap_out id 2^63", lambda c: c.m.can_swap_out(2**63), "seq_id: 9223372036854775808"),
    ("can_swap_in id 2^63", lambda c: c.m.can_swap_in(2**63), "seq_id: 9223372036854775808"),
    ("swap_out id 2^63", lambda c: c.m.swap_out(2**63), "seq_id: 9223372036854775808"),
    ("swap_in id 2^63", lambda c: c.m.swap_in(2**63), "seq_id: 9223372036854775808"),
    ("batch_append ids 2^63", lambda c: c.m.batch_append([2**63], [1]), "seq_ids: value 9223372036854775808"),
    ("batch_commit ids 2^63", lambda c: c.m.batch_commit([2**63]), "seq_ids: value 9223372036854775808"),
    ("batch_export ids 2^63", lambda c: c.m.batch_export([2**63], c.bufs), "seq_ids: value 9223372036854775808"),
    # counts are size_t: never negative
    ("commit -1", lambda c: c.m.commit(1, -1), r"num_tokens: -1 is out of range \[0, 2\^64 - 1\] of size_t"),
    ("commit 2^64", lambda c: c.m.commit(1, BIG64), "num_tokens: 18446744073709551616"),
    ("can_append -1", lambda c: c.m.can_append(1, -1), "num_tokens: -1"),
    ("rollback -1", lambda c: c.m.rollback(1, -1), "num_tokens: -1"),
    ("fork -1", lambda c: c.m.fork(1, 9, -1), "num_tokens: -1"),
    ("fork_at -1", lambda c: c.m.fork_at(1, 9, -1), "num_tokens: -1"),
    ("batch_commit count -1", lambda c: c.m.batch_commit([1], [-1]), "num_tokens: -1 is negative"),
    ("drain_events 0", lambda c: c.m.drain_events(0), "max_events: 0 is out of range"),
    ("drain_events -1", lambda c: c.m.drain_events(-1), "max_events: -1"),
    # salts, extra keys and windows
    ("allocate cache_salt -1", lambda c: c.m.allocate(7, [1], cache_salt=-1), "cache_salt: -1 .*uint64_t"),
    ("allocate cache_salt 2^64", lambda c: c.m.allocate(7, [1], cache_salt=BIG64), "cache_salt: 1844"),
    ("can_allocate cache_salt -1", lambda c: c.m.can_allocate([1], cache_salt=-1), "cache_salt: -1"),
    ("extra key -5", lambda c: c.m.allocate(7, [1], extra_keys={0: -5}), r"extra_keys\[0\]: -5 .*uint64_t"),
    ("extra key 2^64", lambda c: c.m.allocate(7, [1], extra_keys={0: BIG64}), r"extra_keys\[0\]: 1844"),
    ("extra key block -1", lambda c: c.m.allocate(7, [1], extra_keys={-1: 5}), "extra_keys block index: -1"),
    ("extra key block 2^32", lambda c: c.m.allocate(7, [1], extra_keys={BIG32: 5}), "extra_keys block index"),
    ("extra_keys list", lambda c: c.m.allocate(7, [1], extra_keys=[(0, 5)]),
     r"extra_keys must be a mapping \{block index: key\}, got list"),
    ("can_allocate extra_keys list", lambda c: c.m.can_allocate([1], extra_keys=[(0, 5)]), "extra_keys must be"),
    ("allocate window -1", lambda c: c.m.allocate(7, [1], window=-1), r"window: -1 .*uint32_t"),
    ("allocate window 2^32", lambda c: c.m.allocate(7, [1], window=BIG32), "window: 4294967296"),
    ("allocate sink -1", lambda c: c.m.allocate(7, [1], window=8, sink=-1), "sink: -1"),
    ("set_window -1", lambda c: c.m.set_window(1, -1), "window_tokens: -1"),
    ("set_window sink 2^32", lambda c: c.m.set_window(1, 8, BIG32), "sink_tokens: 4294967296"),
    ("set_extra_key block -1", lambda c: c.m.set_extra_key(1, -1, 5), "block_index: -1"),
    ("set_extra_key key -5", lambda c: c.m.set_extra_key(1, 0, -5), "key: -5"),
    ("hash_tokens parent -1", lambda c: kvblock.hash_tokens([1], parent=-1), "parent: -1"),
    # block ids are int32, groups uint32
    ("block_hash 2^31", lambda c: c.m.block_hash(2**31), r"block_id: 2147483648 is out of range \[-2\^31, "
                                                         r"2\^31 - 1\] of int32_t"),
    ("block_hash -2^31-1", lambda c: c.m.block_hash(-2**31 - 1), "block_id: -2147483649"),
    ("block_table group -1", lambda c: c.m.block_table(1, group=-1), "group: -1"),
    ("block_table group 2^32", lambda c: c.m.block_table(1, group=BIG32), r"group: 4294967296 is out of range"),
    ("block_table group bool", lambda c: c.m.block_table(1, group=False), "group must be an int, got bool"),
    ("block_table group float", lambda c: c.m.block_table(1, group=0.0), "group must be an int, got float"),
    ("block_table id bool", lambda c: c.m.block_table(True), "seq_id must be an int, got bool"),
    ("block_table id -2^63-1", lambda c: c.m.block_table(-2**63 - 1), "seq_id: -9223372036854775809 is out"),
    ("block_table id 2^63 group 2^32", lambda c: c.m.block_table(2**63, BIG32), "seq_id: 9223372036854775808"),
    ("batch_export group -1", lambda c: c.m.batch_export(c.ids, c.bufs, group=-1), "group: -1"),
    ("batch_export group 2^32", lambda c: c.m.batch_export(c.ids, c.bufs, group=BIG32), "group: 4294967296"),
    ("batch_export buffers str", lambda c: c.m.batch_export(c.ids, "x"),
     "buffers must be a kvblock.BatchBuffers or None, got str"),
    # kernels: window and sink are uint32, scale and soft cap real numbers, layer an int
    ("paged window -1", lambda c: c.attention(window=-1), r"window: -1 .*uint32_t"),
    ("paged window 2^32", lambda c: c.attention(window=BIG32), "window: 4294967296"),
    ("paged sink -1", lambda c: c.attention(window=8, sink=-1), "sink: -1"),
    ("paged sink 2^32", lambda c: c.attention(window=8, sink=BIG32), "sink: 4294967296"),
    ("paged scale str", lambda c: c.attention(scale="1"), "scale must be a real number, got str"),
    ("paged soft_cap None", lambda c: c.attention(soft_cap=None), "soft_cap must be a real number"),
    ("prefill window -1", lambda c: c.prefill(window=-1), "window: -1"),
    ("prefill sink 2^32", lambda c: c.prefill(window=8, sink=BIG32), "sink: 4294967296"),
    ("write_kv layer True", lambda c: kvblock.write_kv(c.cache, True, np.zeros((1, KVH, D), np.float32),
                                                       np.zeros((1, KVH, D), np.float32), np.zeros(1, np.int64)),
     "layer must be an int, got bool"),
    ("paged layer 1.0", lambda c: kvblock.paged_attention(c.cache, 1.0, c.q, c.bt, c.sl, c.out),
     "layer must be an int, got float"),
    ("KVCache num_blocks -1", lambda c: kvblock.KVCache(1, -1, BS, KVH, D), "num_blocks: -1"),
    ("KVCache block_size 2^32", lambda c: kvblock.KVCache(1, 4, BIG32, KVH, D), "block_size: 4294967296"),
    ("KVCache num_layers -1", lambda c: kvblock.KVCache(-1, 4, BS, KVH, D), "num_layers: -1"),
    ("KVCache head_dim bool", lambda c: kvblock.KVCache(1, 4, BS, KVH, True), "head_dim must be an int, got bool"),
    ("KVCache dtype", lambda c: kvblock.KVCache(1, 4, BS, KVH, D, "int8"), "dtype must be one of"),
    ("KVCache device CPU", lambda c: kvblock.KVCache(1, 4, BS, KVH, D, device="CPU"),
     r"device must be 'cpu', 'cuda' or 'cuda:N' .*got 'CPU'"),
    ("KVCache device tpu", lambda c: kvblock.KVCache(1, 4, BS, KVH, D, device="tpu"), "got 'tpu'"),
    ("KVCache device cuda:x", lambda c: kvblock.KVCache(1, 4, BS, KVH, D, device="cuda:x"), "got 'cuda:x'"),
    ("KVCache device int", lambda c: kvblock.KVCache(1, 4, BS, KVH, D, device=0), "got 0"),
    ("KVCache.wrap 2^32+1 blocks", lambda c: kvblock.KVCache.wrap([_HugeCache()], [_HugeCache()]),
     r"k_layers\[0\]: dimension num_blocks: 4294967297 is out of range"),
    ("take_fault device 2^31", lambda c: kvblock.take_fault(2**31), r"device: index 2147483648"),
    ("take_fault stream 2^64", lambda c: kvblock.take_fault(0, stream=BIG64), "stream: 18446744073709551616"),
    ("write_kv stream -1", lambda c: kvblock.write_kv(c.cache, 0, np.zeros((1, KVH, D), np.float32),
                                                      np.zeros((1, KVH, D), np.float32), np.zeros(1, np.int64),
                                                      stream=-1), "stream: -1 is out of range"),
    # batch buffers: kvb_batch's sizes are uint32
    ("BatchBuffers max_seqs -1", lambda c: kvblock.BatchBuffers(-1), "max_seqs: -1"),
    ("BatchBuffers max_blocks 2^32", lambda c: kvblock.BatchBuffers(4, BIG32), "max_blocks_per_seq: 4294967296"),
    ("BatchBuffers slots str", lambda c: kvblock.BatchBuffers(4, 4, "8"), "slot_capacity must be an int, got str"),
]


@pytest.fixture(scope="module")
def ctx():
    c = Ctx()
    yield c
    c.m.close()


@pytest.mark.parametrize("call,match", [(fn, match) for _, fn, match in CASES], ids=[c[0] for c in CASES])
def test_refused_with_the_argument_named(ctx, call, match):
    before = (ctx.m.info(1), ctx.m.num_free_blocks, ctx.m.block_table(1).tolist())
    with pytest.raises(kvblock.KvbArgumentError, match=match) as err:
        call(ctx)
    assert isinstance(err.value, TypeError) and isinstance(err.value, ValueError)
    assert err.value.status == kvblock.Status.INVALID_ARGUMENT
    assert (ctx.m.info(1), ctx.m.num_free_blocks, ctx.m.block_table(1).tolist()) == before  # nothing changed
    ctx.m.check_invariants()


def test_overflow_refusals_carry_no_cffi_context(ctx):
    """append / commit learn of a value out of range from cffi's OverflowError: the KvbArgumentError
    replaces it (a traceback shows the refusal only) and the sequence is untouched."""
    for call in (lambda: ctx.m.append(1, [2**63]), lambda: ctx.m.commit(1, 2**64), lambda: ctx.m.commit(2**63, 1),
                 lambda: ctx.m.block_table(1, 2**32)):
        with pytest.raises(kvblock.KvbArgumentError) as err:
            call()
        assert err.value.__suppress_context__ and err.value.__cause__ is None
        assert "During handling of the above exception" not in "".join(traceback.format_exception(err.value))
    assert ctx.m.info(1).num_tokens == 9


def test_per_sequence_calls_take_numpy_ints_and_the_limits():
    """The fast paths take exact ints; numpy integers go the slow way, and the int64 / size_t / uint32 limits
    pass the checks (the library then rules)."""
    with kvblock.Manager(16, BS) as m:
        m.allocate(2**63 - 1, [1, 2])
        m.commit(np.int64(2**63 - 1), np.uint64(2))
        m.append(np.int64(2**63 - 1), [np.int64(-2**63)])
        m.append(2**63 - 1, [2**63 - 1])
        m.append(2**63 - 1, [np.uint64(5), 6])
        assert m.info(2**63 - 1).num_tokens == 6
        m.commit(2**63 - 1, 4)
        assert m.block_table(np.int64(2**63 - 1), np.uint32(0)).tolist() == m.block_table(2**63 - 1).tolist()
        with pytest.raises(kvblock.KvbError) as err:  # fits uint32: the library refuses the group
            m.block_table(2**63 - 1, 2**32 - 1)
        assert not isinstance(err.value, kvblock.KvbArgumentError)
        with pytest.raises(kvblock.KvbError, match="exceeds") as err:  # fits size_t: the library refuses
            m.commit(2**63 - 1, 2**64 - 1)
        assert not isinstance(err.value, kvblock.KvbArgumentError)
        with pytest.raises(kvblock.KvbError) as err:  # fits int64: no such sequence, the library's refusal
            m.append(-2**63, [2**63 - 1])
        assert not isinstance(err.value, kvblock.KvbArgumentError)


def test_largest_values_still_accepted():
    """The checks refuse exactly what the C types cannot hold: their limits pass (the library then rules)."""
    with kvblock.Manager(16, BS, index_seed=2**64 - 1) as m:
        m.allocate(2**63 - 1, [1, 2], cache_salt=2**64 - 1, extra_keys={0: 2**64 - 1})
        m.allocate(-2**63, [1, 2])
        m.commit(-2**63, np.uint64(2))
        assert m.block_hash(np.int32(15)) is None
        with pytest.raises(kvblock.KvbError, match="block id 2147483647 is out of range") as err:
            m.block_hash(2**31 - 1)  # fits int32_t: the library's refusal, with the pool's bound
        assert not isinstance(err.value, kvblock.KvbArgumentError)
        assert m.can_allocate([1, 2, 3], cache_salt=np.uint64(2**64 - 1)) is not None
        with pytest.raises(kvblock.KvbError) as err:  # within uint32 and int64: the library's own refusal
            m.commit(2**63 - 1, 2**64 - 1)
        assert not isinstance(err.value, kvblock.KvbArgumentError)


def _publisher_cases():
    pytest.importorskip("zmq")
    pytest.importorskip("msgpack")
    ep = "tcp://127.0.0.1:*"
    return [
        (dict(endpoint=ep, topic=5), "topic must be a str or bytes"),
        (dict(endpoint=ep, hwm=-5), "hwm: -5 is out of range"),
        (dict(endpoint=ep, hwm=2**31), "hwm: 2147483648"),
        (dict(endpoint=ep, dp_rank=True), "dp_rank must be an int, got bool"),
        (dict(endpoint=ep, dp_rank=-1), "dp_rank: -1"),
        (dict(endpoint="tcp://127.0.0.1:99999"), r"endpoint 'tcp://127.0.0.1:99999': the port must be"),
        (dict(endpoint="tcp://127.0.0.1:-1"), "the port must be"),
        (dict(endpoint="tcp://127.0.0.1"), "the port must be"),
        (dict(endpoint=ep, replay_endpoint="tcp://127.0.0.1:70000"), "replay_endpoint 'tcp://127.0.0.1:70000'"),
        (dict(endpoint=5), "endpoint must be a ZMQ endpoint string"),
        (dict(endpoint=ep, linger_ms=-2), "linger_ms: -2"),
        (dict(endpoint=ep, max_queue_batches=0), "max_queue_batches: 0"),
        (dict(endpoint=ep, drain_capacity=True), "drain_capacity must be an int, got bool"),
        (dict(endpoint=ep, lora_name=5), "lora_name must be a str or None"),
    ]


def test_publisher_arguments_refused():
    from kvblock.events import KvEventPublisher
    with kvblock.Manager(8, BS, events=True) as m:
        for kwargs, match in _publisher_cases():
            with pytest.raises(kvblock.KvbArgumentError, match=match):
                KvEventPublisher(m, **kwargs)
        pub = KvEventPublisher(m, endpoint="tcp://127.0.0.1:*", topic=b"t", dp_rank=3, hwm=0)
        pub.close()
        with pytest.raises(kvblock.KvbClosedError, match="KvEventPublisher on tcp://127.0.0.1:.* is closed"):
            pub.flush()
