"""pytest suite: the engine loop through the wrapper, the error path, and CPU paged attention."""
import array

import pytest

import kvblock

BLOCK = 16


@pytest.fixture
def mgr():
    with kvblock.Manager(num_blocks=8, block_size=BLOCK) as m:
        yield m
        m.check_invariants()


def test_version():
    major, minor, patch = map(int, kvblock.version().split("."))
    assert kvblock.lib.kvb_version() == major * 10000 + minor * 100 + patch


def test_engine_loop(mgr):
    prompt = list(range(1000, 1040))  # 40 tokens: 2 full blocks + 8
    assert mgr.can_allocate(prompt) == 0
    assert mgr.allocate(1, prompt) == 0
    mgr.commit(1, len(prompt))
    for t in range(30):  # decode 30 tokens one at a time: 70 tokens -> 5 blocks
        assert mgr.can_append(1)
        mgr.append(1, [t])
        mgr.commit(1, 1)
    table = mgr.block_table(1)
    assert len(table) == 5 and len(set(table)) == 5
    assert mgr.num_free_blocks == 3

    # A second request sharing the 32-token prefix hits the two full blocks of seq 1.
    second = prompt[:32] + [5, 6, 7]
    assert mgr.allocate(2, second) == 32
    assert mgr.block_table(2)[:2] == table[:2]
    mgr.commit(2, len(second) - 32)

    mgr.free(1)
    mgr.free(2)
    stats = mgr.stats()
    assert stats["num_seqs"] == 0 and stats["used_blocks"] == 0 and stats["free_blocks"] == 8
    assert stats["hit_tokens"] == 32 and stats["query_tokens"] == len(prompt) + len(second)
    assert stats["cached_free_blocks"] >= 2


def test_out_of_blocks(mgr):
    mgr.allocate(1, range(6 * BLOCK))  # 6 of 8 blocks
    mgr.commit(1, 6 * BLOCK)
    assert mgr.can_allocate(range(5000, 5000 + 3 * BLOCK)) is None
    with pytest.raises(kvblock.KvbError) as err:
        mgr.allocate(2, range(5000, 5000 + 3 * BLOCK))
    assert err.value.status == kvblock.Status.OUT_OF_BLOCKS
    assert err.value.name == "KVB_ERR_OUT_OF_BLOCKS"
    assert err.value.message  # kvb_last_error() detail
    assert mgr.num_free_blocks == 2  # a failed call changes nothing
    # Decode until the pool runs dry: append raises, can_append answers False.
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
        mgr.commit(42, 1)  # no such sequence
    assert err.value.status == kvblock.Status.NO_SUCH_SEQUENCE
    assert "42" in err.value.message
    mgr.allocate(7, [1, 2, 3])
    with pytest.raises(kvblock.KvbError) as err:
        mgr.allocate(7, [1, 2, 3])
    assert err.value.status == kvblock.Status.SEQUENCE_EXISTS
    with pytest.raises(kvblock.KvbError) as err:
        mgr.commit(7, 4)  # more than the 3 uncomputed tokens
    assert err.value.status < 0 and str(err.value).startswith(err.value.name)
    with pytest.raises(kvblock.KvbError) as err:
        kvblock.Manager(num_blocks=0)
    assert err.value.status == kvblock.Status.INVALID_ARGUMENT


def test_closed_manager():
    m = kvblock.Manager(num_blocks=4)
    with m:
        pass
    with pytest.raises(ValueError):
        m.allocate(1, [1])
    m.close()  # idempotent


def test_token_buffers_without_copy(mgr):
    np = pytest.importorskip("numpy")
    tokens = np.arange(200, 240, dtype=np.int64)
    assert mgr.allocate(1, tokens) == 0
    mgr.commit(1, 40)
    assert mgr.allocate(2, array.array("q", range(200, 240))) == 32  # another int64 buffer
    assert mgr.allocate(3, np.arange(200, 240, dtype=np.int32)) == 32  # converted (copied)
    assert mgr.allocate(4, tokens[::2]) == 0  # strided view: copied, different tokens
    assert kvblock.hash_tokens(tokens[:BLOCK]) == kvblock.hash_tokens(list(range(200, 216)))


@pytest.mark.skipif(not kvblock.HAS_KERNELS, reason="kernel API not in abi/kvblock.h yet")
@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("float16", 2e-3)])
def test_cpu_paged_attention(mgr, dtype, tol):
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    kv_heads, q_heads, head_dim = 2, 4, 64
    shape = (8, BLOCK, kv_heads, head_dim)
    k_cache, v_cache = np.zeros(shape, dtype), np.zeros(shape, dtype)

    # Two sequences, their K/V written through the manager's block tables.
    lens = [37, 20]
    keys, values = [], []
    for sid, n in enumerate(lens):
        mgr.allocate(sid, range(sid * 100, sid * 100 + n))
        table = np.array(mgr.block_table(sid), np.int64)
        pos = np.arange(n)
        slots = table[pos // BLOCK] * BLOCK + pos % BLOCK
        k = rng.standard_normal((n, kv_heads, head_dim)).astype(dtype)
        v = rng.standard_normal((n, kv_heads, head_dim)).astype(dtype)
        kvblock.write_kv(k_cache, v_cache, k, v, slots)
        mgr.commit(sid, n)
        keys.append(k)
        values.append(v)

    width = max(len(mgr.block_table(s)) for s in range(len(lens)))
    tables = np.full((len(lens), width), -1, np.int32)
    for s in range(len(lens)):
        t = mgr.block_table(s)
        tables[s, :len(t)] = t
    q = rng.standard_normal((len(lens), q_heads, head_dim)).astype(dtype)
    out = np.empty_like(q)
    kvblock.paged_attention(k_cache, v_cache, q, tables, np.array(lens, np.int32), out)

    scale = 1.0 / np.sqrt(head_dim)
    group = q_heads // kv_heads
    for s, n in enumerate(lens):
        k = np.repeat(keys[s].astype(np.float64), group, axis=1)  # [n, q_heads, d]
        v = np.repeat(values[s].astype(np.float64), group, axis=1)
        logits = np.einsum("hd,nhd->hn", q[s].astype(np.float64), k) * scale
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        ref = np.einsum("hn,nhd->hd", p, v)
        np.testing.assert_allclose(out[s].astype(np.float64), ref, atol=tol, rtol=tol)


@pytest.mark.skipif(not kvblock.HAS_KERNELS, reason="kernel API not in abi/kvblock.h yet")
def test_kernel_error_path():
    np = pytest.importorskip("numpy")
    cache = np.zeros((4, BLOCK, 1, 64), np.float32)
    key = np.zeros((1, 1, 64), np.float32)
    with pytest.raises(kvblock.KvbError) as err:
        kvblock.write_kv(cache, cache.copy(), key, key, np.array([4 * BLOCK], np.int64))  # slot out of range
    assert err.value.status == kvblock.Status.INVALID_ARGUMENT
