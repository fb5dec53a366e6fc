import keras
import numpy as np
import pytest

import keras_attention
from keras_attention import StructuredSelfAttention
from tests.layer_basics import check_layer_basics
from tests.layer_basics import to_np


def _reference(hidden, ws1, ws2, mask=None):
    """NumPy `A = softmax_T((tanh(H W_s1) W_s2)ᵀ)`, `M = A H` and `P`."""
    logits = np.swapaxes(np.tanh(hidden @ ws1) @ ws2, -1, -2)
    logits = logits.astype("float64")
    if mask is None:
        mask = np.ones(hidden.shape[:2], bool)
    keep = mask[:, None, :]
    e = np.where(keep, np.exp(logits - logits.max(-1, keepdims=True)), 0.0)
    total = e.sum(-1, keepdims=True)
    a = np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
    m = a @ hidden
    gram = a @ np.swapaxes(a, -1, -2)
    eye = np.eye(a.shape[1])
    penalty = np.mean(np.sum((gram - eye) ** 2, axis=(-2, -1)))
    return a, m, penalty


def _hidden(batch=3, time=6, features=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(batch, time, features)).astype("float32")


@pytest.mark.parametrize(
    "init_kwargs, call_kwargs, shapes",
    [
        (
            dict(units=5, num_hops=2, penalty_coefficient=1.0),
            dict(return_attention_scores=True),
            [(3, 8), (3, 2, 6)],
        ),
        (
            dict(units=5, num_hops=3, penalty_coefficient=0.0, flatten=False),
            {},
            [(3, 3, 4)],
        ),
    ],
)
def test_layer_basics(init_kwargs, call_kwargs, shapes):
    check_layer_basics(
        StructuredSelfAttention,
        init_kwargs,
        _hidden(),
        call_kwargs=call_kwargs,
        expected_output_shape=shapes,
        expected_num_trainable_weights=2,
    )


def test_weight_names_and_shapes():
    layer = StructuredSelfAttention(units=7, num_hops=3, penalty_coefficient=1)
    layer.build((None, 5, 4))
    assert [(w.name, tuple(w.shape)) for w in layer.weights] == [
        ("ws1", (4, 7)),
        ("ws2", (7, 3)),
    ]


def test_tiny_hand_computed_case():
    # With W_s1 = I and W_s2 = [[1], [0]] the logits are tanh(h_t0); for
    # h_t0 in {0, atanh(log 2)} that is {0, log 2}: weights 1/3 and 2/3.
    layer = StructuredSelfAttention(units=2, num_hops=1, penalty_coefficient=0)
    layer.build((1, 2, 2))
    layer.set_weights([np.eye(2), np.array([[1.0], [0.0]])])
    x = np.arctanh(np.log(2.0))
    hidden = np.array([[[0.0, 3.0], [x, 6.0]]], "float32")
    embedding, weights = layer(hidden, return_attention_scores=True)
    embedding, weights = to_np(embedding), to_np(weights)
    np.testing.assert_allclose(weights, [[[1 / 3, 2 / 3]]], rtol=1e-6)
    np.testing.assert_allclose(embedding, [[2 / 3 * x, 5.0]], rtol=1e-6)


@pytest.mark.parametrize("flatten", [True, False])
def test_matches_numpy_reference(flatten):
    hidden = _hidden(batch=4, time=7, features=5, seed=1)
    layer = StructuredSelfAttention(
        units=6, num_hops=3, penalty_coefficient=0.5, flatten=flatten
    )
    embedding, weights = layer(hidden, return_attention_scores=True)
    embedding, weights = to_np(embedding), to_np(weights)
    ws1, ws2 = layer.get_weights()
    a, m, penalty = _reference(hidden, ws1, ws2)
    np.testing.assert_allclose(weights, a, rtol=1e-5, atol=1e-6)
    if flatten:
        m = m.reshape(4, 3 * 5)
    np.testing.assert_allclose(embedding, m, rtol=1e-5, atol=1e-5)
    (loss,) = layer.losses
    np.testing.assert_allclose(to_np(loss), 0.5 * penalty, rtol=1e-5)


