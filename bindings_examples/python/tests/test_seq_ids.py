"""kvblock.SeqIds: a step's sequence ids checked and converted once, then used by batch_append, batch_export
and batch_commit as they are (issue 27 item 9: the batched decode step's per-call conversions)."""
import copy
import pickle

import numpy as np
import pytest

import kvblock


def _two_managers(n: int = 5, bs: int = 4) -> tuple:
    ms = (kvblock.Manager(64, bs), kvblock.Manager(64, bs))
    for m in ms:
        for i in range(n):
            m.allocate(10 + i, list(range(100 * i, 100 * i + 3 + i)))
    return ms


def test_seq_ids_step_equals_the_plain_ids_step():
    a, b = _two_managers()
    ids = [14, 10, 12, 11, 13]  # not sorted: the C calls must see this order
    sid = kvblock.SeqIds(ids)
    bufs_a, bufs_b = kvblock.BatchBuffers(2, 1, 1), kvblock.BatchBuffers(2, 1, 1)  # too small: both grow
    for step in range(12):
        ta, tb = a.batch_export(sid, bufs_a), b.batch_export(np.array(ids), bufs_b)
        for x, y in zip(ta[:4], tb[:4]):
            assert np.array_equal(x, y)
        assert ta[4:] == tb[4:]
        a.batch_commit(sid)
        b.batch_commit(ids)
        toks = [1000 + 7 * step + i for i in range(len(ids))]
        a.batch_append(sid, toks)
        b.batch_append(ids, toks)
    a.batch_commit(sid, [1, 0, 1, 0, 1])
    b.batch_commit(ids, [1, 0, 1, 0, 1])
    for i in ids:
        assert np.array_equal(a.block_table(i), b.block_table(i))
        assert a.info(i) == b.info(i)
    assert a.stats() == b.stats()
    grouped = a.batch_export(sid, kvblock.BatchBuffers(5, 8), prefix_groups=True)
    assert grouped.seq_lens.tolist() == [a.info(i).num_tokens for i in ids]
    a.check_invariants()


def test_seq_ids_is_a_copy_that_later_changes_do_not_reach():
    a, _ = _two_managers()
    src = np.array([10, 11], np.int64)
    sid = kvblock.SeqIds(src)
    src[:] = [12, 13]  # the caller reuses its array: the SeqIds keeps the ids it was built from
    a.batch_append(sid, [5, 6])
    assert [a.info(i).num_tokens for i in (10, 11, 12, 13)] == [4, 5, 5, 6]
    assert list(sid) == [10, 11] and len(sid) == 2
    with pytest.raises(ValueError):
        sid.array[0] = 1  # read-only
    assert kvblock.SeqIds(sid).array.tolist() == [10, 11]


def test_seq_ids_checks_once_with_the_argument_named():
    for bad, what in (([1, True], r"seq_ids\[1\] must be an int"), ([1.0, 2.0], r"seq_ids\[0\] must be an int"),
                      (np.zeros((2, 2), np.int64), "seq_ids must be 1-D"), (7, "seq_ids must be a sequence"),
                      ([2**63], "seq_ids: value 9223372036854775808 does not fit int64"),
                      (np.array([1.5]), "seq_ids must hold integers")):
        with pytest.raises(kvblock.KvbArgumentError, match=what):
            kvblock.SeqIds(bad)


def test_seq_ids_calls_refuse_what_plain_ids_refuse():
    a, _ = _two_managers()
    before = [a.info(i) for i in (10, 11)]
    with pytest.raises(kvblock.KvbArgumentError, match="tokens has 1"):
        a.batch_append(kvblock.SeqIds([10, 11]), [2])
    with pytest.raises(kvblock.KvbArgumentError, match=r"tokens\[1\] must be an int"):
        a.batch_append(kvblock.SeqIds([10, 11]), [2, False])
    with pytest.raises(kvblock.KvbError, match="appears twice"):
        a.batch_append(kvblock.SeqIds([10, 10]), [2, 3])
    with pytest.raises(kvblock.KvbError, match="exceeds"):
        a.batch_commit(kvblock.SeqIds([10, 11]), [50, 0])
    assert [a.info(i) for i in (10, 11)] == before  # the refusals changed nothing
    a.check_invariants()


def test_seq_ids_copy_and_pickle_rebuild_it():
    sid = kvblock.SeqIds(range(3))
    for other in (copy.copy(sid), copy.deepcopy(sid), pickle.loads(pickle.dumps(sid))):
        assert type(other) is kvblock.SeqIds and other.array.tolist() == [0, 1, 2]
        assert other._c is not sid._c or other is sid
    assert repr(sid) == "kvblock.SeqIds([0, 1, 2])"
    assert "256 ids" in repr(kvblock.SeqIds(np.arange(256)))


class _LibClosingInside:
    """The C library, except that the named batch call first closes the manager from inside the call, as a
    signal handler that interrupted it on its thread would."""

    def __init__(self, m, name):
        self._real, self._m, self._name = m._lib, m, name

    def __getattr__(self, attr):
        fn = getattr(self._real, attr)
        if attr != self._name:
            return fn

        def closing(*args):
            self._m.close()  # waiting here for the call in progress (this one) would never return
            return fn(*args)
        return closing


@pytest.mark.parametrize("call", ["kvb_batch_append", "kvb_batch_export", "kvb_batch_commit"])
def test_close_inside_a_batch_call_returns_and_the_call_finishes(call):
    """The batch calls run the close() guard's protocol inline (kvblock/_guard.py): close() from inside one
    returns at once, the call finishes on the live manager, and the manager is destroyed as it returns."""
    import threading
    m, _ = _two_managers()
    sid, bufs = kvblock.SeqIds([10, 11]), kvblock.BatchBuffers(2, 4, 16)  # no growing: one export call
    m._lib = _LibClosingInside(m, call)
    done = {}

    def step():
        m.batch_append(sid, [5, 6])
        done["export"] = m.batch_export(sid, bufs).seq_lens.tolist()
        m.batch_commit(sid)

    def run():
        try:
            step()
        except kvblock.KvbClosedError:
            done["closed"] = True

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "close() inside the call waited for the call: deadlock"
    assert m.closed
    # the calls up to the closing one finished (it too), the one after it was refused
    assert done == {"kvb_batch_append": {"closed": True}, "kvb_batch_export": {"export": [4, 5], "closed": True},
                    "kvb_batch_commit": {"export": [4, 5]}}[call]
