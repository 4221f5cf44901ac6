"""The store tier on Mooncake Store (kvblock/store_mooncake.py): a master and a client process that lends
the memory, started on loopback ports (skipped, with the reason, where the mooncake wheel cannot run)."""
from __future__ import annotations

from kvblock.store import open_store
from store_helpers import BS, Rig, prompt
from test_store import _check_cut, _failure_rig, fill_store
from test_store_engine import _demo


def test_mooncake_round_trip(cluster):
    p = prompt(21, 4)
    a = Rig(lambda h: open_store(cluster.url, h, write_through=True))
    fill_store(a, p)
    assert a.mgr.stats()["store_put_failures"] == 0
    a.close()
    b = Rig(lambda h: open_store(cluster.url, h))
    assert b.run(p) == (4 * BS, 4 * BS)
    assert b.mgr.stats()["store_get_blocks"] == 4
    b.close()


def test_mooncake_key_removed_between_lookup_and_get(cluster):
    from kvblock.store_mooncake import MooncakeBackend
    p = prompt(22, 4)
    b, backend, sid = _failure_rig(MooncakeBackend(cluster.url), p)
    assert backend.inner.store.remove(backend.looked_up[2], force=True) == 0  # leased since the lookup
    _check_cut(b, sid, p, 2 * BS)
    b.close()


def test_two_engines_demo_on_mooncake(cluster):
    r = _demo("--store", cluster.url)
    assert r.returncode == 0, r.stdout + r.stderr
