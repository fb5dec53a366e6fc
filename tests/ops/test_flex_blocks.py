"""ops/_flex_blocks.py: the block kernel of `flex_attention` (the index
tensors of the grouped heads, the blocks' layout, the backend's vjp)."""

import numpy as np
import pytest
from keras import ops

from keras_attention.ops import _flex_blocks


def test_index_tensors_give_query_head_kv_head_times_groups_plus_g():
    b, h, q, kv = (
        ops.convert_to_numpy(t)
        for t in _flex_blocks.index_tensors(2, 2, 3, np.arange(4), [5, 6])
    )
    shape = np.broadcast_shapes(b.shape, h.shape, q.shape, kv.shape)
    assert shape == (2, 2, 3, 4, 2)
    assert b.ravel().tolist() == [0, 1]
    # Query head kv_head * groups + g.
    np.testing.assert_array_equal(h[0, :, :, 0, 0], [[0, 1, 2], [3, 4, 5]])
    assert q.ravel().tolist() == [0, 1, 2, 3]
    assert kv.ravel().tolist() == [5, 6]


@pytest.mark.tensorflow_lane
def test_blocks_hold_the_heads_and_give_them_back(rng):
    """Other lanes: tests/ops/test_flex.py, blocks against dense."""
    query = rng.normal(size=(2, 5, 4, 3)).astype("float32")
    key = rng.normal(size=(2, 6, 2, 3)).astype("float32")
    blocks = _flex_blocks.FlexBlocks(
        (query, key, key), (None, None, None), 1.0, (2, 4), None
    )
    assert (blocks.nq, blocks.nk, blocks.groups) == (3, 2, 2)
    assert tuple(blocks.q.shape) == (3, 2, 2, 2, 2, 3)
    back = _flex_blocks.to_heads(blocks, blocks.q, 5)
    np.testing.assert_allclose(ops.convert_to_numpy(back), query)
    again = _flex_blocks.from_heads(blocks, query)
    np.testing.assert_allclose(
        ops.convert_to_numpy(again), ops.convert_to_numpy(blocks.q)
    )


def test_vjp_gives_the_gradient_of_a_cotangent():
    x = ops.convert_to_tensor(np.array([1.0, 2.0, 3.0], "float32"))
    grads = _flex_blocks.vjp(
        lambda a: a * a, [x], lambda out: ops.ones_like(out) * 2.0
    )
    np.testing.assert_allclose(ops.convert_to_numpy(grads[0]), [4, 8, 12])
