"""The Manager over the whole C API: core flow, errors, fork/CoW, rollback, window, swap, events, stats."""

import numpy as np
import pytest

import kvblock

BLOCK = 16


def test_versions():
    major, minor, patch = map(int, kvblock.library_version().split("."))
    assert kvblock.ffi.string(kvblock._lib.lib.kvb_version_string()).decode() == kvblock.library_version()
    assert kvblock._lib.lib.kvb_version() == major * 10000 + minor * 100 + patch
    assert kvblock.__version__
    assert kvblock.cuda_device_count() >= 0


def test_engine_loop(mgr):
    prompt = list(range(1000, 1040))  # 40 tokens: 2 full blocks + 8
    assert mgr.can_allocate(prompt) == 0
    assert mgr.allocate(1, prompt) == 0
    mgr.commit(1, len(prompt))
    for t in range(30):  # 70 tokens -> 5 blocks
        assert mgr.can_append(1)
        mgr.append(1, [t])
        mgr.commit(1, 1)
    table = mgr.block_table(1)
    assert isinstance(table, np.ndarray) and table.dtype == np.int32
    assert len(table) == 5 and len(set(table.tolist())) == 5
    assert mgr.num_free_blocks == 3
    second = prompt[:32] + [5, 6, 7]
    assert mgr.allocate(2, second) == 32
    assert (mgr.block_table(2)[:2] == table[:2]).all()
    mgr.commit(2, len(second) - 32)
    info = mgr.info(2)
    assert (info.num_tokens, info.num_computed, info.num_cached, info.swapped_out) == (35, 35, 32, False)
    assert mgr.block_hash(int(table[0])) == kvblock.hash_tokens(prompt[:16])
    assert mgr.block_hash(int(table[1])) == kvblock.hash_tokens(prompt[16:32], parent=kvblock.hash_tokens(prompt[:16]))
    assert mgr.block_hash(int(table[4])) is None  # partial
    mgr.free(1)
    mgr.free(2)
    stats = mgr.stats()
    assert stats["num_seqs"] == 0 and stats["used_blocks"] == 0 and stats["free_blocks"] == 8
    assert stats["hit_tokens"] == 32 and stats["query_tokens"] == len(prompt) + len(second)
    mgr.reset_prefix_cache()
    assert mgr.stats()["cached_free_blocks"] == 0


def test_out_of_blocks(mgr):
    mgr.allocate(1, range(6 * BLOCK))
    mgr.commit(1, 6 * BLOCK)
    assert mgr.can_allocate(range(5000, 5000 + 3 * BLOCK)) is None
    with pytest.raises(kvblock.KvbError) as err:
        mgr.allocate(2, range(5000, 5000 + 3 * BLOCK))
    assert err.value.status == kvblock.Status.OUT_OF_BLOCKS and err.value.name == "KVB_ERR_OUT_OF_BLOCKS"
    assert err.value.message
    assert mgr.num_free_blocks == 2
    appended = 0
    while mgr.can_append(1):
        mgr.append(1, [appended])
        mgr.commit(1, 1)
        appended += 1
    assert appended == 2 * BLOCK
    with pytest.raises(kvblock.KvbError, match="KVB_ERR_OUT_OF_BLOCKS"):
        mgr.append(1, [0])


def test_error_path(mgr):
    with pytest.raises(kvblock.KvbError) as err:
        mgr.commit(42, 1)
    assert err.value.status == kvblock.Status.NO_SUCH_SEQUENCE and "42" in err.value.message
    mgr.allocate(7, [1, 2, 3])
    with pytest.raises(kvblock.KvbError) as err:
        mgr.allocate(7, [1, 2, 3])
    assert err.value.status == kvblock.Status.SEQUENCE_EXISTS
    with pytest.raises(kvblock.KvbError) as err:
        mgr.commit(7, 4)
    assert str(err.value).startswith(err.value.name)
    with pytest.raises(kvblock.KvbError) as err:
        kvblock.Manager(num_blocks=0)
    assert err.value.status == kvblock.Status.INVALID_ARGUMENT


def test_closed_manager():
    m = kvblock.Manager(num_blocks=4)
    with m:
        pass
    with pytest.raises(ValueError):
        m.allocate(1, [1])
    m.close()


def test_fork_copy_on_write_rollback(mgr):
    mgr.allocate(1, range(20))  # 1 full block + 4 tokens
    mgr.commit(1, 20)
    mgr.fork(1, 2)
    mgr.fork_at(1, 3, 16)
    assert (mgr.block_table(2) == mgr.block_table(1)).all()
    assert mgr.info(3).num_tokens == 16
    mgr.append(2, [99])
    pairs = mgr.drain_copies()
    assert pairs.shape == (1, 2) and pairs.dtype == np.int32
    assert pairs[0, 0] == mgr.block_table(1)[1] and pairs[0, 1] == mgr.block_table(2)[1]
    assert mgr.drain_copies().shape == (0, 2)
    mgr.commit(2, 1)
    mgr.rollback(2, 5)
    assert mgr.info(2).num_tokens == 16


