"""The store tier's guards from Python: a store moves one host cache's bytes for one Manager (a store over
the device cache or another host cache, or one another Manager holds, is refused at set_store and the
refusal changes nothing); fp8 scales are part of the namespace; a store that never answers can be
detached; a Redis URL nobody listens on, a malformed spec and missing parent directories are handled at
opening; the store protocol's hooks are optional."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import kvblock
from kvblock.store import CallbackStore, DirStore, MemoryBackend, Store, fold_key, namespace_of, open_store
from store_helpers import BS, DIM, HEADS, LAYERS, Rig, callback_store, prompt, redis_unavailable

PKG = Path(__file__).resolve().parent.parent


def fill_store(rig: Rig, tokens: list) -> None:
    assert rig.run(tokens) == (0, 0)
    for k in range(1, 4):
        rig.run(prompt(100 + k, 3))


# -- one store, one host cache, one manager ---------------------------------------------------------------
def test_store_over_another_cache_refused(tmp_path):
    rig = Rig(lambda h: DirStore(str(tmp_path / "good"), h, write_through=True))  # 8 device, 4 host blocks
    good = rig.store
    over_device = DirStore(str(tmp_path / "bad"), rig.dev)
    with pytest.raises(kvblock.KvbError,
                       match=r"INVALID_ARGUMENT: kvb_store.num_host_blocks 8 differs from the manager's "
                             r"num_host_blocks 4 \(it is the device block count"):
        rig.mgr.set_store(over_device)
    other_host = kvblock.KVCache(LAYERS, 6, BS, HEADS, DIM)
    for bad in (DirStore(str(tmp_path / "bad"), other_host), CallbackStore(MemoryBackend(), other_host)):
        with pytest.raises(kvblock.KvbError, match="INVALID_ARGUMENT: kvb_store.num_host_blocks 6 differs"):
            rig.mgr.set_store(bad)
    # nothing changed: the good store is still registered and serves a fresh engine
    assert rig.mgr._store is good and good._in_use()
    p = prompt(1, 3)
    fill_store(rig, p)
    rig.close()
    b = Rig(lambda h: DirStore(str(tmp_path / "good"), h, write_through=True))
    assert b.run(p) == (3 * BS, 3 * BS)
    b.close()
    over_device.close()


def test_one_store_two_managers_refused(tmp_path):
    a = Rig(lambda h: DirStore(str(tmp_path), h, write_through=True))
    b = Rig(callback_store(MemoryBackend()))
    b_store = b.store
    with pytest.raises(kvblock.KvbError, match="KVB_ERR_BAD_STATE.*registered with another manager"):
        b.mgr.set_store(a.store)
    assert b.mgr._store is b_store and a.mgr._store is a.store  # nothing changed on either
    with pytest.raises(kvblock.KvbError, match="registered with another manager"):
        a.mgr.set_store(b_store)
    a.mgr.set_store(None)
    b.mgr.set_store(a.store)  # free once a let go (its block count is b's too)
    b.mgr.set_store(None)
    a.mgr.set_store(a.store)
    b.mgr.set_store(b_store)
    p = prompt(2, 3)
    fill_store(a, p)
    a.close()
    b.close()


# -- fp8 scales in the namespace ------------------------------------------------------------------------------
def fp8_cache(**scales):
    return kvblock.KVCache(LAYERS, 4, BS, HEADS, DIM, "float8_e4m3", **scales)


def test_fp8_scales_are_in_the_namespace():
    one, four = namespace_of(fp8_cache(), 7), namespace_of(fp8_cache(k_scale=4.0), 7)
    assert fold_key(one, 1, 2) != fold_key(four, 1, 2)
    # the same scales given per layer or per head fold alike
    assert fold_key(namespace_of(fp8_cache(k_scale=[4.0, 4.0]), 7), 1, 2) == fold_key(four, 1, 2)
    assert fold_key(namespace_of(fp8_cache(k_head_scales=[4.0, 4.0]), 7), 1, 2) == fold_key(four, 1, 2)
    assert fold_key(namespace_of(fp8_cache(k_head_scales=[4.0, 4.5]), 7), 1, 2) != fold_key(four, 1, 2)
    assert fold_key(four._replace(layer_scales=None, k_scale=4.0), 1, 2) == fold_key(four, 1, 2)
    # 16-bit caches ignore scales
    f32 = namespace_of(kvblock.KVCache(LAYERS, 4, BS, HEADS, DIM), 7)
    assert fold_key(f32._replace(k_scale=4.0), 1, 2) == fold_key(f32, 1, 2)
    with pytest.raises(kvblock.KvbError, match="k_scale"):
        fold_key(one._replace(layer_scales=None, k_scale=0.0), 1, 2)


def test_fp8_caches_with_other_scales_share_no_blocks(tmp_path):
    def rig(k_scale):
        return Rig(lambda h: DirStore(str(tmp_path), h, model_id=3, write_through=True), dtype="float8_e4m3",
                   k_scale=k_scale)

    p = prompt(3, 3)
    a = rig(1.0)
    fill_store(a, p)
    a.close()
    b = rig(4.0)  # one model id, another calibration: nothing found
    assert b.run(p) == (0, 0)
    b.close()
    c = rig(1.0)  # the first one's: found, with its bytes
    assert c.run(p) == (3 * BS, 3 * BS)
    c.close()


# -- detaching a store that never answers --------------------------------------------------------------------
class StuckStore(CallbackStore):
    """Queues gets and never completes one."""

    def _poll(self, user, done, capacity, num_done):
        num_done[0] = 0
        return 0


def test_stuck_store_detached():
    backend = MemoryBackend()
    p = prompt(4, 4)
    a = Rig(callback_store(backend))
    fill_store(a, p)
    a.close()
    rig = Rig(lambda h: StuckStore(backend, h, write_through=True))
    sid, cached = rig.start(p)
    assert cached == 4 * BS and rig.mgr.store_poll() == 4
    assert rig.mgr.stats()["free_host_blocks"] == 0
    stuck = rig.store
    rig.mgr.set_store(None)  # abandons the 4 gets
    st = rig.mgr.stats()
    assert (st["store_abandoned_gets"], st["store_get_failures"], st["store_filling_blocks"]) == (4, 4, 0)
    assert st["free_host_blocks"] == 4 and st["store_recomputed_tokens"] == 4 * BS
    assert rig.mgr.store_state(sid) == (0, 0)
    assert stuck._queued == [] and not stuck._in_use()  # detached: it fills none of those host blocks
    rig.mgr.check_invariants()
    assert rig.finish(sid, p) == 0  # recomputed, right bytes
    stuck.close()
    # replacing a stuck store abandons too, and the new one serves
    rig.mgr.set_store(StuckStore(backend, rig.host, write_through=True))
    rig.mgr.reset_prefix_cache()
    sid, cached = rig.start(p)
    assert cached == 4 * BS
    rig.mgr.set_store(CallbackStore(backend, rig.host, write_through=True))
    assert rig.mgr.stats()["store_abandoned_gets"] == 8 and rig.mgr.store_state(sid) == (0, 0)
    rig.mgr.free(sid)
    assert rig.run(p) == (4 * BS, 4 * BS)
    rig.close()


# -- the store protocol ---------------------------------------------------------------------------------------
def test_store_protocol_hooks_are_optional(tmp_path):
    host = kvblock.KVCache(LAYERS, 4, BS, HEADS, DIM)
    inner = DirStore(str(tmp_path), host)

    class Bare:  # only what the protocol requires
        table, namespace = inner.table, inner.namespace

    with kvblock.Manager(8, BS, num_host_blocks=4, host_cache=True) as m:
        m.set_store(Bare())
        m.set_store(None)

    class Mine(Store):  # the base class supplies attached / detached and the close refusal
        def __init__(self):
            super().__init__()
            self.table, self.namespace = inner.table, inner.namespace

    s = Mine()
    with kvblock.Manager(8, BS, num_host_blocks=4, host_cache=True) as m:
        m.set_store(s)
        assert s._in_use()
        with pytest.raises(kvblock.KvbArgumentError, match="still has this store"):
            s._refuse_close_in_use()
        m.set_store(None)
        assert not s._in_use()
    inner.close()


# -- opening ---------------------------------------------------------------------------------------------------
def test_dir_spec_creates_parents(tmp_path):
    host = kvblock.KVCache(LAYERS, 4, BS, HEADS, DIM)
    s = open_store(f"dir:{tmp_path}/a/b", host)
    assert (tmp_path / "a" / "b").is_dir()
    s.close()


@pytest.mark.parametrize("spec, why", [("ftp://x", "unknown form"), ("dir:", "needs a path"),
                                       ("redis://127.0.0.1:notaport/0", "port"), ("redis:///0", "no host"),
                                       ("redis://127.0.0.1:6379/x", "not a number")])
def test_malformed_spec_named(spec, why):
    host = kvblock.KVCache(LAYERS, 4, BS, HEADS, DIM)
    with pytest.raises(kvblock.KvbArgumentError, match=f"{spec!r}.*{why}.*dir:PATH, redis://"):
        open_store(spec, host)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_redis_url_nobody_listens_on_refused():
    try:
        import redis  # noqa: F401
    except ImportError:
        pytest.skip("SKIP: no redis client (pip install redis; .ci/run installs it)")
    url = f"redis://127.0.0.1:{free_port()}/0"
    host = kvblock.KVCache(LAYERS, 4, BS, HEADS, DIM)
    with pytest.raises(kvblock.KvbArgumentError, match=f"store '{url}': no Redis server answers there"):
        open_store(url, host)


def cli(*args):
    env = dict(os.environ, PYTHONPATH=str(PKG) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [sys.executable, "-m", "kvblock.engine", "--requests", "2", "--shared-prefix", "16", "--prompt", "4",
            "--max-tokens", "1", "--layers", "1", "--num-blocks", "32", "--host-cache", "--host-blocks", "4", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("spec", ["ftp://x", "dir:", "redis://h:notaport/0"])
def test_cli_bad_store_spec_is_a_usage_error(spec):
    r = cli("--store", spec)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"argument --store: store spec {spec!r}" in r.stderr and "dir:PATH, redis://" in r.stderr, r.stderr


def test_cli_redis_nobody_listens_on_is_a_usage_error():
    if redis_unavailable() and "redis client" in (redis_unavailable() or ""):
        pytest.skip(f"SKIP: {redis_unavailable()}")
    url = f"redis://127.0.0.1:{free_port()}/0"
    r = cli("--store", url)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "no Redis server answers there" in r.stderr and url in r.stderr, r.stderr


def test_torch_cli_redis_nobody_listens_on_is_a_usage_error(tmp_path):
    """The torch engine's path (--model DIR) reports an unreachable store as the numpy engine's does."""
    pytest.importorskip("torch", reason="SKIP torch engine: torch not importable")
    pytest.importorskip("safetensors", reason="SKIP torch engine: safetensors not importable")
    if redis_unavailable() and "redis client" in (redis_unavailable() or ""):
        pytest.skip(f"SKIP: {redis_unavailable()}")
    from kvblock.engine.checkpoint import write_tiny_checkpoint
    write_tiny_checkpoint(str(tmp_path / "ckpt"), vocab=64, hidden=32, ffn=32, num_layers=1)
    url = f"redis://127.0.0.1:{free_port()}/0"
    env = dict(os.environ, PYTHONPATH=str(PKG) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [sys.executable, "-m", "kvblock.engine", "--model", str(tmp_path / "ckpt"), "--ids", "1,2,3",
            "--max-tokens", "1", "--num-blocks", "16", "--host-cache", "--host-blocks", "4", "--store", url]
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "no Redis server answers there" in r.stderr and url in r.stderr, r.stderr
