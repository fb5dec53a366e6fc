import keras
import numpy as np
import pytest

import keras_attention
from tests.layer_basics import check_layer_basics
from tests.layer_basics import to_np

B, T, D = 2, 5, 8


def np_self_attention(layer, x, mask=None, attention_mask=None):
    """softmax(Q Kᵀ / sqrt(d_k)) V per head, concatenated and projected."""
    wq, bq, wk, bk, wv, bv, wo, bo = layer.get_weights()
    q = np.einsum("btd,dnh->bnth", x, wq) + bq[:, None]
    k = np.einsum("btd,dnh->bnth", x, wk) + bk[:, None]
    v = np.einsum("btd,dnh->bnth", x, wv) + bv[:, None]
    logits = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    keep = np.ones(logits.shape, bool)
    if mask is not None:
        keep &= mask[:, None, None, :] & mask[:, None, :, None]
    if attention_mask is not None:
        keep &= attention_mask[:, None]
    e = np.where(keep, np.exp(logits - logits.max(-1, keepdims=True)), 0.0)
    total = e.sum(-1, keepdims=True)
    a = e / np.where(total > 0, total, 1.0)
    context = a @ v
    return np.einsum("bnth,nho->bto", context, wo) + bo, a


def test_basics_with_scores_returned(rand):
    check_layer_basics(
        keras_attention.SelfAttention,
        {"num_heads": 2},
        [rand(B, T, D)],
        {"return_attention_scores": True},
        expected_output_shape=[(B, T, D), (B, 2, T, T)],
        expected_num_trainable_weights=8,
    )


def test_basics_with_dims_dropout_causal_and_bilinear_score(rand):
    check_layer_basics(
        keras_attention.SelfAttention,
        {
            "num_heads": 3,
            "key_dim": 2,
            "value_dim": 5,
            "use_bias": False,
            "dropout": 0.2,
            "seed": 3,
            "score": "bilinear",
        },
        [rand(B, T, D)],
        {"use_causal_mask": True},
        expected_output_shape=(B, T, D),
        expected_num_trainable_weights=5,
    )


