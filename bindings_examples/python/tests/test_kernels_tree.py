"""Token-tree kernels through the Python wrappers: prefill_attention with tree_mask against float64 numpy on a
batch mixing a random tree, a chain, a decode row and a plain prefill longer than 64 tokens; copy_slots against
numpy (a compaction whose slots are both read and written); argument checks."""
import numpy as np
import pytest

import kvblock

BS, KVH, QH, D = 8, 2, 4, 64


def tree_words(parents):
    """Ancestor-or-self bit words of a tree given by parent indices (-1: child of the committed prefix)."""
    words = []
    for i, p in enumerate(parents):
        words.append((1 << i) | (words[p] if p >= 0 else 0))
    return words


def reference(q, k, v, committed, words):
    """Rows of one sequence: row j (position committed + j) sees keys < committed, itself, and new key b < j
    when bit b of words[j] is set (words None: causal)."""
    group = q.shape[1] // k.shape[1]
    kk = np.repeat(k.astype(np.float64), group, axis=1)
    vv = np.repeat(v.astype(np.float64), group, axis=1)
    logits = np.einsum("nhd,thd->nht", q.astype(np.float64), kk) / np.sqrt(D)
    t = np.arange(k.shape[0])
    allowed = np.zeros((q.shape[0], k.shape[0]), bool)
    for j in range(q.shape[0]):
        pos = committed + j
        allowed[j] = t <= pos
        if words is not None:
            allowed[j] &= (t < committed) | (t == pos) | (((words[j] >> np.clip(t - committed, 0, 63)) & 1) == 1)
    logits = np.where(allowed[:, None, :], logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("nht,thd->nhd", p, vv)


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("float16", 3e-3)])
def test_tree_prefill_against_numpy(dtype, tol):
    rng = np.random.default_rng(3)
    parents = [-1, 0, 0, 1, -1, 4, 2, 3, 5, 0]
    seqs = [(20, tree_words(parents)), (3, tree_words([-1, 0, 1, 2, 3])), (30, [0]), (5, None)]
    q_lens = [len(w) if w is not None else 70 for _, w in seqs]
    lens = [c + n for (c, _), n in zip(seqs, q_lens)]
    blocks_per = [(n + BS - 1) // BS for n in lens]
    cache = kvblock.KVCache(1, sum(blocks_per), BS, KVH, D, dtype)
    tables = np.full((len(seqs), max(blocks_per)), -1, np.int32)
    order = rng.permutation(sum(blocks_per))
    kv, used = [], 0
    for s, n in enumerate(lens):
        tables[s, :blocks_per[s]] = order[used:used + blocks_per[s]]
        used += blocks_per[s]
        slots = np.array([tables[s, t // BS] * BS + t % BS for t in range(n)], np.int64)
        k = rng.standard_normal((n, KVH, D)).astype(dtype)
        v = rng.standard_normal((n, KVH, D)).astype(dtype)
        kvblock.write_kv(cache, 0, k, v, slots)
        kv.append((k, v))
    qs = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    words = np.zeros(qs[-1], np.uint64)
    for s, (_, w) in enumerate(seqs):
        if w is not None:
            words[qs[s]:qs[s + 1]] = w
        else:
            words[qs[s]:qs[s + 1]] = rng.integers(0, 2**63, q_lens[s], dtype=np.uint64)  # not read: > 64 tokens
    q = rng.standard_normal((qs[-1], QH, D)).astype(dtype)
    out = np.full_like(q, np.nan)
    kvblock.prefill_attention(cache, 0, q, qs, np.array(lens, np.int32), tables, out, tree_mask=words)
    for s, (committed, w) in enumerate(seqs):
        a, b = qs[s], qs[s + 1]
        ref = reference(q[a:b], *kv[s], committed, w)
        np.testing.assert_allclose(out[a:b].astype(np.float64), ref, atol=tol, rtol=tol)
    # int64 words are taken too; without a mask the tree rows are causal (and differ).
    plain = np.full_like(q, np.nan)
    kvblock.prefill_attention(cache, 0, q, qs, np.array(lens, np.int32), tables, plain)
    kvblock.prefill_attention(cache, 0, q, qs, np.array(lens, np.int32), tables, out, tree_mask=words.view(np.int64))
    assert not np.allclose(plain[:qs[1]], out[:qs[1]])
    np.testing.assert_array_equal(plain[qs[3]:], out[qs[3]:])
    with pytest.raises(kvblock.KvbArgumentError, match="tree_mask"):
        kvblock.prefill_attention(cache, 0, q, qs, np.array(lens, np.int32), tables, out, tree_mask=words[:-1])
    with pytest.raises(kvblock.KvbArgumentError, match="tree_mask"):
        kvblock.prefill_attention(cache, 0, q, qs, np.array(lens, np.int32), tables, out,
                                  tree_mask=words.astype(np.int32))


def test_copy_slots_compaction():
    rng = np.random.default_rng(4)
    cache = kvblock.KVCache(2, 4, BS, KVH, D, "float16")
    for layer in range(2):
        cache.k[layer][...] = rng.standard_normal(cache.k[layer].shape)
        cache.v[layer][...] = rng.standard_normal(cache.v[layer].shape)
    before = [(cache.k[i].copy(), cache.v[i].copy()) for i in range(2)]
    # Nodes at slots 10..15; accepted path 10 -> 12 -> 15: 12 moves to 11 and 15 to 12 (12 is read and written).
    pairs = np.array([[12, 11], [15, 12]], np.int64)
    kvblock.copy_slots(cache, pairs)
    for layer in range(2):
        for src, dst in pairs:
            for now, old in ((cache.k[layer], before[layer][0]), (cache.v[layer], before[layer][1])):
                np.testing.assert_array_equal(now[dst // BS, dst % BS], old[src // BS, src % BS])
        untouched = [s for s in range(4 * BS) if s not in (11, 12)]
        for s in untouched:
            np.testing.assert_array_equal(cache.k[layer][s // BS, s % BS], before[layer][0][s // BS, s % BS])
    kvblock.copy_slots(cache, [])  # nothing to do
    with pytest.raises(kvblock.KvbError, match="written twice"):
        kvblock.copy_slots(cache, [[1, 2], [3, 2]])
    with pytest.raises(kvblock.KvbError, match="source slot 32"):
        kvblock.copy_slots(cache, [[32, 2]])
    with pytest.raises(kvblock.KvbArgumentError, match="int64"):
        kvblock.copy_slots(cache, np.array([[1, 2]], np.int32))
