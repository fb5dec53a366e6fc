"""keras-self-attention's options: one input, windows, logit activations,
the attention penalty (issue 16).

The reference is a NumPy port of `SeqSelfAttention`, written from its
definition (additive `e_tt' = W_a·tanh(x_t W_t + x_t' W_x + b_h) + b_a`,
multiplicative `e_tt' = x_t W_a x_t'ᵀ + b_a`, then the activation, the
local window, the softmax and `l_t = Σ_t' a_tt' x_t'`).
"""

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention import scores
from tests.layer_basics import check_layer_basics
from tests.layer_basics import to_np

_ACTIVATIONS = {
    None: lambda e: e,
    "sigmoid": lambda e: 1.0 / (1.0 + np.exp(-e)),
    "tanh": np.tanh,
}


def seq_self_attention(x, weights, kind, width=None, history_only=False,
                       activation=None):  # fmt: skip
    """NumPy `SeqSelfAttention`: `(output, a)` for inputs `x (B, T, D)`."""
    if kind == "additive":
        wt, wx, bh, wa, ba = weights
        hidden = np.tanh((x @ wt)[:, :, None, :] + (x @ wx)[:, None, :, :] + bh)
        e = (hidden @ wa)[..., 0] + ba[0]
    else:
        wa, ba = weights
        e = np.einsum("btd,de,bse->bts", x, wa, x) + ba[0]
    e = _ACTIVATIONS[activation](e)
    length = x.shape[1]
    t = np.arange(length)[:, None]
    s = np.arange(length)[None, :]
    keep = np.ones((length, length), bool)
    if width is not None:
        lower = t - (width - 1 if history_only else width // 2)
        keep = (lower <= s) & (s < lower + width)
    e = np.where(keep, e - e.max(-1, keepdims=True), -np.inf)
    a = np.exp(e - e.max(-1, keepdims=True))
    a = a / a.sum(-1, keepdims=True)
    return a @ x, a


def old_penalty(a, factor):
    """The old `attention_regularizer_weight` term."""
    eye = np.eye(a.shape[-2])
    gram = a @ np.swapaxes(a, -1, -2)
    return factor * np.sum(np.square(gram - eye)) / a.shape[0]


def _additive_weights(rng, dim, units):
    shapes = [(dim, units), (dim, units), (units,), (units, 1), (1,)]
    return [rng.normal(scale=0.5, size=s).astype("float32") for s in shapes]


@pytest.mark.parametrize(
    "kind, width, history_only, activation",
    [
        ("additive", None, False, None),
        ("additive", 4, False, "sigmoid"),
        ("additive", 3, True, "tanh"),
        ("multiplicative", 5, False, "sigmoid"),
    ],
)
def test_attention_ports_seq_self_attention(
    kind, width, history_only, activation, rng
):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    if kind == "additive":
        old = _additive_weights(rng, 8, 5)
        score = scores.AdditiveScore(units=5, use_bias=True)
    else:
        old = [rng.normal(scale=0.3, size=s).astype("float32")
               for s in [(8, 8), (1,)]]  # fmt: skip
        score = scores.BilinearScore()
    layer = keras_attention.Attention(
        score=score,
        attention_width=width,
        attention_activation=activation,
        use_attention_bias=True,
        penalty_coefficient=0.3,
    )
    layer(x)
    if kind == "additive":
        wt, wx, bh, wa, ba = old
        layer.set_weights([ba[0], wt, wx, wa[:, 0], bh])
    else:
        wa, ba = old
        layer.set_weights([ba[0], wa])
    output, weights = layer(
        x, use_causal_mask=history_only, return_attention_scores=True
    )
    want, a = seq_self_attention(x, old, kind, width, history_only, activation)
    np.testing.assert_allclose(to_np(weights), a, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(to_np(output), want, rtol=1e-4, atol=1e-5)
    # Keys outside the window get exactly 0, not a small number.
    assert np.all(to_np(weights)[np.broadcast_to(a == 0, a.shape)] == 0)
    np.testing.assert_allclose(
        to_np(layer.losses[-1]), old_penalty(a, 0.3), rtol=1e-4
    )


def test_one_line_seq_self_attention_in_sequential(tmp_path):
    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(30, 8, mask_zero=True),
            # Stands in for the BiLSTM of keras-self-attention's README
            # (a masked sequence in, the mask passed on).
            keras.layers.Dense(8, activation="tanh"),
            keras_attention.Attention(
                score="additive",
                attention_width=3,
                attention_activation="sigmoid",
            ),
            keras.layers.Dense(2),
        ]
    )
    ids = np.array([[3, 4, 5, 0, 0], [1, 2, 3, 4, 5]])
    out = to_np(model(ids))
    assert out.shape == (2, 5, 2)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(to_np(loaded(ids)), out, atol=1e-6)
    # The padded steps get no weight and attend to nothing.
    mask = ids > 0
    attention = model.layers[2]
    hidden = model.layers[1](model.layers[0](ids))
    a = to_np(
        attention(hidden, query_mask=mask, return_attention_scores=True)[1]
    )
    assert np.all(a[0, :, 3:] == 0) and np.all(a[0, 3:] == 0)


