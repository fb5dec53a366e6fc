"""ops/mask_mods.py: mask mods combined, evaluated as booleans, and the
`BlockMask` of the blocks a mask mod empties or keeps whole."""

import numpy as np
import pytest
from keras import ops

from keras_attention import ops as ka_ops
from keras_attention.ops import mask_mods
from keras_attention.ops import mods

Q_IDX, KV_IDX = np.arange(3)[:, None], np.arange(3)[None]


def test_and_and_or_combine_mods_as_booleans():
    window = ka_ops.and_masks(mods.causal(), mods.sliding_window(2))
    either = ka_ops.or_masks(mods.causal(), mods.band(0, 1))
    got = [
        ops.convert_to_numpy(m(0, 0, Q_IDX, KV_IDX)).astype(int).tolist()
        for m in (window, either, ka_ops.and_masks(), ka_ops.or_masks())
    ]
    assert got[0] == [[1, 0, 0], [1, 1, 0], [0, 1, 1]]
    assert got[1] == [[1, 1, 0], [1, 1, 1], [1, 1, 1]]
    assert np.all(np.array(got[2]) == 1) and np.all(np.array(got[3]) == 0)


def test_a_mask_mod_returning_floats_is_refused(rand):
    """A float mask would keep every pair it does not set to exactly 0
    (0.3 everywhere: no mask at all); integers count as booleans."""

    def soft(batch, head, q_idx, kv_idx):
        return ops.cast(q_idx >= kv_idx, "float32") * 0.3

    def ones(batch, head, q_idx, kv_idx):
        return ops.cast(q_idx >= kv_idx, "int32")

    with pytest.raises(TypeError, match="mask_mod.*float32"):
        mask_mods.keep(soft, 0, 0, Q_IDX, KV_IDX)
    kept = ops.convert_to_numpy(mask_mods.keep(ones, 0, 0, Q_IDX, KV_IDX))
    assert kept.dtype == bool and kept.sum() == 6
    q = rand(1, 4, 2, 3)
    for chunk_size in (0, 2):
        with pytest.raises(TypeError, match="to return booleans"):
            ka_ops.flex_attention(q, q, q, mask_mod=soft, chunk_size=chunk_size)
    with pytest.raises(TypeError, match="to return booleans"):
        ka_ops.and_masks(mods.causal(), soft)(0, 0, Q_IDX, KV_IDX)


def test_block_mask_kinds_match_numpy():
    mask = ka_ops.and_masks(mods.causal(), mods.sliding_window(5))
    block_mask = ka_ops.create_block_mask(mask, None, None, 10, 9, (4, 3))
    i, j = np.arange(12)[:, None], np.arange(9)[None]
    keep = (i >= j) & (np.abs(i - j) < 5) & (i < 10)
    blocks = keep.reshape(3, 4, 3, 3)
    want = np.where(blocks.all((1, 3)), 2, np.where(blocks.any((1, 3)), 1, 0))
    got = ops.convert_to_numpy(block_mask.kinds)
    assert got.shape == (1, 1, 3, 3)
    np.testing.assert_array_equal(got[0, 0], want)
    assert "BlockMask" in repr(block_mask)
    assert 0 < block_mask.sparsity() < 1


def test_create_block_mask_names_its_bad_arguments():
    with pytest.raises(ValueError, match="block_size=0"):
        ka_ops.create_block_mask(mods.causal(), None, None, 4, 4, 0)
    with pytest.raises(ValueError, match="q_len=0"):
        ka_ops.create_block_mask(mods.causal(), None, None, 0, 4)
    with pytest.raises(TypeError, match="mask_mod=None"):
        ka_ops.create_block_mask(None, None, None, 4, 4)
    with pytest.raises(TypeError, match="to take 4 positional arguments"):
        ka_ops.create_block_mask(lambda q, k: q >= k, None, None, 4, 4)
    with pytest.raises(TypeError, match="to take 4 positional arguments"):
        ka_ops.and_masks(lambda q, k: q >= k)
