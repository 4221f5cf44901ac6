"""Arrays that numpy or torch call contiguous are taken as they are: a dimension of one element may have
any stride (numpy gives a new axis stride 0, torch keeps whatever stride it had), since no element is
ever stepped over along it. Arrays with a gap stay refused."""
import itertools

import numpy as np
import pytest

import kvblock

BS, KVH, QH, D = 16, 2, 4, 64


def decode(cache, q, tables, lens):
    out = np.full_like(q, np.nan)
    kvblock.paged_attention(cache, 0, q, tables, lens, out)
    return out


@pytest.fixture
def filled():
    rng = np.random.default_rng(3)
    with kvblock.Manager(num_blocks=8, block_size=BS) as m:
        cache = kvblock.KVCache(1, 8, BS, KVH, D, "float32")
        m.allocate(0, range(40))
        batch = m.batch_export(np.arange(1))
        k = rng.standard_normal((batch.num_slots, KVH, D)).astype(np.float32)
        kvblock.write_kv(cache, 0, k, k + 1, batch.slot_mapping)
        q = rng.standard_normal((1, QH, D)).astype(np.float32)
        yield cache, q, np.array(batch.block_tables[0], np.int32), batch.seq_lens


def test_numpy_new_axis_block_table(filled):
    cache, q, row, lens = filled
    tables = row[None]  # shape (1, n), strides (0, 4): C_CONTIGUOUS for numpy
    assert tables.flags.c_contiguous and tables.strides[0] == 0
    np.testing.assert_array_equal(decode(cache, q, tables, lens), decode(cache, q, row.reshape(1, -1).copy(), lens))
    with pytest.raises(kvblock.KvbError, match="block_tables: must be contiguous"):
        decode(cache, q, np.repeat(row[None], 2, axis=1)[:, ::2], lens)


def test_torch_size_one_dim_with_odd_stride(filled):
    torch = pytest.importorskip("torch")
    cache, q, row, lens = filled
    tables = torch.empty_strided((1, len(row)), (7, 1), dtype=torch.int32)
    tables.copy_(torch.from_numpy(row)[None])
    assert tables.is_contiguous() and tables.stride() == (7, 1)
    np.testing.assert_array_equal(decode(cache, q, tables, lens), decode(cache, q, row[None].copy(), lens))
    gapped = torch.from_numpy(np.repeat(row, 2))[None, ::2]
    assert not gapped.is_contiguous()
    with pytest.raises(kvblock.KvbError, match="block_tables: must be contiguous"):
        decode(cache, q, gapped, lens)


def test_dense_agrees_with_numpy_and_torch_flags():
    """Every view of small arrays by slicing, new axes and transposes: _dense says what numpy's
    C_CONTIGUOUS flag (and torch's is_contiguous, when torch is importable) says."""
    from kvblock._tensor import _dense
    try:
        import torch
    except ImportError:
        torch = None
    base = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    views = [base, base[None], base[:, None], base[:1], base[:, :1], base[:, :, :1], base[:1, :1, :1],
             base[:, ::2], base[::2], base[:, :, ::2], base.transpose(1, 0, 2), base[:1].transpose(1, 0, 2),
             base[:, :1, :].transpose(1, 0, 2), base[:0], base[..., None], base[:, 1:2, None], base[1:, :, 1:]]
    views += [np.arange(5)[None], np.arange(5)[:, None], np.arange(10)[::2][None]]
    for shape in itertools.product([1, 2], repeat=3):
        views.append(np.ones(shape)[:, ::-1][:, ::-1])
    for v in views:
        elem = tuple(s // v.itemsize for s in v.strides)
        assert _dense(v.shape, elem) == v.flags.c_contiguous, (v.shape, v.strides)
        if torch is not None and all(s >= 0 for s in elem):
            t = torch.from_numpy(np.ascontiguousarray(base)).as_strided(v.shape, elem) if v.size else None
            if t is not None:
                assert _dense(tuple(t.shape), tuple(t.stride())) == t.is_contiguous(), (v.shape, elem)
