"""Attention over any axes of N-D inputs, checked against Keras's layer."""

import keras
import numpy as np
import pytest

import keras_attention
from tests.layer_basics import to_np

# (query shape, value shape, attention_axes)
CASES = {
    "4d_one_axis": ((2, 3, 4, 8), (2, 3, 5, 8), (2,)),
    "4d_first_axis": ((2, 4, 3, 8), (2, 5, 3, 8), (1,)),
    "4d_both_axes": ((2, 3, 4, 8), (2, 3, 2, 8), None),
    "4d_negative_axis": ((2, 3, 4, 8), (2, 3, 5, 8), (-2,)),
    "5d_two_axes": ((2, 5, 3, 4, 8), (2, 5, 3, 2, 8), (2, 3)),
    "5d_split_axes": ((2, 3, 5, 4, 8), (2, 2, 5, 4, 8), (1, 3)),
}


def _pair(attention_axes, query, value, **kwargs):
    keras_layer = keras.layers.MultiHeadAttention(
        2, 4, attention_axes=attention_axes, **kwargs
    )
    ours = keras_attention.MultiHeadAttention(
        2, 4, attention_axes=attention_axes, **kwargs
    )
    keras_layer(query, value)
    ours(query, value)
    ours.set_weights(keras_layer.get_weights())
    return keras_layer, ours


@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_and_weights_equal_keras(name, rng):
    query_shape, value_shape, axes = CASES[name]
    query = rng.normal(size=query_shape).astype("float32")
    value = rng.normal(size=value_shape).astype("float32")
    keras_layer, ours = _pair(axes, query, value)
    want, want_w = keras_layer(query, value, return_attention_scores=True)
    got, got_w = ours(query, value, return_attention_scores=True)
    assert tuple(got_w.shape) == tuple(want_w.shape)
    np.testing.assert_allclose(to_np(got_w), to_np(want_w), atol=1e-6)
    np.testing.assert_allclose(to_np(got), to_np(want), atol=1e-5)
    # The fused path (no weights requested) gives the same output.
    np.testing.assert_allclose(
        to_np(ours(query, value)), to_np(want), atol=1e-5
    )
    spec = ours.compute_output_spec(
        keras.KerasTensor(query_shape),
        keras.KerasTensor(value_shape),
        return_attention_scores=True,
    )
    assert tuple(spec[1].shape) == tuple(want_w.shape)


@pytest.mark.parametrize("name", ["4d_one_axis", "5d_two_axes"])
def test_attention_mask_in_keras_layout_equals_keras(name, rng):
    query_shape, value_shape, axes = CASES[name]
    query = rng.normal(size=query_shape).astype("float32")
    value = rng.normal(size=value_shape).astype("float32")
    keras_layer, ours = _pair(axes, query, value)
    # (B, free..., Tq axes..., Tk axes...), at least one key per query.
    _, want_w = keras_layer(query, value, return_attention_scores=True)
    heads_axis = len(want_w.shape) - 2 * len(axes) - 1
    mask_shape = tuple(np.delete(want_w.shape, heads_axis))
    mask = rng.random(mask_shape) > 0.4
    flat = mask.reshape(mask_shape[: -len(axes)] + (-1,))
    flat[..., 0] = True
    mask = flat.reshape(mask_shape)
    want, want_w = keras_layer(
        query, value, attention_mask=mask, return_attention_scores=True
    )
    got, got_w = ours(
        query, value, attention_mask=mask, return_attention_scores=True
    )
    np.testing.assert_allclose(to_np(got_w), to_np(want_w), atol=1e-6)
    np.testing.assert_allclose(to_np(got), to_np(want), atol=1e-5)


def test_causal_mask_over_the_first_axis_equals_keras(rng):
    x = rng.normal(size=(1, 5, 3, 8)).astype("float32")
    keras_layer, ours = _pair((1,), x, x)
    want, want_w = keras_layer(
        x, x, use_causal_mask=True, return_attention_scores=True
    )
    got, got_w = ours(x, x, use_causal_mask=True, return_attention_scores=True)
    np.testing.assert_allclose(to_np(got_w), to_np(want_w), atol=1e-6)
    np.testing.assert_allclose(to_np(got), to_np(want), atol=1e-5)


def test_chunked_path_equals_dense_on_nd_inputs(rng):
    query_shape, value_shape, axes = CASES["5d_two_axes"]
    query = rng.normal(size=query_shape).astype("float32")
    value = rng.normal(size=value_shape).astype("float32")
    dense = keras_attention.MultiHeadAttention(
        2, 4, attention_axes=axes, chunk_size=0
    )
    chunked = keras_attention.MultiHeadAttention(
        2, 4, attention_axes=axes, chunk_size=3
    )
    dense(query, value)
    chunked(query, value)
    chunked.set_weights(dense.get_weights())
    np.testing.assert_allclose(
        to_np(chunked(query, value, use_causal_mask=True)),
        to_np(dense(query, value, use_causal_mask=True)),
        atol=1e-5,
    )


@pytest.mark.parametrize(
    "kwargs, shapes, match",
    [
        (
            {"attention_axes": (3,)},
            ((2, 3, 4, 8), (2, 3, 4, 8)),
            r"Received: attention_axes=\(3,\)",
        ),
        (
            {"attention_axes": (2,)},
            ((2, 3, 4, 8), (2, 2, 4, 8)),
            r"the axes not attended over \(1,\)",
        ),
        (
            {"attention_axes": (2,)},
            ((2, None, 4, 8), (2, 3, 4, 8)),
            "needs the axes between batch and features to be known",
        ),
        (
            {},
            ((2, 3, 4, 8), (2, 3, 8)),
            "of the same rank, at least 3",
        ),
        (
            {},
            ((2, 3, 8), (3, 5, 8), (3, 5, 8)),
            r"the same batch size .* query.shape=\(2, 3, 8\)",
        ),
    ],
)
def test_bad_axes_and_shapes_raise_naming_them(kwargs, shapes, match):
    layer = keras_attention.MultiHeadAttention(2, 4, **kwargs)
    with pytest.raises(ValueError, match=match):
        layer.build(*shapes)


def test_attention_mask_that_does_not_fit_the_layout_raises(rng):
    query = rng.normal(size=(2, 3, 4, 8)).astype("float32")
    layer = keras_attention.MultiHeadAttention(2, 4, attention_axes=(2,))
    with pytest.raises(ValueError, match=r"attention_mask.shape=\(2, 3, 2"):
        layer(query, query, attention_mask=np.ones((2, 3, 2, 4, 4), bool))