def test_single_input_basics(rand):
    check_layer_basics(
        keras_attention.Attention,
        {
            "score": "bilinear",
            "attention_width": 3,
            "attention_activation": "tanh",
            "use_attention_bias": True,
            "penalty_coefficient": 0.1,
        },
        [rand(2, 6, 8)],
        {"return_attention_scores": True},
        expected_output_shape=[(2, 6, 8), (2, 6, 6)],
        expected_num_trainable_weights=2,
    )


def test_hard_attention_single_input_with_window(rand):
    x = rand(2, 6, 8)
    layer = keras_attention.HardAttention(attention_width=2)
    out, weights = layer(x, use_causal_mask=True, return_attention_scores=True)
    weights = to_np(weights)
    # history-only width 2: query t picks t - 1 or t.
    picks = weights.argmax(-1)
    t = np.arange(6)
    assert np.all((picks == t) | (picks == t - 1))
    np.testing.assert_allclose(
        to_np(out), np.einsum("bts,bsd->btd", weights, x)
    )


def test_window_needs_a_query_sequence(rand):
    layer = keras_attention.Attention(attention_width=3)
    with pytest.raises(ValueError, match="needs a query sequence"):
        layer(rand(2, 4), rand(2, 5, 4))


def _heads_numpy(layer, x, width, causal, activation):
    """NumPy multi-head self-attention with the layer's own weights."""
    wq, bq, wk, bk, wv, bv, wo, bo = [to_np(w) for w in layer.weights]
    q = np.einsum("btd,dhk->bhtk", x, wq) + bq[:, None]
    k = np.einsum("btd,dhk->bhtk", x, wk) + bk[:, None]
    v = np.einsum("btd,dhk->bhtk", x, wv) + bv[:, None]
    e = _ACTIVATIONS[activation](
        q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    )
    length = x.shape[1]
    t, s = np.arange(length)[:, None], np.arange(length)[None, :]
    lower = t - (width - 1 if causal else width // 2)
    keep = (lower <= s) & (s < lower + width)
    e = np.where(keep, e, -np.inf)
    a = np.exp(e - e.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    context = a @ v
    return np.einsum("bhtk,hko->bto", context, wo) + bo, a


@pytest.mark.parametrize("width, causal", [(4, False), (3, True)])
def test_self_attention_window_activation_penalty(width, causal, rand):
    x = rand(2, 6, 8)
    layer = keras_attention.SelfAttention(
        num_heads=2,
        attention_width=width,
        attention_activation="sigmoid",
        penalty_coefficient=0.5,
        bias_initializer="random_normal",
    )
    output, weights = layer(
        x, use_causal_mask=causal, return_attention_scores=True
    )
    want, a = _heads_numpy(layer, x, width, causal, "sigmoid")
    np.testing.assert_allclose(to_np(weights), a, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(to_np(output), want, rtol=1e-4, atol=1e-5)
    assert np.all(to_np(weights)[np.broadcast_to(a == 0, a.shape)] == 0)
    per_head = sum(old_penalty(a[:, h], 0.5) for h in range(2))
    np.testing.assert_allclose(to_np(layer.losses[-1]), per_head, rtol=1e-4)
    # Without weights asked for, the output is the same (fused path off).
    np.testing.assert_allclose(
        to_np(layer(x, use_causal_mask=causal)), to_np(output), atol=1e-6
    )


@pytest.mark.parametrize("width, causal", [(5, False), (3, True)])
def test_attention_width_maps_to_sliding_window(width, causal, rand):
    """Odd centred width `w` is `sliding_window=(w + 1) // 2`; causal `w`
    is `sliding_window=w` (docs/migration/keras-self-attention.md)."""
    x = rand(2, 6, 8)
    ours = keras_attention.SelfAttention(num_heads=2, attention_width=width)
    mha = keras_attention.MultiHeadAttention(
        num_heads=2,
        key_dim=4,
        sliding_window=width if causal else (width + 1) // 2,
    )
    ours(x)
    mha(x, x)
    mha.set_weights(ours.get_weights())
    np.testing.assert_allclose(
        to_np(ours(x, use_causal_mask=causal)),
        to_np(mha(x, x, use_causal_mask=causal)),
        atol=1e-6,
    )


def test_multi_head_activation_and_penalty(rand):
    query, value = rand(2, 6, 8), rand(2, 5, 8)
    layer = keras_attention.MultiHeadAttention(
        num_heads=2, key_dim=4, attention_activation="tanh",
        penalty_coefficient=2.0,
    )  # fmt: skip
    plain = keras_attention.MultiHeadAttention(num_heads=2, key_dim=4)
    output, weights = layer(query, value, return_attention_scores=True)
    plain(query, value)
    plain.set_weights(layer.get_weights())
    wq, bq, wk, bk = [to_np(w) for w in layer.weights[:4]]
    q = np.einsum("btd,dhk->bhtk", query, wq) + bq[:, None]
    k = np.einsum("btd,dhk->bhtk", value, wk) + bk[:, None]
    e = np.tanh(q @ np.swapaxes(k, -1, -2) / 2.0)
    a = np.exp(e - e.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    np.testing.assert_allclose(to_np(weights), a, rtol=1e-4, atol=1e-6)
    assert not np.allclose(to_np(plain(query, value)), to_np(output))
    want = sum(old_penalty(a[:, h], 2.0) for h in range(2))
    np.testing.assert_allclose(to_np(layer.losses[-1]), want, rtol=1e-4)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"attention_activation": "sigmoid"},
        {"penalty_coefficient": 1.0},
    ],
)
def test_chunked_path_refuses_then_auto_is_dense(kwargs, rand):
    with pytest.raises(ValueError, match="chunked path does not support"):
        keras_attention.SelfAttention(num_heads=2, chunk_size=2, **kwargs)
    x = rand(2, 6, 8)
    auto = keras_attention.SelfAttention(num_heads=2, **kwargs)
    dense = keras_attention.SelfAttention(num_heads=2, chunk_size=0, **kwargs)
    auto(x)
    dense(x)
    dense.set_weights(auto.get_weights())
    np.testing.assert_allclose(to_np(auto(x)), to_np(dense(x)), atol=1e-6)


def test_self_attention_config_round_trip():
    layer = keras_attention.SelfAttention(
        num_heads=2,
        attention_width=4,
        attention_activation="sigmoid",
        penalty_coefficient=0.25,
    )
    config = layer.get_config()
    assert config["attention_width"] == 4
    assert config["penalty_coefficient"] == 0.25
    clone = keras_attention.SelfAttention.from_config(config)
    assert clone.get_config() == config


def test_activation_alone_takes_the_unfused_path(rand):
    """The fused kernel has no activation: without weights asked for (and
    no penalty), the output still is that of the activated weights."""
    x = rand(2, 6, 8)
    layer = keras_attention.SelfAttention(
        num_heads=2, attention_activation="sigmoid"
    )
    output, _ = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(to_np(layer(x)), to_np(output), atol=1e-6)
