"""`keras_attention.GatedDeltaCache`: allocation, what it keeps through
a call, its dtypes and its checks (the decoding itself is checked in
tests/layers/test_gated_delta_net.py)."""

import keras
import numpy as np
import pytest

import keras_attention


def _layer():
    layer = keras_attention.GatedDeltaNet(2, 4, num_value_heads=4)
    layer.build((None, None, 8))
    return layer


def test_allocate_gives_zeros_of_the_layers_shapes():
    cache = keras_attention.GatedDeltaCache.allocate(_layer(), 3)
    assert [tuple(t.shape) for t in cache.tensors] == [(3, 32, 3), (3, 4, 4, 4)]
    assert cache.max_length is None
    assert isinstance(cache, keras_attention.AttentionCache)
    assert all(
        np.all(keras.ops.convert_to_numpy(t) == 0) for t in cache.tensors
    )


def test_the_recurrent_state_stays_float32_under_bfloat16():
    layer = keras_attention.GatedDeltaNet(
        2, 4, num_value_heads=4, dtype="mixed_bfloat16"
    )
    layer.build((None, None, 8))
    cache = keras_attention.GatedDeltaCache.allocate(layer, 1)
    x = np.random.default_rng(0).normal(size=(1, 3, 8)).astype("float32")
    out, cache = layer(x, cache=cache)
    dtypes = [keras.backend.standardize_dtype(t.dtype) for t in cache.tensors]
    assert dtypes == ["bfloat16", "float32"]
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"


def test_a_fully_padded_call_keeps_the_state():
    layer = _layer()
    x = np.random.default_rng(0).normal(size=(1, 4, 8)).astype("float32")
    _, cache = layer(
        x, cache=keras_attention.GatedDeltaCache.allocate(layer, 1)
    )
    _, after = layer(x[:, :2], mask=np.zeros((1, 2), bool), cache=cache)
    for got, want in zip(after.tensors, cache.tensors, strict=True):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(want)
        )


def test_bad_caches_are_refused():
    layer = _layer()
    with pytest.raises(ValueError, match=r"conv_state.shape=\(1, 32, 2\)"):
        layer(
            np.zeros((1, 2, 8), "float32"),
            cache=keras_attention.GatedDeltaCache(
                np.zeros((1, 32, 2), "float32"),
                np.zeros((1, 4, 4, 4), "float32"),
            ),
        )
    with pytest.raises(ValueError, match="expects `recurrent_state` of rank 4"):
        keras_attention.GatedDeltaCache(
            np.zeros((1, 32, 3)), np.zeros((1, 4, 4))
        )