def test_window_and_options():
    with kvblock.Manager(num_blocks=32, block_size=4) as m:
        m.allocate(1, range(40), cache_salt=7, extra_keys={0: 123})
        m.commit(1, 40)
        m.set_window(1, 8, 4)
        table = m.block_table(1)
        assert table[0] >= 0 and (table[1:8] == -1).all() and (table[8:] >= 0).all()
        assert m.info(1).window_tokens == 8
        assert m.can_allocate(range(40)) == 0  # different salt: no hit
        assert m.can_allocate(range(40), cache_salt=7, extra_keys={0: 123}) == 36  # released blocks stay cached
        cached = m.allocate(2, range(12), cache_salt=7, extra_keys={0: 123})
        m.commit(2, 12 - cached)
        m.set_extra_key(2, 5, 9)
        assert m.allocate(3, list(range(12)) + [1], cache_salt=7, extra_keys={0: 123}) == 12
        m.check_invariants()


def test_swap_out_in():
    with kvblock.Manager(num_blocks=8, block_size=4, num_host_blocks=8) as m:
        m.allocate(1, range(10))
        m.commit(1, 10)
        assert m.can_swap_out(1) == kvblock.Availability.OK
        device = m.block_table(1)
        out = m.swap_out(1)
        assert out.shape == (3, 2) and (out[:, 0] == device).all()
        assert m.info(1).swapped_out
        with pytest.raises(kvblock.KvbError) as err:
            m.block_table(1)
        assert err.value.status == kvblock.Status.BAD_STATE
        assert m.can_swap_in(1) == kvblock.Availability.OK
        back = m.swap_in(1)
        assert (back[:, 0] == out[:, 1]).all() and (back[:, 1] == m.block_table(1)).all()
        assert m.stats()["swapped_out_blocks"] == 3


def test_events():
    with kvblock.Manager(num_blocks=8, block_size=4, events=True) as m:
        m.allocate(1, range(9), cache_salt=5)
        m.commit(1, 9)
        events, dropped = m.drain_events()
        assert dropped == 0 and [e.type for e in events] == ["stored", "stored"]
        assert events[0].cache_salt == 5 and events[0].parent_hash is None
        assert events[1].parent_hash == events[0].block_hash
        assert events[1].tokens.tolist() == [4, 5, 6, 7]
        m.free(1)
        m.reset_prefix_cache()
        events, _ = m.drain_events()
        assert events[-1].type == "cleared"


def test_batch_calls_match_per_sequence_calls():
    rng = np.random.default_rng(1)
    a, b = kvblock.Manager(64, 4), kvblock.Manager(64, 4)
    ids = np.arange(6, dtype=np.int64)
    prompts = [rng.integers(0, 5, 5 + i) for i in range(6)]
    for m in (a, b):
        for i in range(6):
            m.allocate(i, prompts[i])
    bufs = kvblock.BatchBuffers(2, 1, 1)  # too small: grows
    for step in range(20):
        order = rng.permutation(ids)
        toks = rng.integers(0, 1000, len(order))
        batch = a.batch_export(order, bufs)
        counts = [a.info(int(i)).num_tokens - a.info(int(i)).num_computed for i in order]
        assert batch.num_slots == sum(counts)
        assert (batch.query_start == np.concatenate([[0], np.cumsum(counts)])).all()
        for r, i in enumerate(order):
            table = b.block_table(int(i))
            assert (batch.block_tables[r, : len(table)] == table).all()
            assert (batch.block_tables[r, len(table):] == -1).all()
            assert batch.seq_lens[r] == b.info(int(i)).num_tokens
        a.batch_commit(order)
        for i in order:
            b.commit(int(i), b.info(int(i)).num_tokens - b.info(int(i)).num_computed)
        a.batch_append(order, toks)
        for i, t in zip(order, toks):
            b.append(int(i), [int(t)])
    for i in ids:
        assert (a.block_table(int(i)) == b.block_table(int(i))).all()
    assert a.stats() == b.stats()
    with pytest.raises(kvblock.KvbError, match="appears twice"):
        a.batch_append([1, 1], [2, 3])
    with pytest.raises(kvblock.KvbArgumentError, match="tokens has 1"):
        a.batch_append([1, 2], [2])
    with pytest.raises(kvblock.KvbError, match="exceeds"):
        a.batch_commit([1, 2], [5, 0])
    a.batch_commit([1, 2], np.array([1, 0], np.uint8))
    a.check_invariants()


def test_block_table_of_any_length_after_longer_and_shorter_ones():
    """block_table first tries a buffer of the longest table seen (capped): tables shorter, longer and far
    longer than that come back whole and exact, each its own array."""
    with kvblock.Manager(num_blocks=16000, block_size=1) as m:
        lens = [1, 200, 3, 5000, 2, 4097, 4096]
        for i, n in enumerate(lens):
            m.allocate(i, list(range(10_000 * i, 10_000 * i + n)))
        tables = [m.block_table(i) for i in range(len(lens))]
        assert [len(t) for t in tables] == lens
        assert len({int(b) for t in tables for b in t}) == sum(lens)  # no table shares a block with another
        again = m.block_table(0)
        assert again.tolist() == tables[0].tolist() and again is not tables[0]
