"""layers/_heads.py: the kernels of grouped heads against NumPy with the
K/V heads repeated (what they avoid doing)."""

import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention.layers import _heads
from keras_attention.layers import grouped_query
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
    got = ops.convert_to_numpy(_heads.weighted_sum(weights, value))
    want = np.einsum("bhqk,bkhd->bqhd", weights, np.repeat(value, 3, axis=2))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.tensorflow_lane
def test_fused_equals_attention_with_repeated_heads(rng):
    """Other lanes: tests/layers/test_grouped_query.py (the fused path
    against Keras's layer)."""
    query = rng.normal(size=(2, 3, 4, 2)).astype("float32")
    key, value = rng.normal(size=(2, 2, 5, 2, 2)).astype("float32")
    mask = rng.random((2, 3, 5)) > 0.3
    mask[..., 0] = True
    got = _heads.fused(query, key, value, mask, 0.5)
    want = _numpy_grouped(query, key, value, mask, 0.5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(got), want, rtol=1e-4, atol=1e-5
    )


def test_fused_folds_a_per_head_mask_onto_its_query_heads(rng):
    """A `(B, H, Tq, Tk)` mask with grouped heads: head `h`'s row goes
    to query head `h`, folded beside its group."""
    query = rng.normal(size=(2, 3, 4, 2)).astype("float32")
    key, value = rng.normal(size=(2, 2, 5, 2, 2)).astype("float32")
    mask = rng.random((2, 4, 3, 5)) > 0.3
    mask[..., 0] = True
    got = ops.convert_to_numpy(_heads.fused(query, key, value, mask, 0.5))
    groups = 2
    k, v = (np.repeat(t, groups, axis=2) for t in (key, value))
    logits = np.einsum("bqhd,bkhd->bhqk", query, k) * 0.5
    weights = np_softmax(np.where(mask, logits, -np.inf))
    want = np.einsum("bhqk,bkhd->bqhd", weights, v)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("score", ["scaled_dot", "additive"])
def test_blocks_of_grouped_heads_equal_the_dense_logits(score, rng):
    """`blocks` (one `chunked_attention` per group position) against the
    dense logits of the same score, with a padding mask and a band."""
    query = rng.normal(size=(2, 7, 4, 4)).astype("float32")
    key, value = rng.normal(size=(2, 2, 6, 2, 4)).astype("float32")
    key_mask = np.arange(6)[None].repeat(2, 0) < [[6], [4]]
    score = keras_attention.scores.get(score)
    score.build((2, 2, None, 4), (2, 2, None, 4))
    masks = keras_attention.ops.masks.attention_masks(
        key_mask=key_mask, use_causal_mask=True, sliding_window=3
    )
    got = _heads.blocks(score, query, key, value, masks, (3, 2))
    logits = _heads.logits(score, query, key)
    dense = masks.dense(7, 6, heads_axis=True)
    weights = keras_attention.ops.masked_softmax(
        logits, _heads.heads_mask(dense, ops.shape(logits))
    )
    want = _heads.weighted_sum(weights, value)
    np.testing.assert_allclose(
        ops.convert_to_numpy(got), ops.convert_to_numpy(want), atol=1e-5
    )


def test_check_shapes_names_the_shapes():
    grouped_query._check_shapes((2, 3, 4), (2, 5, 4), (2, 5, 6))
    for shapes, match in [
        (((2, 3, 4), (2, 5, 6), (2, 5, 6)), "last dimension"),
        (((2, 3, 4), (2, 5, 4), (2, 6, 4)), "except the last one"),
        (((2, 3, 1, 4), (2, 5, 1, 4), (2, 5, 1, 4)), "time, dim"),
    ]:
        with pytest.raises(ValueError, match=match):
            grouped_query._check_shapes(*shapes)
