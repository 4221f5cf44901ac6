"""Token trees through the Python package: Manager.append_tree / commit_tree / drain_slot_copies and the
export's tree mask (kvblock.h, "Token trees"), on the header's worked example, a chain (no copies), a
random simulation that runs the slot pairs on a token-per-slot store and reads every accepted token back,
and the refusals."""
import random

import numpy as np
import pytest

import kvblock

A, B, C, D, E = 1, 2, 3, 4, 5


def slot(table, bs, pos):
    return int(table[pos // bs]) * bs + pos % bs


def test_worked_example():
    with kvblock.Manager(16, 4) as m:
        m.allocate(7, [100, 101, 102, 103, 104, 105])
        m.commit(7, 6)
        depths = m.append_tree(7, [A, B, C, D, E], [-1, -1, 0, 0, 2])
        assert depths.dtype == np.int32 and depths.tolist() == [0, 0, 1, 1, 2]
        table = m.block_table(7)
        buf = kvblock.BatchBuffers(4, 8, 8, tree_mask=True)
        batch = m.batch_export([7], buf)
        assert batch.num_slots == 5
        assert batch.slot_mapping.tolist() == [slot(table, 4, p) for p in range(6, 11)]
        assert batch.tree_mask.tolist() == [0b1, 0b10, 0b101, 0b1001, 0b10101]
        m.commit_tree(7, [0, 2, 4])
        pairs = m.drain_slot_copies()
        assert pairs.dtype == np.int64 and pairs.shape == (2, 2)
        assert pairs.tolist() == [[slot(table, 4, 8), slot(table, 4, 7)], [slot(table, 4, 10), slot(table, 4, 8)]]
        assert m.drain_slot_copies().shape == (0, 2)
        info = m.info(7)
        assert info.num_tokens == 9 and info.num_computed == 9
        h0 = kvblock.hash_tokens([100, 101, 102, 103])
        assert m.block_hash(int(table[1])) == kvblock.hash_tokens([104, 105, A, C], h0)
        assert m.allocate(8, [100, 101, 102, 103, 104, 105, A, C, E]) == 8  # accepted tokens: a prefix hit
        m.check_invariants()


def test_chain_needs_no_copy_and_masks_are_causal():
    with kvblock.Manager(32, 4) as m:
        m.allocate(1, list(range(10, 15)))
        m.commit(1, 5)
        m.allocate(2, list(range(50, 53)))  # 3 uncomputed prompt tokens beside the tree
        assert m.append_tree(1, [1, 2, 3, 4], [-1, 0, 1, 2]).tolist() == [0, 1, 2, 3]
        batch = m.batch_export([2, 1], kvblock.BatchBuffers(2, 8, 8, tree_mask=True))
        assert batch.tree_mask.tolist() == [1, 3, 7, 1, 3, 7, 15]
        plain = m.batch_export([2, 1], kvblock.BatchBuffers(2, 8, 8))
        assert plain.tree_mask is None
        m.commit_tree(1, [0, 1, 2])
        assert m.drain_slot_copies().shape == (0, 2)
        assert m.info(1).num_tokens == 8
        m.check_invariants()


def test_random_trees_read_back():
    """A simulated KV store holding each slot's token: the exported slots are written with the nodes' tokens,
    the drained pairs run in order, and every computed token of the sequence reads back through its table."""
    rng = random.Random(5)
    bs = 4
    with kvblock.Manager(64, bs) as m:
        store = np.full(64 * bs, -1, np.int64)
        tokens = [rng.randrange(1000) for _ in range(7)]
        m.allocate(1, tokens)
        table = m.block_table(1)
        for p, t in enumerate(tokens):
            store[slot(table, bs, p)] = t
        m.commit(1, len(tokens))
        buf = kvblock.BatchBuffers(1, 64, 64, tree_mask=True)
        for _ in range(60):
            n = rng.randint(1, 12)
            parents = [-1 if i == 0 or rng.random() < 0.25 else rng.randrange(i) for i in range(n)]
            draft = [rng.randrange(1000) for _ in range(n)]
            m.append_tree(1, draft, parents)
            m.drain_copies()
            batch = m.batch_export([1], buf)
            store[batch.slot_mapping] = draft
            for i in range(n):  # each row: itself and its ancestors
                want, a = 0, i
                while a >= 0:
                    want |= 1 << a
                    a = parents[a]
                assert int(batch.tree_mask[i]) == want
            path = [rng.choice([i for i in range(n) if parents[i] < 0])]
            while rng.random() < 0.8:
                kids = [i for i in range(n) if parents[i] == path[-1]]
                if not kids:
                    break
                path.append(rng.choice(kids))
            if rng.random() < 0.1:
                path = []
            m.commit_tree(1, path)
            for src, dst in m.drain_slot_copies():  # in list order
                store[dst] = store[src]
            tokens += [draft[i] for i in path]
            table = m.block_table(1)
            assert [int(store[slot(table, bs, p)]) for p in range(len(tokens))] == tokens
            m.check_invariants()
            if len(tokens) > 150:
                break


def test_refusals_change_nothing():
    with kvblock.Manager(16, 4) as m:
        m.allocate(1, [1, 2, 3, 4, 5])
        m.commit(1, 5)
        with pytest.raises(kvblock.KvbError):
            m.append_tree(1, [1, 2], [-1, 1])  # a node as its own parent
        with pytest.raises(kvblock.KvbArgumentError):
            m.append_tree(1, [1, 2], [-1])  # lengths differ
        with pytest.raises(kvblock.KvbError):
            m.append_tree(1, list(range(65)), [-1] * 65)
        assert m.info(1).num_tokens == 5
        with pytest.raises(kvblock.KvbError):
            m.commit_tree(1, [])  # no pending tree
        m.append_tree(1, [7, 8, 9], [-1, 0, -1])
        with pytest.raises(kvblock.KvbError):
            m.commit(1, 1)
        with pytest.raises(kvblock.KvbError):
            m.append(1, [3])
        with pytest.raises(kvblock.KvbError):
            m.commit_tree(1, [0, 2])  # not a path
        assert m.info(1).num_tokens == 8
        m.commit_tree(1, [2])
        assert m.drain_slot_copies().tolist() != []
        assert m.info(1).num_tokens == 6
        m.check_invariants()
