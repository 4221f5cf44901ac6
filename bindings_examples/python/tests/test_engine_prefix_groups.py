"""The mini engine's prefix groups (shared-prefix attention on every step): on workloads where sequences
share blocks (n > 1 forks, prompts that hit the same cached prefix, a sliding window, a hybrid model's
two KV cache groups), the engine with prefix groups (the default) generates the very tokens of the same
engine with EngineConfig(prefix_groups=False) (the plain kernels), its logits agree to rounding, and the
groups were really used by decode rows and by prompt chunks. Also restrict_rows, which splits a batch's
groups between the decode call and the prefill call."""
import numpy as np
import pytest

import kvblock
from kvblock.engine.engine import Engine, EngineConfig
from kvblock.engine.model import Model, ModelConfig
from kvblock.engine.sequence import Request
from kvblock.prefix_groups import PrefixGroups, restrict_rows


def shared_requests(vocab, count=6, prefix=48, n=2, seed=1, max_tokens=8, temperature=1.0):
    """Prompts that share a long prefix (hits once the first is cached), each sampled n times (forks)."""
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, vocab, prefix).tolist()
    return [Request(r, shared + rng.integers(0, vocab, 3 + 2 * r).tolist(), max_tokens, n=n,
                    temperature=temperature, seed=seed) for r in range(count)]


def serve(make_engine, reqs, prefix_groups):
    eng = make_engine(prefix_groups)
    for r in reqs:
        eng.add_request(r)
    done = eng.run()
    out = {(rid, s.index): (list(s.output), np.array(s.logits)) for rid, ss in done.items() for s in ss}
    eng.mgr.check_invariants()
    return out, eng.metrics


def check_same(make_engine, reqs, rtol=1e-4, atol=1e-4):
    plain, m_plain = serve(make_engine, reqs, False)
    grouped, m = serve(make_engine, reqs, True)
    assert m_plain.group_decode_rows == 0 and m_plain.group_prefill_seqs == 0
    assert sorted(plain) == sorted(grouped)
    for key in plain:
        assert grouped[key][0] == plain[key][0], f"request {key[0]} sample {key[1]}"
        np.testing.assert_allclose(grouped[key][1], plain[key][1], rtol=rtol, atol=atol)
    return m


def numpy_engine(model, **cfg):
    def make(prefix_groups):
        return Engine(model, EngineConfig(record_logits=True, prefix_groups=prefix_groups, **cfg))
    return make


@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
def test_numpy_engine_same_tokens_with_groups(kv_dtype):
    model = Model(ModelConfig(seed=3))
    # Token budget small enough that later prompts are prefilled (in pairs) after the first is cached.
    tol = 1e-4 if kv_dtype == "float32" else 2e-3  # fp16: q and out are rounded to fp16 (a split sum differs)
    m = check_same(numpy_engine(model, num_blocks=256, block_size=8, max_batched_tokens=48, kv_dtype=kv_dtype),
                   shared_requests(model.cfg.vocab, count=6, n=3), rtol=tol, atol=tol)
    assert m.group_decode_rows > 0 and m.group_prefill_seqs > 0


def test_numpy_engine_groups_with_window():
    """Prompts of different lengths share a 48-token prefix: each member's window masks a different part of
    the shared keys, until the window releases the head blocks (the sharing then ends)."""
    model = Model(ModelConfig(seed=4, window=48, sink=4))
    m = check_same(numpy_engine(model, num_blocks=256, block_size=8, max_batched_tokens=48),
                   shared_requests(model.cfg.vocab, count=5, n=2, max_tokens=16))
    assert m.group_decode_rows > 0


def test_numpy_engine_groups_small_pool_preempts():
    model = Model(ModelConfig(seed=3))
    m = check_same(numpy_engine(model, num_blocks=30, block_size=8, max_batched_tokens=48),
                   shared_requests(model.cfg.vocab, count=5, n=3, max_tokens=12))
    assert m.group_decode_rows > 0 and m.preemptions > 0


def test_numpy_engine_groups_hybrid_two_kv_cache_groups():
    model = Model(ModelConfig(seed=5, num_layers=4, window=16, sink=4, hybrid=True))
    m = check_same(numpy_engine(model, num_blocks=256, block_size=8, max_batched_tokens=40),
                   shared_requests(model.cfg.vocab, count=4, n=2, max_tokens=10))
    assert m.group_decode_rows > 0


