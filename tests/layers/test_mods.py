"""`score_mod=` / `mask_mod=` / `attention_bias` on the multi-head layers,
`RelativePositionBias`, and Keras's `_masked_softmax` hook honoured."""

import os

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention.ops import mods
from tests.autodiff import gradients


def to_np(x):
    return ops.convert_to_numpy(x)


@pytest.fixture
def x(rand):
    return rand(2, 9, 8)


SEGMENTS = np.array([[0, 0, 0, 1, 1, 1, 1, 2, 2], [0, 0, 0, 0, 0, 0, 1, 1, 1]])


@pytest.mark.tensorflow_lane
def test_mask_mods_equal_the_layers_flags_and_masks(x):
    """Other lanes: tests/ops/test_flex.py (the mods themselves) and
    `test_model_with_mods_saves_and_loads` below (the layers with mods)."""
    layer = keras_attention.MultiHeadAttention(2, 4)
    want = to_np(layer(x, x, use_causal_mask=True))
    np.testing.assert_allclose(
        to_np(layer(x, x, mask_mod=mods.causal())), want, atol=1e-6
    )
    same = SEGMENTS[:, :, None] == SEGMENTS[:, None, :]
    want = to_np(layer(x, x, attention_mask=same))
    got = to_np(layer(x, x, mask_mod=mods.document(SEGMENTS)))
    np.testing.assert_allclose(got, want, atol=1e-6)
    # The layer's masks are mask mods too: the flag and the mod together.
    padding = np.arange(9)[None] < np.array([[6], [9]])
    want = to_np(
        layer(
            x, x, attention_mask=same & padding[:, None], use_causal_mask=True
        )
    )
    got = layer(
        x,
        x,
        value_mask=padding,
        use_causal_mask=True,
        mask_mod=mods.document(SEGMENTS),
    )
    np.testing.assert_allclose(to_np(got), want, atol=1e-6)


@pytest.mark.tensorflow_lane
def test_attention_bias_equals_the_alibi_score_mod(x):
    """Other lanes: `test_blocks_give_the_dense_outputs_and_gradients` in
    tests/ops/test_flex.py (the bias mod, on every backend)."""
    layer = keras_attention.SelfAttention(num_heads=4)
    i, j = np.arange(9)[:, None], np.arange(9)[None]
    slopes = np.array(mods.alibi_slopes(4))[:, None, None]
    bias = (-slopes * np.abs(i - j))[None].astype("float32")
    out, w = layer(x, attention_bias=bias, return_attention_scores=True)
    out2, w2 = layer(x, score_mod=mods.alibi(4), return_attention_scores=True)
    np.testing.assert_allclose(to_np(out), to_np(out2), atol=1e-6)
    np.testing.assert_allclose(to_np(w), to_np(w2), atol=1e-6)
    # And it changes the weights (a bias that did nothing would pass).
    w0 = layer(x, return_attention_scores=True)[1]
    assert np.abs(to_np(w0) - to_np(w)).max() > 1e-3


@pytest.mark.tensorflow_lane
def test_chunked_and_dense_layers_agree_with_mods(x):
    """Other lanes: `test_blocks_give_the_dense_outputs_and_gradients` in
    tests/ops/test_flex.py (the same kernel, without the projections)."""
    kwargs = dict(score_mod=mods.alibi(2), mask_mod=mods.sliding_window(3))
    dense = keras_attention.MultiHeadAttention(2, 4, chunk_size=0, **kwargs)
    chunked = keras_attention.MultiHeadAttention(2, 4, chunk_size=4, **kwargs)
    dense(x, x)
    chunked(x, x)
    chunked.set_weights(dense.get_weights())
    call = dict(use_causal_mask=True, mask_mod=mods.document(SEGMENTS))
    np.testing.assert_allclose(
        to_np(chunked(x, x, **call)), to_np(dense(x, x, **call)), atol=1e-5
    )


def _table_gradient(x, chunk_size, weights=None):
    bias = keras_attention.RelativePositionBias(
        2,
        num_buckets=8,
        max_distance=16,
        embeddings_initializer="random_normal",
    )
    layer = keras_attention.SelfAttention(
        num_heads=2, score_mod=bias, chunk_size=chunk_size
    )
    layer(x)
    if weights is not None:
        layer.set_weights(weights)
    assert layer.weights[-1].path.endswith("relative_attention_bias")
    _, grads = gradients(
        lambda *w: ops.sum(ops.square(layer(x, use_causal_mask=True))),
        layer.trainable_variables,
    )
    return grads[-1], layer.get_weights()


@pytest.mark.tensorflow_lane
def test_relative_position_table_trains_through_the_chunked_path(x):
    """Other lanes: `test_relative_position_table_gets_the_dense_gradient_
    through_blocks` in tests/ops/test_flex.py."""
    dense, weights = _table_gradient(x, 0)
    chunked, _ = _table_gradient(x, 4, weights)
    assert np.abs(dense).max() > 1e-4
    np.testing.assert_allclose(chunked, dense, atol=1e-5)


