"""ops/_layout.py: the kernels' one layout of grouped heads and of masks."""

import numpy as np
import pytest
from keras import ops

from keras_attention.ops import _layout


def test_index_tensors_give_query_head_kv_head_times_groups_plus_g():
    b, h, q, kv = (
        ops.convert_to_numpy(t)
        for t in _layout.index_tensors(2, 2, 3, np.arange(4), [5, 6])
    )
    shape = np.broadcast_shapes(b.shape, h.shape, q.shape, kv.shape)
    assert shape == (2, 2, 3, 4, 2)
    assert b.ravel().tolist() == [0, 1]
    # Query head kv_head * groups + g.
    np.testing.assert_array_equal(h[0, :, :, 0, 0], [[0, 1, 2], [3, 4, 5]])
    assert q.ravel().tolist() == [0, 1, 2, 3]
    assert kv.ravel().tolist() == [5, 6]


def test_group_puts_query_head_h_beside_its_key_value_head(rng):
    query = rng.normal(size=(2, 5, 6, 3)).astype("float32")
    grouped = ops.convert_to_numpy(_layout.group(query, 2))
    assert grouped.shape == (2, 2, 3, 5, 3)
    # Query head h = kv_head * 3 + g.
    np.testing.assert_array_equal(grouped[:, 1, 2], query[:, :, 5])
    np.testing.assert_array_equal(grouped[:, 0, 1], query[:, :, 1])
    back = ops.convert_to_numpy(_layout.ungroup(grouped))
    np.testing.assert_array_equal(back, query)
    key = rng.normal(size=(2, 4, 2, 3)).astype("float32")
    kv = ops.convert_to_numpy(_layout.key_value(key))
    assert kv.shape == (2, 2, 1, 4, 3)
    np.testing.assert_array_equal(kv[:, 1, 0], key[:, :, 1])


@pytest.mark.parametrize(
    "shape, want",
    [
        ((4, 5), (1, 1, 1, 4, 5)),  # (Tq, Tk)
        ((2, 4, 5), (2, 1, 1, 4, 5)),  # (B, Tq, Tk): Keras's heads axis
        ((2, 1, 4, 5), (2, 1, 1, 4, 5)),
        ((2, 6, 4, 5), (2, 2, 3, 4, 5)),  # per head
    ],
)
def test_a_mask_of_any_rank_has_one_grouped_form(shape, want, rng):
    mask = rng.random(shape) < 0.5
    grouped = ops.convert_to_numpy(_layout.grouped(mask, 2))
    assert grouped.shape == want
    # Keras's axes: a 3-D mask lacks the heads axis, a 2-D one both.
    four_d = {2: (1, 1) + shape, 3: shape[:1] + (1,) + shape[1:], 4: shape}
    full = np.broadcast_to(mask.reshape(four_d[len(shape)]), (2, 6, 4, 5))
    np.testing.assert_array_equal(
        np.broadcast_to(grouped, (2, 2, 3, 4, 5)).reshape(2, 6, 4, 5), full
    )


def test_weights_and_rows_leave_the_layout_by_reshape(rng):
    x = rng.normal(size=(2, 2, 3, 4, 5)).astype("float32")
    np.testing.assert_array_equal(
        ops.convert_to_numpy(_layout.heads(x)), x.reshape(2, 6, 4, 5)
    )
    lse = x[..., :1]
    np.testing.assert_array_equal(
        ops.convert_to_numpy(_layout.rows(lse)), lse.reshape(2, 6, 4)
    )
