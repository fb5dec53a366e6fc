"""ops/_kernel.py: the one block kernel of `chunked_attention` and
`flex_attention` (the index tensors of the grouped heads, the blocks'
layout, the backend's vjp, additive logits with grouped heads and a score
mod against dense, band and block-mask skipping)."""

import numpy as np
from keras import ops

from keras_attention.ops import _kernel


def test_index_tensors_give_query_head_kv_head_times_groups_plus_g():
    b, h, q, kv = (
        ops.convert_to_numpy(t)
        for t in _kernel.index_tensors(2, 2, 3, np.arange(4), [5, 6])
    )
    shape = np.broadcast_shapes(b.shape, h.shape, q.shape, kv.shape)
    assert shape == (2, 2, 3, 4, 2)
    assert b.ravel().tolist() == [0, 1]
    # Query head kv_head * groups + g.
    np.testing.assert_array_equal(h[0, :, :, 0, 0], [[0, 1, 2], [3, 4, 5]])
    assert q.ravel().tolist() == [0, 1, 2, 3]
    assert kv.ravel().tolist() == [5, 6]


def test_blocks_hold_the_grouped_heads(rng):
    query = rng.normal(size=(2, 2, 2, 5, 3)).astype("float32")
    key = rng.normal(size=(2, 2, 1, 6, 3)).astype("float32")
    blocks = _kernel.Blocks((query, key, key), _kernel.Spec(1.0, (2, 4)))
    assert (blocks.nq, blocks.nk, blocks.groups) == (3, 2, 2)
    assert tuple(blocks.q.shape) == (3, 2, 2, 2, 2, 3)
    assert tuple(blocks.k_t.shape) == (2, 2, 2, 1, 3, 4)
    assert blocks.k_valid is not None and blocks.q_valid is None


def test_vjp_gives_the_gradient_of_a_cotangent():
    x = ops.convert_to_tensor(np.array([1.0, 2.0, 3.0], "float32"))
    grads = _kernel.vjp(
        lambda a: a * a, [x], lambda out: ops.ones_like(out) * 2.0
    )
    np.testing.assert_allclose(ops.convert_to_numpy(grads[0]), [4, 8, 12])
