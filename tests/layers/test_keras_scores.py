"""`keras_attention.Attention` and `AdditiveAttention` as drop-ins for
`keras.layers.Attention` / `keras.layers.AdditiveAttention`: same
arguments, list call and masks, copied weights give Keras's numbers."""

import keras
import numpy as np
import pytest

import keras_attention
from tests.layer_basics import check_layer_basics
from tests.layer_basics import to_np

ATTENTION_CASES = [
    {"score_mode": "dot"},
    {"use_scale": True, "score_mode": "dot"},
    {"use_scale": True},
    {"score_mode": "concat"},
    {"use_scale": True, "score_mode": "concat"},
]


def _random_weights(layer, rng):
    layer.set_weights(
        [
            rng.uniform(0.5, 1.5, w.shape).astype("float32")
            for w in layer.weights
        ]
    )


def _assert_like_keras(got, want, query_mask):
    """Keras gives a masked query its softmax weights, we give it zeros;
    its context is zero in both."""
    want_weights = np.where(query_mask[..., None], to_np(want[1]), 0.0)
    np.testing.assert_allclose(
        to_np(got[0]), to_np(want[0]), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        to_np(got[1]), want_weights, rtol=1e-5, atol=1e-6
    )


def _keras_inputs(rand, rng):
    query, value, key = rand(2, 3, 4), rand(2, 5, 6), rand(2, 5, 4)
    # No query whose values are all masked: there Keras and we differ.
    value_mask = np.array([[1, 1, 0, 1, 0], [1, 1, 1, 1, 1]], bool)
    query_mask = np.array([[1, 0, 1], [1, 1, 1]], bool)
    return query, value, key, query_mask, value_mask


@pytest.mark.parametrize("kwargs", ATTENTION_CASES)
@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_keras_with_copied_weights(kwargs, causal, rand, rng):
    query, value, key, query_mask, value_mask = _keras_inputs(rand, rng)
    theirs = keras.layers.Attention(**kwargs)
    ours = keras_attention.Attention(**kwargs)
    call = dict(
        mask=[query_mask, value_mask],
        return_attention_scores=True,
        use_causal_mask=causal,
    )
    theirs([query, value, key], **call)
    ours([query, value, key], **call)
    assert [w.shape for w in ours.weights] == [w.shape for w in theirs.weights]
    _random_weights(theirs, rng)
    ours.set_weights(theirs.get_weights())
    want = theirs([query, value, key], **call)
    got = ours([query, value, key], **call)
    _assert_like_keras(got, want, query_mask)


@pytest.mark.parametrize("use_scale", [True, False])
def test_additive_attention_matches_keras_with_copied_weights(
    use_scale, rand, rng
):
    query, value, key, query_mask, value_mask = _keras_inputs(rand, rng)
    value = rand(2, 5, 4)
    theirs = keras.layers.AdditiveAttention(use_scale=use_scale)
    ours = keras_attention.AdditiveAttention(use_scale=use_scale)
    call = dict(mask=[query_mask, value_mask], return_attention_scores=True)
    want = theirs([query, value, key], **call)
    ours([query, value, key], **call)
    assert len(ours.weights) == len(theirs.weights) == int(use_scale)
    ours.set_weights(theirs.get_weights())
    got = ours([query, value, key], **call)
    _assert_like_keras(got, want, query_mask)


def test_hand_case_of_keras_scores():
    # Keras's own numbers (its attention_test.py): dot and concat logits.
    query = np.array([[[1.0, 0.0], [0.0, 1.0]]], "float32")
    key = np.array([[[0.0, 1.0], [1.0, 0.0]]], "float32")
    value = np.array([[[1.0, 2.0], [3.0, 4.0]]], "float32")
    e = np.exp(1.0)
    for mode, logits in [
        ("dot", [[0.0, 1.0], [1.0, 0.0]]),
        (
            "concat",
            [
                [2 * np.tanh(1.0), np.tanh(2.0)],
                [np.tanh(2.0), 2 * np.tanh(1.0)],
            ],
        ),
    ]:
        _, weights = keras_attention.Attention(score_mode=mode)(
            [query, value, key], return_attention_scores=True
        )
        logits = np.array(logits)
        want = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
        np.testing.assert_allclose(to_np(weights)[0], want, atol=1e-6)
    assert e > 0


def test_fully_masked_query_gets_zero_weights_unlike_keras(rand):
    query, value = rand(1, 2, 4), rand(1, 3, 4)
    mask = [np.array([[True, False]]), np.array([[True, True, False]])]
    _, ours = keras_attention.Attention(score_mode="dot")(
        [query, value], mask=mask, return_attention_scores=True
    )
    _, theirs = keras.layers.Attention()(
        [query, value], mask=mask, return_attention_scores=True
    )
    np.testing.assert_array_equal(to_np(ours)[0, 1], 0.0)
    assert to_np(theirs)[0, 1].sum() == pytest.approx(1.0)
    np.testing.assert_allclose(
        to_np(ours)[0, 0], to_np(theirs)[0, 0], atol=1e-6
    )