def test_model_with_mods_saves_and_loads(tmp_path, x):
    inputs = keras.Input((9, 8))
    bias = keras_attention.RelativePositionBias(
        2, 8, 16, bidirectional=False, embeddings_initializer="random_normal"
    )
    hidden = keras_attention.SelfAttention(
        2, score_mod=bias, mask_mod=mods.causal()
    )(inputs)
    output = keras_attention.MultiHeadAttention(
        2,
        4,
        score_mod=mods.chain(mods.alibi(2), mods.soft_cap(5.0)),
        mask_mod=keras_attention.ops.and_masks(
            mods.causal(), mods.sliding_window(4)
        ),
    )(hidden, hidden)
    model = keras.Model(inputs, output)
    path = os.path.join(tmp_path, "mods.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(
        to_np(loaded.predict(x, verbose=0)),
        to_np(model.predict(x, verbose=0)),
        atol=1e-6,
    )
    layer = loaded.layers[1]
    assert isinstance(layer.score_mod, keras_attention.RelativePositionBias)
    assert layer.mask_mod == mods.causal()


@pytest.mark.parametrize(
    "make",
    [
        lambda mod: keras_attention.MultiHeadAttention(2, 4, mask_mod=mod),
        lambda mod: keras_attention.GroupedQueryAttention(
            4, 2, 1, mask_mod=mod
        ),
    ],
    ids=["MultiHeadAttention", "GroupedQueryAttention"],
)
def test_an_unregistered_lambda_is_a_clear_error_when_saved(tmp_path, x, make):
    layer = make(lambda b, h, i, j: i >= j)
    inputs = keras.Input((9, 8))
    model = keras.Model(inputs, layer(inputs, inputs))
    with pytest.raises(ValueError, match="Cannot save `mask_mod`"):
        model.save(os.path.join(tmp_path, "lambda.keras"))


def test_bad_mods_name_the_argument(x):
    with pytest.raises(TypeError, match="score_mod=3"):
        keras_attention.MultiHeadAttention(2, 4, score_mod=3)
    # The planner refuses it at construction.
    with pytest.raises(ValueError, match="need the logits"):
        keras_attention.MultiHeadAttention(
            2, 4, attention_activation="sigmoid", mask_mod=mods.causal()
        )
    with pytest.raises(ValueError, match="max_distance=4"):
        keras_attention.RelativePositionBias(2, 32, 4)


def test_a_subclass_masked_softmax_is_honoured(x):
    class Sharper(keras_attention.MultiHeadAttention):
        def _masked_softmax(self, attention_scores, attention_mask=None):
            return super()._masked_softmax(
                attention_scores * 3.0, attention_mask
            )

    plain = keras_attention.MultiHeadAttention(2, 4)
    sharper = Sharper(2, 4)
    assert sharper.overridden_hooks == {"_masked_softmax"}
    assert plain.overridden_hooks == frozenset()
    plain(x, x)
    sharper(x, x)
    sharper.set_weights(plain.get_weights())
    got = to_np(sharper(x, x, return_attention_scores=True)[1])
    want = to_np(plain._masked_softmax(3.0 * _logits(plain, x)))
    np.testing.assert_allclose(got, want, atol=1e-5)
    # Without weights to return (the fused path for the plain layer).
    assert np.abs(to_np(sharper(x, x)) - to_np(plain(x, x))).max() > 1e-4


def _logits(layer, x):
    q = layer.query_dense(x)
    k = layer.key_dense(x)
    return ops.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(4.0)


def test_single_head_attention_takes_mods(rand):
    query, values = rand(2, 4, 6), rand(2, 7, 6)
    layer = keras_attention.Attention(mask_mod=mods.causal())
    want = to_np(
        layer(
            query, values, use_causal_mask=True, return_attention_scores=True
        )[1]
    )
    got = to_np(layer(query, values, return_attention_scores=True)[1])
    np.testing.assert_allclose(got, want, atol=1e-6)
    bias = rand(2, 4, 7)
    plain = keras_attention.Attention()
    _, w = plain(
        query, values, attention_bias=bias, return_attention_scores=True
    )
    logits = np.einsum("bqd,bkd->bqk", query, values) / np.sqrt(6.0) + bias
    e = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(
        to_np(w), e / e.sum(-1, keepdims=True), atol=1e-5
    )
    again = keras_attention.Attention.from_config(layer.get_config())
    assert again.mask_mod == mods.causal()
    _, w = plain(
        query,
        values,
        score_mod=mods.soft_cap(0.5),
        return_attention_scores=True,
    )
    logits = 0.5 * np.tanh(
        np.einsum("bqd,bkd->bqk", query, values) / np.sqrt(6.0) / 0.5
    )
    e = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(
        to_np(w), e / e.sum(-1, keepdims=True), atol=1e-5
    )
