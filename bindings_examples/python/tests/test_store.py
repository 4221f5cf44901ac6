"""The store tier from Python (kvblock.store): the directory store, a Python store through cffi callbacks
on a dict and on a real redis-server started on a loopback port, and every failure the store can have
(a key gone between lookup and get, corrupted or short bytes, a back end that raises, the server killed
mid-run): the manager stays consistent and nothing wrong is attended (store_helpers.Rig checks each block's
bytes against its prefix before a step would read it)."""
from __future__ import annotations

import struct

import pytest

import kvblock
from kvblock.store import RECORD_HEADER, CallbackStore, DirStore, MemoryBackend, fold_key, open_store
from store_helpers import BS, Recording, Rig, callback_store, prompt


def fill_store(rig: Rig, tokens: list) -> None:
    """Runs tokens, then enough other prompts that its blocks leave the device and the host tier."""
    assert rig.run(tokens) == (0, 0)
    for k in range(1, 4):
        rig.run(prompt(100 + k, 3))


def dir_factory(tmp_path):
    return lambda host: DirStore(str(tmp_path / "store"), host, write_through=True)


@pytest.fixture(params=["dir", "memory"])
def factory(request, tmp_path):
    if request.param == "dir":
        return dir_factory(tmp_path)
    return callback_store(MemoryBackend())


def test_second_manager_finds_the_first_ones_blocks(factory):
    p = prompt(1, 4)
    a = Rig(factory)
    fill_store(a, p)
    st = a.mgr.stats()
    assert st["store_put_blocks"] >= 4 and st["store_put_failures"] == 0
    a.close()
    b = Rig(factory)  # a fresh engine: empty device and host caches, the same store
    assert b.run(p) == (4 * BS, 4 * BS)  # every full block but the last one's, with the right bytes
    st = b.mgr.stats()
    assert (st["store_hit_tokens"], st["store_get_blocks"], st["store_get_failures"]) == (4 * BS, 4, 0)
    assert b.run(p) == (4 * BS, 4 * BS)  # now device hits
    assert b.mgr.stats()["store_get_blocks"] == 4
    b.close()


def test_other_namespace_never_matches(tmp_path):
    p = prompt(2, 3)
    a = Rig(lambda h: DirStore(str(tmp_path), h, model_id=1, write_through=True))
    fill_store(a, p)
    a.close()
    b = Rig(lambda h: DirStore(str(tmp_path), h, model_id=2, write_through=True))
    assert b.run(p) == (0, 0)
    b.close()
    assert fold_key(a.store.namespace, 1, 2) != fold_key(b.store.namespace, 1, 2)


def test_puts_are_store_events_on_the_wire(tmp_path):
    from kvblock import events
    rig = Rig(dir_factory(tmp_path), events=True)
    fill_store(rig, prompt(10, 4))
    evs, dropped = rig.mgr.drain_events(100000)
    stored = [e for e in evs if e.medium == kvblock.Medium.STORE]
    assert dropped == 0 and all(e.type == "stored" for e in stored)
    assert len(stored) == rig.mgr.stats()["store_put_blocks"] >= 4
    wire = events.group_events(stored, BS)
    assert {e["medium"] for e in wire} == {"STORE"}
    assert sum(len(e["block_hashes"]) for e in wire) == len(stored)
    rig.close()


def test_set_store_argument_checks(tmp_path):
    with kvblock.Manager(8, BS) as m:  # no host cache: the store has no staging blocks
        host = kvblock.KVCache(1, 4, BS, 1, 8)
        s = DirStore(str(tmp_path), host)
        with pytest.raises(kvblock.KvbError, match="host"):
            m.set_store(s)
        with pytest.raises(kvblock.KvbArgumentError, match="must be a kvblock.store store"):
            m.set_store(object())
        s.close()
    with pytest.raises(kvblock.KvbArgumentError, match="dir:PATH, redis://"):
        open_store("ftp://x", host)


def test_close_refused_while_registered(tmp_path):
    rig = Rig(dir_factory(tmp_path))
    with pytest.raises(kvblock.KvbArgumentError, match="still has this store"):
        rig.store.close()
    rig.mgr.set_store(None)
    rig.store.close()
    rig.mgr.close()


def _failure_rig(backend, tokens):
    """A rig whose store (over backend, recorded) has tokens' blocks, and a sequence of a fresh rig that
    has just started its gets (not yet polled)."""
    rec = Recording(backend)
    a = Rig(callback_store(rec))
    fill_store(a, tokens)
    a.mgr.set_store(None)
    a.mgr.close()
    b = Rig(callback_store(rec))
    sid, cached = b.start(tokens)
    assert cached == 4 * BS
    return b, rec, sid


def _check_cut(rig, sid, tokens, computed_expected):
    computed = rig.finish(sid, tokens)
    assert computed == computed_expected
    st = rig.mgr.stats()
    assert st["store_get_failures"] >= 1
    assert st["store_recomputed_tokens"] == 4 * BS - computed_expected
    # the recomputed blocks are right now, and the next run hits them on the device
    assert rig.run(tokens) == (4 * BS, 4 * BS)


def corrupt(value: bytes, at: int) -> bytes:
    b = bytearray(value)
    b[at] ^= 0x40
    return bytes(b)


@pytest.mark.parametrize("how, cut", [("missing", 2), ("corrupted", 1), ("short", 3), ("header", 0),
                                      ("other key", 2)])