def test_list_call_equals_positional_call(rand):
    query, value, key = rand(2, 3, 4), rand(2, 5, 6), rand(2, 5, 4)
    layer = keras_attention.Attention(use_scale=True)
    np.testing.assert_allclose(
        to_np(layer([query, value, key])),
        to_np(layer(query, value, key)),
        atol=1e-6,
    )
    assert layer.compute_output_shape([(2, 3, 4), (2, 5, 6)]) == (2, 3, 6)


def test_list_call_in_a_functional_model_saves_and_loads(rand, tmp_path):
    query, value = rand(2, 3, 4), rand(2, 5, 4)
    q, v = keras.Input((3, 4)), keras.Input((5, 4))
    masked = keras.layers.Masking(0.0)(v)
    out = keras_attention.AdditiveAttention()([q, masked])
    model = keras.Model([q, v], out)
    value[0, 3:] = 0.0
    want = model.predict([query, value], verbose=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(
        loaded.predict([query, value], verbose=0), want, atol=1e-6
    )
    # The Keras mask of `value` reached the layer: no weight on padding.
    reference = keras.Model(
        [q, v],
        keras.layers.AdditiveAttention()([q, masked]),
    )
    reference.set_weights(model.get_weights())
    np.testing.assert_allclose(
        reference.predict([query, value], verbose=0), want, atol=1e-5
    )


@pytest.mark.parametrize(
    "layer_cls, kwargs, n_weights",
    [
        (
            keras_attention.Attention,
            {"use_scale": True, "score_mode": "concat"},
            2,
        ),
        (keras_attention.AdditiveAttention, {"dropout": 0.1, "seed": 1}, 1),
    ],
)
def test_basics(layer_cls, kwargs, n_weights, rand):
    check_layer_basics(
        layer_cls,
        kwargs,
        [rand(2, 3, 4), rand(2, 5, 4)],
        {"return_attention_scores": True},
        expected_output_shape=[(2, 3, 4), (2, 3, 5)],
        expected_num_trainable_weights=n_weights,
    )


def test_keras_configs_keep_keras_keys():
    config = keras_attention.AdditiveAttention(use_scale=False).get_config()
    assert config["use_scale"] is False
    assert "score" not in config and "score_mode" not in config
    config = keras_attention.Attention(score_mode="concat").get_config()
    assert config["score_mode"] == "concat" and config["score"] is None
    layer = keras_attention.Attention.from_config(config)
    assert type(layer.score).__name__ == "KerasConcatScore"
    # Ours stays ours: the default score is the scaled dot product.
    assert type(keras_attention.Attention().score).__name__ == "ScaledDotScore"


def test_bad_keras_arguments_are_named(rand):
    with pytest.raises(ValueError, match="Received: score_mode='cosine'"):
        keras_attention.Attention(score_mode="cosine")
    with pytest.raises(ValueError, match="not both"):
        keras_attention.Attention(score="dot", use_scale=True)
    x = rand(1, 2, 4)
    with pytest.raises(ValueError, match="Received length: 4"):
        keras_attention.Attention()([x, x, x, x])


def _nd_inputs(rand):
    """Rank-4 query, value and key, `(batch, rows, T, dim)`."""
    return rand(2, 3, 4, 4), rand(2, 3, 5, 6), rand(2, 3, 5, 4)


@pytest.mark.parametrize("kwargs", ATTENTION_CASES)
def test_nd_inputs_match_keras_with_copied_weights(kwargs, rand, rng):
    # Keras's layer takes rank-4 inputs but not rank-4 masks (its
    # `where` does not broadcast them); the masks are checked per row
    # below.
    query, value, key = _nd_inputs(rand)
    theirs = keras.layers.Attention(**kwargs)
    ours = keras_attention.Attention(**kwargs)
    call = dict(return_attention_scores=True)
    theirs([query, value, key], **call)
    ours([query, value, key], **call)
    _random_weights(theirs, rng)
    ours.set_weights(theirs.get_weights())
    got = ours([query, value, key], **call)
    assert tuple(got[0].shape) == (2, 3, 4, 6)
    assert tuple(got[1].shape) == (2, 3, 4, 5)
    want = theirs([query, value, key], **call)
    _assert_like_keras(got, want, np.ones((2, 3, 4), bool))


def test_additive_nd_inputs_match_keras(rand):
    query, _, key = _nd_inputs(rand)
    value = rand(2, 3, 5, 4)
    call = dict(return_attention_scores=True)
    theirs = keras.layers.AdditiveAttention()
    ours = keras_attention.AdditiveAttention()
    want = theirs([query, value, key], **call)
    ours([query, value, key], **call)
    ours.set_weights(theirs.get_weights())
    got = ours([query, value, key], **call)
    _assert_like_keras(got, want, np.ones((2, 3, 4), bool))
