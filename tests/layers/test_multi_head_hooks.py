"""Keras's override points of MultiHeadAttention, and flash attention."""

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention.layers import _chunking
from tests.layer_basics import to_np


class _RecordingAttention(keras_attention.MultiHeadAttention):
    """Counts `_compute_attention` calls and halves its output."""

    calls = 0

    def _compute_attention(self, query, key, value, *args, **kwargs):
        type(self).calls += 1
        context, weights = super()._compute_attention(
            query, key, value, *args, **kwargs
        )
        return context * 0.5, weights


def test_an_overridden_compute_attention_is_called(rand, monkeypatch):
    # Even where the layer would otherwise take the chunked path by itself.
    monkeypatch.setattr(_chunking, "AUTO_CHUNK_MIN_BYTES", 1)
    x = rand(2, 6, 8)
    plain = keras_attention.MultiHeadAttention(2, 4, use_bias=False)
    plain(x, x)
    layer = _RecordingAttention(2, 4, use_bias=False)
    layer(x, x)
    layer.set_weights(plain.get_weights())
    _RecordingAttention.calls = 0
    got = to_np(layer(x, x))
    assert _RecordingAttention.calls == 1
    # Without biases the output projection is linear: half the context,
    # half the output.
    np.testing.assert_allclose(got, 0.5 * to_np(plain(x, x)), atol=1e-5)


def test_compute_attention_takes_keras_masks_and_the_causal_flag(rand):
    layer = keras_attention.MultiHeadAttention(3, 4)
    q, v = rand(2, 5, 8), rand(2, 5, 8)
    padding = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    expected, expected_w = layer(
        q,
        v,
        attention_mask=np.broadcast_to(padding[:, None], (2, 5, 5)),
        use_causal_mask=True,
        return_attention_scores=True,
    )
    query = layer.query_dense(q)
    key = layer.key_dense(v)
    value = layer.value_dense(v)
    # A `(B, Tq, Tk)` mask, as Keras documents for the hook, and the flag.
    context, weights = layer._compute_attention(
        query,
        key,
        value,
        attention_mask=np.broadcast_to(padding[:, None], (2, 5, 5)),
        return_attention_scores=True,
        use_causal_mask=True,
    )
    np.testing.assert_allclose(to_np(weights), to_np(expected_w), atol=1e-6)
    np.testing.assert_allclose(
        to_np(layer.output_dense(context)), to_np(expected), atol=1e-5
    )
    assert np.all(np.triu(to_np(weights)[1, 0], 1) == 0)


def test_sliding_window_is_kept_where_keras_keeps_it():
    layer = keras_attention.MultiHeadAttention(2, 4, sliding_window=3)
    assert layer._sliding_window == 3
    restored = keras_attention.MultiHeadAttention.from_config(
        layer.get_config()
    )
    assert restored._sliding_window == 3


def test_flash_attention_follows_the_argument_and_the_global_switch():
    assert not keras_attention.MultiHeadAttention(2, 4)._flash_attention
    layer = keras_attention.MultiHeadAttention(2, 4, flash_attention=True)
    assert layer._flash_attention is True
    assert layer.get_config()["flash_attention"] is True
    restored = keras_attention.MultiHeadAttention.from_config(
        layer.get_config()
    )
    assert restored._flash_attention is True
    keras.config.disable_flash_attention()
    try:
        layer = keras_attention.MultiHeadAttention(2, 4)
        assert layer._flash_attention is False
    finally:
        keras.config.enable_flash_attention()


def test_flash_attention_returns_no_scores(rand):
    layer = keras_attention.MultiHeadAttention(2, 4, flash_attention=True)
    with pytest.raises(ValueError, match="Returning attention scores is not"):
        layer(rand(1, 3, 8), rand(1, 3, 8), return_attention_scores=True)


@pytest.mark.tensorflow_only
def test_flash_attention_is_never_silently_ignored(rand):
    # TensorFlow has no fused kernel: Keras's own error, not dense math.
    layer = keras_attention.MultiHeadAttention(2, 4, flash_attention=True)
    with pytest.raises(ValueError, match="not supported in tensorflow"):
        layer(rand(1, 3, 8), rand(1, 3, 8))