def test_masked_positions_get_zero_weight_and_match_reference():
    hidden = _hidden(batch=3, time=6, seed=2)
    mask = np.array(
        [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]], bool
    )
    layer = StructuredSelfAttention(units=4, num_hops=2, penalty_coefficient=1)
    embedding, weights = layer(hidden, mask=mask, return_attention_scores=True)
    embedding, weights = to_np(embedding), to_np(weights)
    weights = keras.ops.convert_to_numpy(weights)
    assert np.all(weights[:, :, ~mask[0]][0] == 0)
    np.testing.assert_allclose(weights[:2].sum(-1), 1.0, rtol=1e-6)
    ws1, ws2 = layer.get_weights()
    a, m, penalty = _reference(hidden, ws1, ws2, mask)
    np.testing.assert_allclose(weights, a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(embedding, m.reshape(3, -1), atol=1e-5)
    np.testing.assert_allclose(to_np(layer.losses[0]), penalty, rtol=1e-5)


def test_fully_masked_sentence_gives_zero_weights_not_nan():
    hidden = _hidden(batch=2, time=4)
    mask = np.array([[0, 0, 0, 0], [1, 1, 0, 0]], bool)
    layer = StructuredSelfAttention(units=4, num_hops=2, penalty_coefficient=1)
    embedding, weights = layer(hidden, mask=mask, return_attention_scores=True)
    embedding, weights = to_np(embedding), to_np(weights)
    np.testing.assert_array_equal(weights[0], 0.0)
    np.testing.assert_array_equal(embedding[0], 0.0)
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(layer.losses[0])))


def test_padding_values_do_not_change_outputs():
    hidden = _hidden(batch=2, time=5)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], bool)
    noisy = hidden.copy()
    noisy[~mask] = 1e3
    layer = StructuredSelfAttention(units=4, num_hops=3, penalty_coefficient=1)
    clean_out = layer(hidden, mask=mask, return_attention_scores=True)
    noisy_out = layer(noisy, mask=mask, return_attention_scores=True)
    for clean, noise in zip(clean_out, noisy_out, strict=True):
        np.testing.assert_allclose(
            to_np(clean), to_np(noise), rtol=1e-6, atol=1e-6
        )


def _masked_functional_model(penalty=1.0):
    tokens = keras.Input(shape=(None,), dtype="int32")
    embedded = keras.layers.Embedding(20, 6, mask_zero=True)(tokens)
    hidden = keras.layers.Bidirectional(
        keras.layers.LSTM(4, return_sequences=True)
    )(embedded)
    embedding, weights = StructuredSelfAttention(
        units=5, num_hops=2, penalty_coefficient=penalty
    )(hidden, return_attention_scores=True)
    return keras.Model(tokens, [embedding, weights])


