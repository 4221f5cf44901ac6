"""Token arguments: exactly Python sequences of ints and 1-D integer arrays (converted without loss)."""
import array

import numpy as np
import pytest

import kvblock

I64_MAX = 2**63 - 1


@pytest.fixture
def m():
    with kvblock.Manager(num_blocks=64, block_size=4) as m:
        yield m


@pytest.mark.parametrize("tokens", [
    [1, 2, 3], (1, 2, 3), range(1, 4), np.array([1, 2, 3]), np.array([1, 2, 3], np.int8),
    np.array([1, 2, 3], np.uint16), np.array([1, 2, 3], np.uint64), np.array([1, 2, 3], ">i8"),
    np.arange(0, 6)[1::2] * 0 + np.array([1, 2, 3]), array.array("q", [1, 2, 3]), array.array("B", [1, 2, 3]),
    [np.int32(1), np.uint64(2), 3],
])
def test_accepted(m, tokens):
    m.allocate(1, tokens)
    m.commit(1, 3)
    m.append(1, [4])
    assert m.info(1).num_tokens == 4
    assert kvblock.hash_tokens(tokens) == kvblock.hash_tokens([1, 2, 3])


def test_strided_and_extreme_values(m):
    big = np.array([I64_MAX, -I64_MAX - 1, 0, 5], np.int64)
    m.allocate(1, big[::-1])
    m.commit(1, 4)
    m.allocate(2, [I64_MAX, -I64_MAX - 1, 0, 5])
    assert m.allocate(3, np.array([5, 0, -I64_MAX - 1, I64_MAX, 1], np.int64)) == 4
    assert m.allocate(4, np.array([I64_MAX], np.uint64)) == 0


@pytest.mark.parametrize("bad,match", [
    (5, "got int"), (np.int64(5), "numpy int64 scalar"), (np.array(5), "0-D"), (np.zeros((2, 2), np.int64), "2-D"),
    ([1.0, 2.0], r"tokens\[0\] must be an int, got float"), (np.array([1.0, 2.0]), "float64"),
    ([True, 2], r"tokens\[0\] must be an int, got bool"), (np.array([True, False]), "bool"),
    ([1, 2**63], "does not fit int64"), ([-(2**63) - 1], "does not fit int64"),
    (np.array([2**63], np.uint64), "does not fit int64"), ([np.uint64(2**64 - 1)], "does not fit int64"),
    ("abc", "got str"), (b"abc", "got bytes"), ({1, 2}, "got set"), (None, "got NoneType"),
    ([1, "2"], r"tokens\[1\] must be an int, got str"), ([np.float32(1)], "got float32"),
    (array.array("d", [1.0]), "float64"),
])
def test_refused(m, bad, match):
    for call in (lambda: m.allocate(1, bad), lambda: kvblock.hash_tokens(bad), lambda: m.can_allocate(bad)):
        with pytest.raises(kvblock.KvbArgumentError, match=match) as err:
            call()
        assert isinstance(err.value, TypeError) and isinstance(err.value, kvblock.KvbError)
    assert m.stats()["num_seqs"] == 0


def test_refused_in_append_and_batches(m):
    m.allocate(1, [1, 2])
    with pytest.raises(kvblock.KvbArgumentError, match="numpy int64 scalar"):
        m.append(1, np.int64(5))  # once: five zero tokens with no error
    assert m.info(1).num_tokens == 2
    with pytest.raises(kvblock.KvbArgumentError, match="seq_ids"):
        m.batch_append(np.array([[1]]), [3])
    with pytest.raises(kvblock.KvbArgumentError, match="seq_id must be an int"):
        m.commit(True, 1)
    with pytest.raises(kvblock.KvbArgumentError, match="seq_id must be an int"):
        m.free(1.0)