def test_matches_numpy_formula(rand):
    layer = keras_attention.SelfAttention(num_heads=2)
    x = rand(B, T, D)
    out, weights = layer(x, return_attention_scores=True)
    want, want_w = np_self_attention(layer, x)
    np.testing.assert_allclose(to_np(weights), want_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(to_np(out), want, rtol=1e-5, atol=1e-5)


def test_tiny_hand_computed_case():
    # Identity projections, one head, depth 1: x = [0, ln 3] gives logits
    # q_i k_j = x_i x_j, so row 1 weights are softmax([0, (ln 3)^2]).
    layer = keras_attention.SelfAttention(
        num_heads=1, kernel_initializer="ones", use_bias=False
    )
    x = np.array([[[0.0], [np.log(3.0)]]], "float32")
    _, weights = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(to_np(weights)[0, 0, 0], [0.5, 0.5])
    p = 1 / (1 + np.exp(-(np.log(3.0) ** 2)))
    np.testing.assert_allclose(to_np(weights)[0, 0, 1], [1 - p, p], rtol=1e-6)


def test_matches_keras_mha_on_x_x_with_copied_weights(rand):
    x = rand(B, T, D)
    padding = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    theirs = keras.layers.MultiHeadAttention(num_heads=4, key_dim=2)
    ours = keras_attention.SelfAttention(num_heads=4)
    theirs(x, x)
    ours(x)
    ours.set_weights(theirs.get_weights())
    for kwargs in ({}, {"use_causal_mask": True}):
        want = theirs(x, x, value_mask=padding, **kwargs)
        got = ours(x, mask=padding, **kwargs)
        # Keras lets padded queries attend; we give them a zero context.
        np.testing.assert_allclose(
            to_np(got)[padding], to_np(want)[padding], rtol=1e-5, atol=1e-5
        )


def test_embedding_mask_is_used_and_propagated():
    ids = np.array([[3, 1, 4, 0, 0], [2, 7, 1, 8, 5]])
    embedding = keras.layers.Embedding(10, D, mask_zero=True)
    layer = keras_attention.SelfAttention(num_heads=2)
    x = embedding(ids)
    out, weights = layer(x, return_attention_scores=True)
    want, want_w = np_self_attention(layer, to_np(x), mask=ids != 0)
    np.testing.assert_allclose(to_np(out), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_np(weights), want_w, atol=1e-6)
    np.testing.assert_array_equal(to_np(out._keras_mask), ids != 0)
    # In a functional model the mask reaches the pooling layer after it.
    tokens = keras.Input((5,), dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(layer(embedding(tokens)))
    got = keras.Model(tokens, pooled).predict(ids, verbose=0)
    mask = (ids != 0)[..., None]
    np.testing.assert_allclose(
        got, (want * mask).sum(1) / mask.sum(1), rtol=1e-5, atol=1e-5
    )


def test_embedding_mask_combines_with_an_attention_mask():
    # With a second tensor argument Keras no longer fills `mask`; the
    # padding must still be applied on top of the explicit mask.
    ids = np.array([[3, 1, 4, 0, 0], [2, 7, 1, 8, 5]])
    embedding = keras.layers.Embedding(10, D, mask_zero=True)
    layer = keras_attention.SelfAttention(num_heads=2)
    causal = np.tril(np.ones((2, 5, 5), bool))
    x = embedding(ids)
    out, weights = layer(x, attention_mask=causal, return_attention_scores=True)
    padding = ids != 0
    want, want_w = np_self_attention(
        layer, to_np(x), mask=padding, attention_mask=causal
    )
    np.testing.assert_allclose(to_np(weights), want_w, atol=1e-6)
    np.testing.assert_allclose(to_np(out), want, rtol=1e-5, atol=1e-5)
    assert np.all(to_np(weights)[0, :, :, 3:] == 0)
    # The same in a functional model.
    tokens = keras.Input((5,), dtype="int32")
    mask_input = keras.Input((5, 5), dtype="bool")
    model = keras.Model(
        [tokens, mask_input],
        layer(
            embedding(tokens),
            attention_mask=mask_input,
            return_attention_scores=True,
        )[1],
    )
    got = model.predict([ids, causal], verbose=0)
    np.testing.assert_allclose(got, want_w, atol=1e-6)


def test_weights_sum_to_one_over_unpadded_keys_and_padding_is_ignored(rand):
    layer = keras_attention.SelfAttention(num_heads=2)
    x = rand(B, T, D)
    padding = np.array([[1, 1, 0, 1, 0], [1, 1, 1, 1, 0]], bool)
    out, weights = layer(x, mask=padding, return_attention_scores=True)
    sums = to_np(weights).sum(-1)
    np.testing.assert_allclose(
        sums, np.broadcast_to(padding[:, None], sums.shape), rtol=1e-5
    )
    noisy = np.where(padding[..., None], x, rand(B, T, D, scale=1e3))
    np.testing.assert_allclose(
        to_np(layer(noisy, mask=padding))[padding],
        to_np(out)[padding],
        rtol=1e-5,
        atol=1e-5,
    )


def test_causal_outputs_do_not_depend_on_future_positions(rand):
    layer = keras_attention.SelfAttention(num_heads=2)
    x = rand(B, T, D)
    before = to_np(layer(x, use_causal_mask=True))
    changed = x.copy()
    changed[:, 2:] = rand(B, T - 2, D)
    after = to_np(layer(changed, use_causal_mask=True))
    np.testing.assert_allclose(after[:, :2], before[:, :2], atol=1e-6)


def test_causal_flag_equals_lower_triangular_attention_mask(rand):
    layer = keras_attention.SelfAttention(num_heads=2)
    x = rand(B, T, D)
    flag = layer(x, use_causal_mask=True, return_attention_scores=True)
    explicit = layer(
        x,
        attention_mask=np.tril(np.ones((T, T), bool)),
        return_attention_scores=True,
    )
    for a, b in zip(flag, explicit, strict=True):
        np.testing.assert_allclose(to_np(a), to_np(b), rtol=1e-6, atol=1e-6)


def test_fully_masked_rows_give_zero_weights_and_no_nan(rand):
    layer = keras_attention.SelfAttention(num_heads=2)
    x = rand(B, T, D)
    mask = np.ones((B, T, T), bool)
    mask[1, 2] = False
    out, weights = layer(x, attention_mask=mask, return_attention_scores=True)
    assert np.all(np.isfinite(to_np(out)))
    np.testing.assert_array_equal(to_np(weights)[1, :, 2], 0.0)
    np.testing.assert_allclose(
        to_np(out)[1, 2], to_np(layer.output_dense.bias), atol=1e-6
    )


def test_mixed_float16_with_large_inputs_stays_finite(rand):
    x = rand(B, T, 32, scale=200.0)
    reference = keras_attention.SelfAttention(num_heads=2)
    want = to_np(reference(x))
    keras.config.set_dtype_policy("mixed_float16")
    layer = keras_attention.SelfAttention(num_heads=2)
    layer(x)
    layer.set_weights(reference.get_weights())
    out, weights = layer(x, return_attention_scores=True)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    out = to_np(out).astype("float32")
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(to_np(weights)))
    np.testing.assert_allclose(out, want, atol=0.02 * np.abs(want).max())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_heads": -1}, "num_heads=-1"),
        ({"key_dim": 0}, "key_dim=0"),
        ({"value_dim": "big"}, "value_dim='big'"),
        ({"dropout": -0.1}, "dropout=-0.1"),
        ({"score": "nope"}, "score='nope'"),
    ],
)
def test_invalid_constructor_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_attention.SelfAttention(**kwargs)


def test_num_heads_that_does_not_divide_the_depth_raises(rand):
    layer = keras_attention.SelfAttention(num_heads=3)
    with pytest.raises(
        ValueError, match=r"num_heads=3, input.shape=\(2, 5, 8\)"
    ):
        layer(rand(B, T, D))


def test_input_of_wrong_rank_raises(rand):
    with pytest.raises(ValueError, match=r"input.shape=\(2, 8\)"):
        keras_attention.SelfAttention()(rand(B, D))
