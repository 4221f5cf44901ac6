"""Objects owning a C handle or memory described to C refuse copy.copy, copy.deepcopy and pickle with a
TypeError that names the object and why (issue 20 item 2: a copy of a Manager shared its kvb_manager, and
the copy's finalizer destroyed it under the original)."""
import copy
import gc
import pickle

import numpy as np
import pytest

import kvblock


def _owners():
    yield "Manager", lambda: kvblock.Manager(8, 4)
    yield "BatchBuffers", lambda: kvblock.BatchBuffers(4, 4)
    yield "KVCache", lambda: kvblock.KVCache(1, 4, 4, 1, 8)
    yield "KVCache.wrap", lambda: kvblock.KVCache.wrap([np.zeros((4, 4, 1, 8), np.float32)],
                                                       [np.zeros((4, 4, 1, 8), np.float32)])


OWNERS = list(_owners())
ACTIONS = [("copy.copy", copy.copy, "copied"), ("copy.deepcopy", copy.deepcopy, "deep-copied"),
           ("pickle", pickle.dumps, "pickled"),
           ("pickle protocol 0", lambda o: pickle.dumps(o, protocol=0), "pickled")]


@pytest.mark.parametrize("name,make", OWNERS, ids=[n for n, _ in OWNERS])
@pytest.mark.parametrize("action,fn,verb", ACTIONS, ids=[a for a, _, _ in ACTIONS])
def test_copy_and_pickle_refused(name, make, action, fn, verb):
    obj = make()
    with pytest.raises(TypeError, match=f"{type(obj).__qualname__} cannot be {verb}.*: it owns"):
        fn(obj)


def test_manager_survives_a_refused_copy():
    """The failure of the issue: the copy's finalizer closed the original's C manager."""
    m = kvblock.Manager(8, 4)
    with pytest.raises(TypeError, match="kvb_manager handle"):
        copy.copy(m)
    gc.collect()
    assert m.allocate(1, [1, 2, 3]) == 0 and not m.closed
    m.close()


def test_publisher_and_engine_refuse_copy():
    pytest.importorskip("zmq")
    pytest.importorskip("msgpack")
    from kvblock.engine import Engine, EngineConfig
    from kvblock.engine.model import Model, ModelConfig
    from kvblock.events import KvEventPublisher
    m = kvblock.Manager(8, 4, events=True)
    pub = KvEventPublisher(m, endpoint="tcp://127.0.0.1:*")
    try:
        for fn in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="KvEventPublisher cannot be .*sockets"):
                fn(pub)
    finally:
        pub.close()
    eng = Engine(Model(ModelConfig(num_layers=1)), EngineConfig(num_blocks=16))
    with pytest.raises(TypeError, match="Engine cannot be copied"):
        copy.copy(eng)
    eng.close()