def test_keras_mask_through_bilstm_is_used():
    model = _masked_functional_model()
    ids = np.array([[3, 4, 5, 0, 0], [7, 0, 0, 0, 0]], "int32")
    embedding, weights = model(ids)
    embedding, weights = to_np(embedding), to_np(weights)
    assert tuple(embedding.shape) == (2, 16)
    weights = keras.ops.convert_to_numpy(weights)
    np.testing.assert_array_equal(weights[0, :, 3:], 0.0)
    np.testing.assert_array_equal(weights[1, :, 1:], 0.0)
    np.testing.assert_allclose(weights[1, :, 0], 1.0, rtol=1e-6)
    # Trailing padding must not change the sentence's outputs.
    shorter = [to_np(x) for x in model(ids[:, :3])]
    np.testing.assert_allclose(shorter[0], embedding, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(shorter[1], weights[:, :, :3], atol=1e-6)


def test_output_carries_no_mask():
    tokens = keras.Input(shape=(None,), dtype="int32")
    embedded = keras.layers.Embedding(20, 6, mask_zero=True)(tokens)
    outputs = StructuredSelfAttention(4, 2, 1.0)(
        embedded, return_attention_scores=True
    )
    for out in outputs:
        assert getattr(out, "_keras_mask", None) is None


@pytest.mark.heavy
def test_sequential_model_has_one_output_and_trains():
    model = keras.Sequential(
        [
            keras.Input(shape=(None,), dtype="int32"),
            keras.layers.Embedding(20, 6, mask_zero=True),
            keras.layers.Bidirectional(
                keras.layers.LSTM(4, return_sequences=True)
            ),
            StructuredSelfAttention(units=5, num_hops=2, penalty_coefficient=1),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    ids = np.array([[3, 4, 5, 0], [7, 8, 0, 0], [0, 0, 0, 0]], "int32")
    assert tuple(model.predict(ids, verbose=0).shape) == (3, 2)
    model.compile("adam", "sparse_categorical_crossentropy")
    history = model.fit(ids, np.array([0, 1, 0]), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


def test_functional_model_returns_embedding_and_weights():
    model = _masked_functional_model()
    assert [tuple(o.shape) for o in model.outputs] == [
        (None, 16),
        (None, 2, None),
    ]
    ids = np.array([[3, 4, 5, 0, 0]], "int32")
    embedding, weights = model.predict(ids, verbose=0)
    assert embedding.shape == (1, 16) and weights.shape == (1, 2, 5)


@pytest.mark.parametrize("penalty, num_losses", [(1.0, 1), (0.0, 0)])
def test_penalty_in_model_losses_only_when_positive(penalty, num_losses):
    model = _masked_functional_model(penalty)
    model(np.array([[3, 4, 5, 0]], "int32"))
    assert len(model.losses) == num_losses


def test_penalty_enters_training_loss():
    hidden = _hidden(batch=4, time=5)
    inputs = keras.Input(shape=(5, 4))
    outputs = StructuredSelfAttention(4, 3, penalty_coefficient=10.0)(inputs)
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "mse")
    zeros = np.zeros((4, 12), "float32")
    with_penalty = model.evaluate(hidden, zeros, verbose=0)
    data_loss = np.mean(np.square(model.predict(hidden, verbose=0)))
    assert with_penalty > data_loss + 1.0


def test_mixed_precision_weights_normalised_in_float16():
    keras.config.set_dtype_policy("mixed_float16")
    layer = StructuredSelfAttention(units=4, num_hops=2, penalty_coefficient=1)
    hidden = 100.0 * _hidden(batch=2, time=5)
    mask = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], bool)
    embedding, weights = layer(hidden, mask=mask, return_attention_scores=True)
    embedding, weights = to_np(embedding), to_np(weights)
    assert keras.backend.standardize_dtype(weights.dtype) == "float16"
    assert keras.backend.standardize_dtype(embedding.dtype) == "float16"
    weights = keras.ops.convert_to_numpy(weights).astype("float32")
    np.testing.assert_allclose(weights[0].sum(-1), 1.0, atol=1e-3)
    np.testing.assert_array_equal(weights[1], 0.0)


def test_compute_output_shape():
    layer = StructuredSelfAttention(units=4, num_hops=3, penalty_coefficient=0)
    assert layer.compute_output_shape((None, 7, 5)) == (None, 15)
    layer = StructuredSelfAttention(4, 3, 0, flatten=False)
    assert layer.compute_output_shape((2, None, 5)) == (2, 3, 5)


def test_exported_from_package():
    assert keras_attention.StructuredSelfAttention is StructuredSelfAttention


@pytest.mark.parametrize("value", [0, -2, 1.5, "3", True, None])
def test_invalid_units_raises(value):
    with pytest.raises(ValueError, match=r"`units`.*Received: units="):
        StructuredSelfAttention(units=value, num_hops=2, penalty_coefficient=1)


@pytest.mark.parametrize("value", [0, -1, 2.0, False])
def test_invalid_num_hops_raises(value):
    with pytest.raises(ValueError, match=r"`num_hops`.*Received: num_hops="):
        StructuredSelfAttention(units=4, num_hops=value, penalty_coefficient=1)


@pytest.mark.parametrize(
    "value", [-0.1, float("nan"), float("inf"), "1", None, True]
)
def test_invalid_penalty_coefficient_raises(value):
    with pytest.raises(
        ValueError,
        match=r"`penalty_coefficient`.*Received: penalty_coefficient=",
    ):
        StructuredSelfAttention(units=4, num_hops=2, penalty_coefficient=value)


@pytest.mark.parametrize("shape", [(2, 4), (2, 3, 4, 5)])
def test_input_rank_not_three_raises_naming_shape(shape):
    layer = StructuredSelfAttention(units=4, num_hops=2, penalty_coefficient=1)
    with pytest.raises(
        ValueError,
        match=r"\(batch_size, time, features\).*inputs.shape="
        + repr(shape).replace("(", r"\(").replace(")", r"\)"),
    ):
        layer(np.zeros(shape, "float32"))
