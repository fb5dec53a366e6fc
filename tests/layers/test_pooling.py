"""AttentionPooling against NumPy ports of the layers it replaces (issue 16):
keras-self-attention's `SeqWeightedAttention`, Yang et al.'s HAN word
attention and the `attention` package's `Attention` (Luong and Bahdanau).
"""

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention import scores
from tests.layer_basics import check_layer_basics
from tests.layer_basics import np_softmax
from tests.layer_basics import quick_collections
from tests.layer_basics import to_np


def _masked_softmax(e, mask):
    e = np.where(mask, e, -np.inf)
    return np_softmax(e)


def test_learned_dot_ports_seq_weighted_attention(rng):
    x = rng.normal(size=(3, 5, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]], bool)
    w = rng.normal(size=(4, 1)).astype("float32")
    b = rng.normal(size=(1,)).astype("float32")
    # SeqWeightedAttention: a = softmax(x W + b) over the unmasked steps.
    a = _masked_softmax((x @ w)[..., 0] + b, mask)
    layer = keras_attention.AttentionPooling()
    layer(x)
    layer.set_weights([w[:, 0]])
    pooled, weights = layer(x, mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(to_np(weights), a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        to_np(pooled), np.einsum("bt,btd->bd", a, x), rtol=1e-5, atol=1e-5
    )
    assert np.all(to_np(weights)[~mask] == 0)


def test_learned_additive_ports_han_word_attention(rng):
    x = rng.normal(size=(2, 6, 4)).astype("float32")
    w = rng.normal(scale=0.5, size=(4, 3)).astype("float32")
    b = rng.normal(size=(3,)).astype("float32")
    u_w = rng.normal(size=(3,)).astype("float32")
    # HAN: u_t = tanh(W h_t + b), a = softmax(u_t · u_w).
    a = np_softmax(np.tanh(x @ w + b) @ u_w)
    layer = keras_attention.AttentionPooling(
        score=scores.AdditiveScore(units=3, use_bias=True)
    )
    layer(x)
    # query, then the score's query_kernel, key_kernel, v, bias: the query
    # term q W_q only shifts the bias, so it is zero here.
    zero = np.zeros((4, 3), "float32")
    layer.set_weights([np.ones(4, "float32"), zero, w, u_w, b])
    pooled, weights = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(to_np(weights), a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        to_np(pooled), np.einsum("bt,btd->bd", a, x), rtol=1e-5, atol=1e-5
    )


def _attention_package(h_s, score, weights):
    """NumPy port of `attention.Attention` (v5): `tanh([c; h_T] W_c)`."""
    h_t = h_s[:, -1]
    if score == "luong":
        luong_w, w_c = weights
        e = np.einsum("bd,btd->bt", h_t, h_s @ luong_w)
    else:
        v, w1, w2, w_c = weights
        hidden = np.tanh((h_t @ w1)[:, None] + h_s @ w2)
        e = (hidden @ v)[..., 0]
    a = np_softmax(e)
    context = np.einsum("bt,btd->bd", a, h_s)
    return np.tanh(np.concatenate([context, h_t], -1) @ w_c), a


@pytest.mark.parametrize("score", ["luong", "bahdanau"])
def test_last_ports_the_attention_package(score, rng):
    h_s = rng.normal(size=(3, 6, 4)).astype("float32")
    if score == "luong":
        shapes = [(4, 4), (8, 5)]
        layer = keras_attention.AttentionPooling(
            query="last", score="bilinear", units=5
        )
    else:
        shapes = [(4, 1), (4, 4), (4, 4), (8, 5)]
        layer = keras_attention.AttentionPooling(
            query="last", score="additive", units=5
        )
    old = [rng.normal(scale=0.5, size=s).astype("float32") for s in shapes]
    layer(h_s)
    if score == "luong":
        layer.set_weights([old[0].T, old[1]])
    else:
        v, w1, w2, w_c = old
        layer.set_weights([w1, w2, v[:, 0], w_c])
    output, weights = layer(h_s, return_attention_scores=True)
    want, a = _attention_package(h_s, score, old)
    np.testing.assert_allclose(to_np(weights), a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(to_np(output), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("query", ["learned", "last"])
def test_right_and_left_padding_match_the_unpadded_sequence(query, rng):
    x = rng.normal(size=(1, 3, 4)).astype("float32")
    noise = rng.normal(size=(1, 2, 4)).astype("float32") * 50
    layer = keras_attention.AttentionPooling(query=query, score="bilinear")
    want = to_np(layer(x))
    for padded, mask in [
        (np.concatenate([x, noise], 1), [[1, 1, 1, 0, 0]]),
        (np.concatenate([noise, x], 1), [[0, 0, 1, 1, 1]]),
    ]:
        got = layer(padded, mask=np.array(mask, bool))
        np.testing.assert_allclose(to_np(got), want, rtol=1e-5, atol=1e-5)


def test_all_padded_sequence_gives_zeros(rng):
    x = rng.normal(size=(2, 4, 3)).astype("float32")
    mask = np.array([[0, 0, 0, 0], [1, 1, 0, 0]], bool)
    layer = keras_attention.AttentionPooling(query="last", score="dot")
    pooled, weights = layer(x, mask=mask, return_attention_scores=True)
    assert np.all(to_np(pooled)[0] == 0) and np.all(to_np(weights)[0] == 0)


@pytest.mark.parametrize(
    "kwargs, shapes, n_weights, train",
    [
        ({"score": "additive"}, [(2, 4), (2, 5)], 4, False),
        (
            {"query": "last", "units": 3, "dropout": 0.2},
            [(2, 3), (2, 5)],
            1,
            True,
        ),
    ],
)
def test_basics(kwargs, shapes, n_weights, train, rand):
    check_layer_basics(
        keras_attention.AttentionPooling,
        kwargs,
        [rand(2, 5, 4)],
        {"return_attention_scores": True},
        expected_output_shape=shapes,
        expected_num_trainable_weights=n_weights,
        run_training=train,
        run_mixed_precision=train,
    )


def test_keras_mask_is_used_and_not_propagated():
    tokens = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(20, 4, mask_zero=True)(tokens)
    pooled, weights = keras_attention.AttentionPooling(query="last")(
        x, return_attention_scores=True
    )
    model = keras.Model(tokens, [pooled, weights])
    _, a = model(np.array([[3, 4, 0, 0], [0, 5, 6, 7]]))
    a = to_np(a)
    assert np.all(a[0, 2:] == 0) and a[1, 0] == 0
    assert keras_attention.AttentionPooling().compute_mask(x, None) is None


def test_units_need_the_last_step_query():
    with pytest.raises(ValueError, match="needs query='last'"):
        keras_attention.AttentionPooling(units=4)


@pytest.mark.filterwarnings("ignore:Layer .* does not have a `quantize`")
def test_quantized_projection_saves_and_loads(tmp_path, rand):
    inputs = keras.Input((5, 4))
    pooling = keras_attention.AttentionPooling(query="last", units=3)
    model = keras.Model(inputs, pooling(inputs))
    with quick_collections():
        model.quantize("int8")
    x = rand(2, 5, 4)
    path = str(tmp_path / "q.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(to_np(loaded(x)), to_np(model(x)), atol=1e-6)
