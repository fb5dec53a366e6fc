"""Inputs of rank above 3, `(batch_size, ..., T, dim)`: the leading axes
folded into the batch for `Attention`, `AdditiveAttention` and
`HardAttention`, and back on the outputs (Keras's numbers on such inputs
are in test_keras_scores.py)."""

import keras
import numpy as np
import pytest

import keras_attention
from tests.layer_basics import to_np


@pytest.mark.parametrize(
    "layer",
    [
        lambda: keras_attention.Attention(score="additive"),
        lambda: keras_attention.Attention(score="bilinear"),
        lambda: keras_attention.HardAttention(score="dot"),
    ],
)
def test_nd_inputs_equal_the_layer_on_each_row(layer, rand, rng):
    # Two paths that must agree: the folded rank-4 call and the rank-3
    # call on each row, with a query mask, value mask and causal mask.
    query, value = rand(2, 3, 4, 4), rand(2, 3, 4, 4)
    query_mask = rng.random((2, 3, 4)) > 0.3
    value_mask = rng.random((2, 3, 4)) > 0.3
    layer = layer()
    call = dict(return_attention_scores=True, use_causal_mask=True)
    got = layer(
        query, value, query_mask=query_mask, value_mask=value_mask, **call
    )
    for row in range(3):
        want = layer(
            query[:, row],
            value[:, row],
            query_mask=query_mask[:, row],
            value_mask=value_mask[:, row],
            **call,
        )
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(to_np(g)[:, row], to_np(w), atol=1e-6)


def test_nd_self_attention_masks_keys_by_the_query_mask(rand):
    x = rand(2, 3, 4, 4)
    mask = np.ones((2, 3, 4), bool)
    mask[:, 1, 2:] = False
    _, weights = keras_attention.Attention()(
        x, query_mask=mask, return_attention_scores=True
    )
    weights = to_np(weights)
    np.testing.assert_array_equal(weights[:, 1, :, 2:], 0.0)
    assert weights[:, 0, :, 2:].min() > 0.0


def test_nd_inputs_in_a_functional_model_save_and_load(rand, tmp_path):
    q, v = keras.Input((3, 4, 4)), keras.Input((3, 5, 4))
    context, weights = keras_attention.Attention(score="additive")(
        q, v, return_attention_scores=True
    )
    assert tuple(context.shape) == (None, 3, 4, 4)
    assert tuple(weights.shape) == (None, 3, 4, 5)
    model = keras.Model([q, v], context)
    inputs = [rand(2, 3, 4, 4), rand(2, 3, 5, 4)]
    want = model.predict(inputs, verbose=0)
    path = str(tmp_path / "nd.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(
        loaded.predict(inputs, verbose=0), want, atol=1e-6
    )


def test_nd_inputs_of_other_ranks_or_axes_are_named(rand):
    query = rand(2, 3, 4, 4)
    with pytest.raises(ValueError, match=r"value.shape=\(2, 5, 4\)"):
        keras_attention.Attention()(query, rand(2, 5, 4))
    with pytest.raises(ValueError, match=r"axes before .*value.shape=\(2, 2,"):
        keras_attention.Attention()(query, rand(2, 2, 5, 4))
    with pytest.raises(ValueError, match=r"value_mask.shape=\(2, 5\)"):
        keras_attention.Attention()(
            query, rand(2, 3, 5, 4), value_mask=np.ones((2, 5), bool)
        )
    with pytest.raises(ValueError, match=r"value.shape=\(2, 2, 5, 4\)"):
        keras_attention.Attention().build((2, 3, 4, 4), (2, 2, 5, 4))
