"""Manager(host_cache=True): the host prefix-cache level through the package. The randomized test moves real
K/V bytes: every token's K row holds its token id, offloads and loads run with swap_blocks in the header's
order, and every cached token a sequence is handed (device or host hit) must read back its own token id."""
import os
import random

import numpy as np
import pytest

import kvblock

QUICK = os.environ.get("KVB_TEST_QUICK", "") not in ("", "0")


def _write_tokens(m, cache, sid, tokens, start):
    """K/V of tokens[start:] into the sequence's slots (K = token id, V = -token id), then commit them."""
    bt, bs = m.block_table(sid), m.block_size
    pos = np.arange(start, len(tokens))
    slots = (bt[pos // bs].astype(np.int64) * bs + pos % bs)
    k = np.repeat(np.asarray(tokens[start:], np.float32)[:, None, None], cache.head_dim, axis=2)
    kvblock.write_kv(cache, 0, k, -k, slots)
    m.commit(sid, len(tokens) - start)


def _read_tokens(m, cache, sid, n):
    """Token ids as the cache holds them for the sequence's first n tokens (K and V must agree)."""
    bt, bs = m.block_table(sid), m.block_size
    pos = np.arange(n)
    k = cache.k[0][bt[pos // bs], pos % bs]
    v = cache.v[0][bt[pos // bs], pos % bs]
    assert (k == k[:, :, :1]).all() and (v == -k).all()
    return k[:, 0, 0].astype(np.int64).tolist()


def _random_workload(twin_percent):
    """Random prompts over shared stems on a small device pool and host level, with real K/V moved by the
    kernels; checks every hit's bytes and every live sequence's bytes after every step. Returns stats()."""
    bs, num_blocks, num_host = 4, 10, 12
    m = kvblock.Manager(num_blocks, bs, num_host_blocks=num_host, host_cache=True,
                        host_cache_twin_percent=twin_percent)
    dev = kvblock.KVCache(1, num_blocks, bs, 1, 64)
    host = kvblock.KVCache(1, num_host, bs, 1, 64)
    rng = random.Random(7)
    families = [[rng.randrange(1, 10_000) for _ in range(16)] for _ in range(5)]
    live, next_id = {}, 0
    for _ in range(60 if QUICK else 400):
        prompt = families[rng.randrange(5)][: rng.choice([4, 8, 12, 16])] + [rng.randrange(1, 10_000)
                                                                            for _ in range(rng.randrange(1, 6))]
        if m.can_allocate(prompt) is None:
            if live:
                sid = rng.choice(list(live))
                del live[sid]
                m.free(sid)
            continue
        next_id += 1
        cached = m.allocate(next_id, prompt)
        offloads, loads = m.drain_host_transfers()
        kvblock.swap_blocks(dev, host, offloads)  # all offloads, then all loads
        kvblock.swap_blocks(host, dev, loads)
        assert _read_tokens(m, dev, next_id, cached) == prompt[:cached]
        _write_tokens(m, dev, next_id, prompt, cached)
        live[next_id] = prompt
        for sid, toks in live.items():  # nothing a live sequence holds was overwritten
            assert _read_tokens(m, dev, sid, len(toks)) == toks
        if len(live) > 2 or rng.random() < 0.5:
            sid = rng.choice(list(live))
            del live[sid]
            m.free(sid)
        m.check_invariants()
    return m.stats()


@pytest.mark.parametrize("twin_percent", [None, 0, 100])
def test_host_cache_bytes_survive_offload_and_load(twin_percent):
    st = _random_workload(twin_percent)
    assert st["host_hit_tokens"] > 0 and st["device_hit_tokens"] > 0 and st["host_evictions"] > 0
    assert st["device_hit_tokens"] + st["host_hit_tokens"] == st["hit_tokens"]
    assert st["loaded_blocks"] > 0 and st["offloaded_blocks"] >= st["cached_host_blocks"] > 0


def test_drain_returns_pairs_and_grows_its_buffers():
    bs = 4
    with kvblock.Manager(200, bs, num_host_blocks=200, host_cache=True) as m:
        a, b = list(range(1, 601)), list(range(1001, 1601))  # 150 blocks each
        m.allocate(1, a)
        m.commit(1, len(a))
        m.free(1)
        m.allocate(2, b)  # takes the 50 untouched blocks, then evicts 100 of a's: 100 offloads
        offloads, loads = m.drain_host_transfers()
        assert offloads.dtype == np.int32 and offloads.shape == (100, 2) and loads.shape == (0, 2)
        assert len(set(offloads[:, 0])) == 100 and len(set(offloads[:, 1])) == 100
        assert set(offloads[:, 0]) <= set(range(200)) and set(offloads[:, 1]) <= set(range(200))
        off2, load2 = m.drain_host_transfers()  # drained means gone
        assert off2.shape == (0, 2) and load2.shape == (0, 2)
        m.commit(2, len(b))
        m.free(2)
        assert m.allocate(3, a) == len(a) - bs  # every block but the last: hits on the host (and device)
        offloads, loads = m.drain_host_transfers()
        assert loads.shape[0] > 64 and set(loads[:, 1]) <= set(m.block_table(3))
        st = m.stats()
        assert st["host_hit_tokens"] == loads.shape[0] * bs and st["loaded_blocks"] == loads.shape[0]
        m.check_invariants()


def test_host_cache_off_and_bad_config():
    with kvblock.Manager(8, 4, num_host_blocks=8) as m:
        assert not m.host_cache
        m.allocate(1, range(20))
        m.commit(1, 20)
        m.free(1)
        m.allocate(2, range(100, 120))
        offloads, loads = m.drain_host_transfers()
        assert offloads.shape == (0, 2) and loads.shape == (0, 2)
        assert m.stats()["offloaded_blocks"] == 0
    with pytest.raises(kvblock.KvbError, match="num_host_blocks") as e:
        kvblock.Manager(8, 4, host_cache=True)
    assert e.value.status == kvblock.Status.INVALID_ARGUMENT


def test_twin_percent_reaches_the_library():
    """host_cache_twin_percent changes what the host keeps: the same workload moves other blocks (the
    library's twin budget is 0 blocks at 0 percent and every host block at 100); out of range is refused."""
    exclusive, inclusive = _random_workload(0), _random_workload(100)
    keys = ("host_hit_tokens", "offloaded_blocks", "loaded_blocks", "host_evictions")
    assert [exclusive[k] for k in keys] != [inclusive[k] for k in keys]
    with pytest.raises(kvblock.KvbError, match="host_cache_twin_percent 101"):
        kvblock.Manager(8, 4, num_host_blocks=8, host_cache=True, host_cache_twin_percent=101)
    with pytest.raises(kvblock.KvbArgumentError, match="host_cache_twin_percent"):
        kvblock.Manager(8, 4, num_host_blocks=8, host_cache=True, host_cache_twin_percent=-1)
