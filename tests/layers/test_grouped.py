"""layers/_grouped.py: GroupedQueryAttention's kernel pieces against
NumPy with the K/V heads repeated (what they avoid doing)."""

import numpy as np
import pytest
from keras import ops

from keras_attention.layers import _grouped
from tests.layer_basics import np_softmax


def _numpy_grouped(query, key, value, mask, scale):
    groups = query.shape[2] // key.shape[2]
    key, value = (np.repeat(t, groups, axis=2) for t in (key, value))
    logits = np.einsum("bqhd,bkhd->bhqk", query, key) * scale
    logits = np.where(mask[:, None], logits, -np.inf)
    return np.einsum("bhqk,bkhd->bqhd", np_softmax(logits), value)


def test_grouped_weighted_sum_uses_key_value_head_h_over_groups(rng):
    # 3 groups of 2 K/V heads: a mix-up of the two axes changes shapes.
    weights = rng.random((2, 6, 3, 5)).astype("float32")
    value = rng.normal(size=(2, 5, 2, 3)).astype("float32")
    got = ops.convert_to_numpy(_grouped.grouped_weighted_sum(weights, value))
    want = np.einsum("bhqk,bkhd->bqhd", weights, np.repeat(value, 3, axis=2))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.tensorflow_lane
def test_folded_attention_equals_attention_with_repeated_heads(rng):
    """Other lanes: tests/layers/test_grouped_query.py (the fused path
    against Keras's layer)."""
    query = rng.normal(size=(2, 3, 4, 2)).astype("float32")
    key, value = rng.normal(size=(2, 2, 5, 2, 2)).astype("float32")
    mask = rng.random((2, 3, 5)) > 0.3
    mask[..., 0] = True
    got = _grouped.folded_attention(query, key, value, mask, 0.5)
    want = _numpy_grouped(query, key, value, mask, 0.5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(got), want, rtol=1e-4, atol=1e-5
    )


def test_tensor_mask_reads_the_mask_at_the_indices():
    mask = np.array([[[True, False, True], [False, True, True]]])
    mod = _grouped.TensorMask(mask, 2, 2, 3)
    batch = np.array([0, 1, 1]).reshape(-1, 1, 1)
    q_idx = np.array([0, 1]).reshape(1, -1, 1)
    kv_idx = np.array([0, 1, 2]).reshape(1, 1, -1)
    got = ops.convert_to_numpy(mod(batch, 0, q_idx, kv_idx))
    np.testing.assert_array_equal(got, np.broadcast_to(mask, (3, 2, 3)))


def test_check_shapes_names_the_shapes():
    _grouped.check_shapes((2, 3, 4), (2, 5, 4), (2, 5, 6))
    for shapes, match in [
        (((2, 3, 4), (2, 5, 6), (2, 5, 6)), "last dimension"),
        (((2, 3, 4), (2, 5, 4), (2, 6, 4)), "except the last one"),
        (((2, 3, 1, 4), (2, 5, 1, 4), (2, 5, 1, 4)), "time, dim"),
    ]:
        with pytest.raises(ValueError, match=match):
            _grouped.check_shapes(*shapes)