def test_torch_engine_same_tokens_with_groups():
    torch = pytest.importorskip("torch")
    from kvblock.engine.torch_engine import TorchEngine
    from kvblock.engine.torch_model import TorchModel
    try:
        from kvblock.engine.checkpoint import write_tiny_checkpoint
    except ImportError as e:  # needs transformers' config classes
        pytest.skip(str(e))
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        d, cfg = write_tiny_checkpoint(tmp + "/m", "llama", seed=4, logit_scale=1.0)

        def make(prefix_groups):
            model = TorchModel.from_pretrained(str(d), "cpu", "float32", max_len=256)
            return TorchEngine(model, EngineConfig(num_blocks=128, block_size=8, max_num_seqs=16,
                                                   max_batched_tokens=48, record_logits=True,
                                                   prefix_groups=prefix_groups), cuda_graph=False)

        with torch.no_grad():
            m = check_same(make, shared_requests(cfg.vocab, count=6, n=3))
    assert m.group_decode_rows > 0 and m.group_prefill_seqs > 0


def groups_of(members_per_group, shared):
    pg = PrefixGroups(16)
    nm = 0
    for g, (mem, sb) in enumerate(zip(members_per_group, shared)):
        pg.members_all[nm:nm + len(mem)] = mem
        nm += len(mem)
        pg.group_start_all[g + 1] = nm
        pg.shared_blocks_all[g] = sb
    pg.c.num_groups, pg.c.num_members = len(shared), nm
    return pg


def test_restrict_rows_splits_groups_between_the_two_calls():
    pg = groups_of([[0, 2, 5], [1, 3], [4, 6, 7]], [4, 2, 3])
    assert restrict_rows(pg, 0, 8) is pg
    dec = restrict_rows(pg, 0, 4)  # rows 0..3: group 0 keeps 0 and 2, group 1 whole, group 2 gone
    assert [(list(m), s) for m, s in dec.groups()] == [([0, 2], 4), ([1, 3], 2)]
    pre = restrict_rows(pg, 4, 8)  # rows 4..7 renumbered 0..3: group 0 has one member left (5): no group
    assert [(list(m), s) for m, s in pre.groups()] == [([0, 2, 3], 3)]
    assert int(pre.c.num_members) == 3
    assert restrict_rows(pg, 5, 6) is None
    assert restrict_rows(None, 0, 4) is None


def test_restricted_groups_are_accepted_by_the_kernel():
    """A restricted description is a valid kernel argument: the same output as the plain call."""
    bs, hq, hkv, d = 4, 4, 2, 64
    rng = np.random.default_rng(0)
    with kvblock.Manager(num_blocks=32, block_size=bs) as m:
        m.allocate(1, range(10))
        m.commit(1, 10)
        m.allocate(2, range(100, 113))
        m.commit(2, 13)
        m.fork(2, 3)
        m.fork(2, 4)
        ids = [1, 2, 3, 4]
        m.batch_append(ids, [7, 7, 7, 7])
        batch = m.batch_export(ids, prefix_groups=True)
        assert [list(g) for g, _ in batch.prefix_groups.groups()] == [[1, 2, 3]]
        sub = restrict_rows(batch.prefix_groups, 1, 4)
        assert sub is not None and [(list(g), s) for g, s in sub.groups()] == [([0, 1, 2], 3)]
        cache = kvblock.KVCache(1, 32, bs, hkv, d, "float32")
        cache.k[0][...] = rng.standard_normal(cache.k[0].shape).astype(np.float32)
        cache.v[0][...] = rng.standard_normal(cache.v[0].shape).astype(np.float32)
        q = rng.standard_normal((3, hq, d)).astype(np.float32)
        bt, sl = batch.block_tables[1:4], batch.seq_lens[1:4]
        plain, grouped = np.full_like(q, np.nan), np.full_like(q, np.nan)
        kvblock.paged_attention(cache, 0, q, bt, sl, plain)
        kvblock.paged_attention(cache, 0, q, bt, sl, grouped, prefix_groups=sub)
        np.testing.assert_allclose(grouped, plain, rtol=1e-5, atol=1e-6)
