"""layers/_keras_hooks.py: Keras's hooks on the call's one record, every
lane.

A subclass that calls `_compute_attention` itself (keras-hub's way) keeps
the layer's score mod, mask mod, window and sinks; one that overrides it
keeps them too, with a cache's positions, in one plan; a hook asking for
weights its call did not ask for is a clear error, never a second plan.
"""

import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention.ops import mods
from tests.layer_basics import to_np


class _KerasHubStyle(keras_attention.MultiHeadAttention):
    """keras-hub's layers subclass Keras's MHA and call its hooks from
    their own `call`."""

    def call(self, query, value, key=None, training=None):
        q = self._query_dense(query)
        k = self._key_dense(value)
        v = self._value_dense(value)
        mask = ops.tril(ops.ones((query.shape[1], value.shape[1]), "bool"))
        context, _ = self._compute_attention(
            q, k, v, attention_mask=mask, training=training
        )
        return self._output_dense(context)


class _Identity(keras_attention.MultiHeadAttention):
    """Overrides the hook and calls the base's: the same attention."""

    def _compute_attention(self, query, key, value, *args, **kwargs):
        return super()._compute_attention(query, key, value, *args, **kwargs)


class _AsksForWeights(keras_attention.MultiHeadAttention):
    def _compute_attention(
        self, query, key, value, mask=None, training=None, scores=False
    ):
        return super()._compute_attention(
            query, key, value, mask, training, True
        )


def _twins(cls, rand, **kwargs):
    """A subclass and a plain layer with the same weights."""
    x = rand(2, 6, 8)
    plain = keras_attention.MultiHeadAttention(2, 4, **kwargs)
    plain(x, x)
    layer = cls(2, 4, **kwargs)
    layer.build(x.shape, x.shape)
    layer.set_weights(plain.get_weights())
    return layer, plain, x


def test_compute_attention_called_by_a_subclass_keeps_the_layers_mods(rand):
    capped, plain, x = _twins(
        _KerasHubStyle,
        rand,
        score_mod=mods.soft_cap(0.5),
        mask_mod=mods.sliding_window(2),
    )
    uncapped = _KerasHubStyle(2, 4)
    uncapped(x, x)
    uncapped.set_weights(plain.get_weights())
    expected = to_np(plain(x, x, use_causal_mask=True))
    np.testing.assert_allclose(to_np(capped(x, x)), expected, atol=1e-5)
    assert np.abs(to_np(uncapped(x, x)) - expected).max() > 1e-3


def test_compute_attention_called_by_a_subclass_keeps_window_and_sinks(rand):
    layer, plain, x = _twins(
        _KerasHubStyle, rand, sliding_window=2, use_sinks=True
    )
    expected = to_np(plain(x, x, use_causal_mask=True))
    np.testing.assert_allclose(to_np(layer(x, x)), expected, atol=1e-5)


def test_an_overridden_hook_keeps_window_sinks_and_cache_positions(rand, plans):
    layer, plain, x = _twins(_Identity, rand, sliding_window=3, use_sinks=True)
    full = to_np(plain(x, x, use_causal_mask=True))
    plans.clear()
    np.testing.assert_allclose(
        to_np(layer(x, x, use_causal_mask=True)), full, atol=1e-5
    )
    assert len(plans) == 1
    cache = np.zeros((2, 2, 6, 2, 4), "float32")
    for i in range(6):
        step = x[:, i : i + 1]
        out, cache = layer(
            step, step, cache=cache, cache_update_index=i, use_causal_mask=True
        )
        np.testing.assert_allclose(to_np(out)[:, 0], full[:, i], atol=1e-5)


def test_a_hooked_call_asking_for_weights_is_planned_once(rand, plans):
    layer, plain, x = _twins(_Identity, rand)
    plans.clear()
    _, weights = layer(x, x, return_attention_scores=True)
    assert len(plans) == 1 and weights is not None
    _, expected = plain(x, x, return_attention_scores=True)
    np.testing.assert_allclose(to_np(weights), to_np(expected), atol=1e-6)


def test_a_hook_asking_for_weights_its_call_did_not_is_refused(rand, plans):
    layer, _, x = _twins(_AsksForWeights, rand)
    plans.clear()
    with pytest.raises(ValueError, match="asked for the attention scores"):
        layer(x, x)
    assert len(plans) == 1