def test_bad_values_cut_the_sequence(how, cut):
    backend = MemoryBackend()
    p = prompt(3, 4)
    rig, rec, sid = _failure_rig(backend, p)
    name = rec.looked_up[cut]
    v = backend.values[name]
    if how == "missing":
        del backend.values[name]
    elif how == "corrupted":
        backend.values[name] = corrupt(v, RECORD_HEADER.size + 37)
    elif how == "short":
        backend.values[name] = v[:-1]
    elif how == "header":
        backend.values[name] = corrupt(v, 0)
    else:  # another block's value under this name
        backend.values[name] = backend.values[rec.looked_up[cut + 1]]
    _check_cut(rig, sid, p, cut * BS)
    rig.close()


class Raising(MemoryBackend):
    def __init__(self, inner: MemoryBackend) -> None:
        super().__init__()
        self.values, self.fail = inner.values, set()

    def exists_prefix(self, names):
        if "lookup" in self.fail:
            raise ConnectionError("lookup refused")
        return super().exists_prefix(names)

    def put(self, name, value):
        if "put" in self.fail:
            raise ConnectionError("put refused")
        super().put(name, value)

    def get_many(self, names):
        if "get" in self.fail:
            raise ConnectionError("get refused")
        return super().get_many(names)


def test_back_end_that_raises():
    backend = Raising(MemoryBackend())
    p = prompt(4, 4)
    rig, rec, sid = _failure_rig(backend, p)
    backend.fail = {"get"}
    _check_cut(rig, sid, p, 0)
    store = rig.store
    assert isinstance(store, CallbackStore) and store.num_errors == 1
    assert "get refused" in str(store.errors[-1])
    backend.fail = {"lookup", "put"}
    before = rig.mgr.stats()
    fill_store(rig, prompt(5, 4))  # no hit from a failing lookup; refused puts drop their blocks
    st = rig.mgr.stats()
    assert st["store_hit_tokens"] == before["store_hit_tokens"]
    assert st["store_put_failures"] > before["store_put_failures"]
    assert st["store_put_blocks"] == before["store_put_blocks"]
    rig.close()


# -- Redis ---------------------------------------------------------------------------------------------
def redis_factory(url, backends=None):
    def make(host):
        from kvblock.store_redis import RedisBackend
        be = Recording(RedisBackend(url))
        if backends is not None:
            backends.append(be)
        return CallbackStore(be, host, write_through=True)
    return make


def test_redis_round_trip(redis_server):
    p = prompt(6, 4)
    a = Rig(lambda h: open_store(redis_server.url, h, write_through=True))
    fill_store(a, p)
    puts = a.mgr.stats()["store_put_blocks"]
    a.close()
    keys = redis_server.client.keys("kvb:*")
    assert len(keys) == puts >= 4
    v = redis_server.client.get(keys[0])
    magic, version, _, lo, hi, size, _ = RECORD_HEADER.unpack_from(v)
    assert (magic, version, size) == (b"KVBRST01", 1, len(v) - RECORD_HEADER.size)
    assert keys[0].decode() == f"kvb:{hi:016x}{lo:016x}"
    b = Rig(lambda h: open_store(redis_server.url, h))
    assert b.run(p) == (4 * BS, 4 * BS)
    assert b.mgr.stats()["store_get_blocks"] == 4
    b.close()


@pytest.mark.parametrize("how, cut", [("missing", 1), ("corrupted", 2), ("truncated", 0)])
def test_redis_bad_values(redis_server, how, cut):
    p = prompt(7, 4)
    backends: list = []
    a = Rig(redis_factory(redis_server.url, backends))
    fill_store(a, p)
    a.close()
    b = Rig(redis_factory(redis_server.url, backends))
    sid, cached = b.start(p)
    assert cached == 4 * BS
    name = backends[-1].looked_up[cut]
    c = redis_server.client
    if how == "missing":
        c.delete(name)
    elif how == "corrupted":  # one payload byte changed in place on the server
        c.setrange(name, RECORD_HEADER.size + 5, bytes([c.getrange(name, RECORD_HEADER.size + 5,
                                                                   RECORD_HEADER.size + 5)[0] ^ 1]))
    else:
        c.set(name, c.getrange(name, 0, RECORD_HEADER.size + 10))
    _check_cut(b, sid, p, cut * BS)
    b.close()


def test_redis_server_killed_mid_run(redis_server):
    p = prompt(8, 4)
    a = Rig(lambda h: open_store(redis_server.url, h, write_through=True))
    fill_store(a, p)
    a.close()
    b = Rig(lambda h: open_store(redis_server.url, h, write_through=True))
    sid, cached = b.start(p)
    assert cached == 4 * BS
    redis_server.kill()  # between the lookup and the gets' poll
    _check_cut(b, sid, p, 0)
    before = b.mgr.stats()
    fill_store(b, prompt(9, 4))  # lookups fail (no hits), puts fail (dropped, counted)
    st = b.mgr.stats()
    assert st["store_hit_tokens"] == before["store_hit_tokens"]
    assert st["store_put_failures"] > before["store_put_failures"]
    assert b.store.num_errors > 0
    b.close()


def test_record_header_layout():
    assert RECORD_HEADER.size == 48
    assert struct.calcsize("<8sIIQQQ8s") == 48
