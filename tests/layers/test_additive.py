"""`keras_attention.AdditiveAttention`: a hand-written NumPy reference of
`keras.layers.AdditiveAttention` (Bahdanau's `sum(tanh(q + k))`); Keras's
own layer with copied weights is in tests/layers/test_keras_scores.py."""

import keras
import numpy as np
from keras import ops

import keras_attention
from tests.layer_basics import np_softmax


def _numpy_additive(query, value, key, scale):
    logits = np.sum(scale * np.tanh(query[:, :, None] + key[:, None]), -1)
    weights = np_softmax(logits)
    return weights @ value, weights


def test_additive_attention_is_the_sum_of_tanh(rand):
    query, value, key = rand(2, 3, 4), rand(2, 5, 6), rand(2, 5, 4)
    layer = keras_attention.AdditiveAttention()
    got, weights = layer([query, value, key], return_attention_scores=True)
    scale = np.linspace(0.5, 1.5, 4).astype("float32")
    layer.set_weights([scale])
    got, weights = layer([query, value, key], return_attention_scores=True)
    want, want_weights = _numpy_additive(query, value, key, scale)
    np.testing.assert_allclose(ops.convert_to_numpy(got), want, atol=1e-5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(weights), want_weights, atol=1e-6
    )


def test_without_scale_there_is_no_weight(rand):
    query, value = rand(1, 2, 3), rand(1, 4, 3)
    layer = keras_attention.AdditiveAttention(use_scale=False)
    got = layer([query, value])
    assert not layer.weights
    want, _ = _numpy_additive(query, value, value, 1.0)
    np.testing.assert_allclose(ops.convert_to_numpy(got), want, atol=1e-5)
    config = layer.get_config()
    assert config["use_scale"] is False
    again = keras.layers.deserialize(keras.layers.serialize(layer))
    assert isinstance(again, keras_attention.AdditiveAttention)
