"""layers/_rotation.py: the query's and key's heads rotated in one call of
the layer where it rotates every head alike, and the same numbers as one
call each; a call each where it cannot (other lengths, another layer)."""

import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention.layers import _rotation
from tests.layer_basics import to_np


class Counting(keras_attention.RotaryEmbedding):
    """A `RotaryEmbedding` that counts its calls."""

    calls = 0

    def call(self, inputs, **kwargs):
        Counting.calls += 1
        return super().call(inputs, **kwargs)


@pytest.fixture
def counting():
    Counting.calls = 0
    return Counting()


def _apart(rotary, q, k, start):
    return [to_np(_rotation.rotate(rotary, x, start)) for x in (q, k)]


@pytest.mark.parametrize("start", [0, 3, np.array([2, 7], "int32")])
def test_one_call_rotates_both_as_two_calls(rand, counting, start):
    q, k = rand(2, 5, 4, 8), rand(2, 5, 2, 8)
    got = _rotation.rotate_pair(counting, q, k, start)
    assert counting.calls == 1
    want = _apart(keras_attention.RotaryEmbedding(), q, k, start)
    for g, w, x in zip(got, want, (q, k), strict=True):
        assert g.shape == x.shape
        np.testing.assert_allclose(to_np(g), w, atol=1e-6)


def test_other_lengths_take_a_call_each(rand, counting):
    q, k = rand(2, 3, 4, 8), rand(2, 5, 4, 8)
    got = _rotation.rotate_pair(counting, q, k, 2)
    assert counting.calls == 2
    want = _apart(keras_attention.RotaryEmbedding(), q, k, 2)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(to_np(g), w, atol=1e-6)


def test_another_rotary_layer_takes_a_call_each(rand):
    keras_hub = pytest.importorskip("keras_hub")
    rotary = keras_hub.layers.RotaryEmbedding()
    q, k = rand(1, 4, 2, 8), rand(1, 4, 2, 8)
    got = _rotation.rotate_pair(rotary, q, k, 1)
    for g, x in zip(got, (q, k), strict=True):
        np.testing.assert_allclose(
            to_np(g), to_np(rotary(x, start_index=1)), atol=1e-6
        )


def test_a_decoding_step_rotates_once(rand, counting):
    # That the cached steps equal the full pass, rotary or not, is
    # tests/layers/test_cache.py's; here only the calls are counted.
    layer = keras_attention.SelfAttention(
        num_heads=2, key_dim=4, rotary_embedding=counting
    )
    x = rand(1, 1, 8)
    layer(x, use_causal_mask=True)
    Counting.calls = 0
    cache = ops.zeros((1, 2, 6, 2, 4))
    layer(x, use_causal_mask=True, cache=cache, cache_update_index=3)
    assert Counting.calls == 1
    layer(x, use_causal_mask=True, cache=cache)  # read only: the query
    assert Counting.calls == 2
