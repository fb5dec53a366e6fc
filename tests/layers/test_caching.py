"""The cache half of the engine (`layers/_caching.py`): every cache
checked against its layer, the trial's cases (issue 52) on every
backend, before any backend op."""

import re

import numpy as np
import pytest

import keras_attention
from tests.layers.test_cache import B
from tests.layers.test_cache import D
from tests.layers.test_cache import _call
from tests.layers.test_cache import _gqa
from tests.layers.test_cache import _index
from tests.layers.test_cache import _kv_heads
from tests.layers.test_cache import _mha
from tests.layers.test_cache import _self


@pytest.mark.parametrize(
    "make, shape",
    [
        (_gqa, (2, 2, 6, 4, 4)),  # 4 K/V heads for a layer of 2
        (_gqa, (2, 2, 6, 1, 4)),  # 1
        (_gqa, (2, 2, 6, 2, 3)),  # another head size
        (_gqa, (3, 2, 6, 2, 4)),  # another batch
        (_mha, (2, 2, 6, 4, 4)),  # MHA: 2 heads, not 4
        (_self, (2, 2, 6, 2, 2)),  # SelfAttention: heads of 4
    ],
)
def test_a_cache_for_other_heads_or_batch_is_refused(make, shape, rand):
    layer = make(None)
    x = rand(B, 1, D)
    _call(layer, x)
    expected = re.escape(f"(batch_size, 2, max_length, {_kv_heads(layer)}, 4)")
    received = re.escape(f"Received: cache.shape={shape}")
    with pytest.raises(ValueError, match=f"{expected}.*{received}"):
        _call(layer, x, cache=np.zeros(shape, "float32"), cache_update_index=0)


def test_a_cache_of_integers_or_too_short_is_refused(rand):
    layer = _gqa(None)
    x = rand(B, 5, D)
    with pytest.raises(ValueError, match="Received: cache.dtype=int32"):
        _call(
            layer,
            x[:, :1],
            cache=np.zeros((B, 2, 6, 2, 4), "int32"),
            cache_update_index=0,
        )
    with pytest.raises(
        ValueError, match="Received: max_length=3 for a call of Tq=5 positions"
    ):
        _call(layer, x, cache=np.zeros((B, 2, 3, 2, 4), "float32"))


@pytest.mark.parametrize("index", [6, 10, -1])
@pytest.mark.parametrize("as_tensor", [False, True])
def test_an_index_outside_the_cache_is_refused(index, as_tensor, rand):
    """A Python int or a tensor with a value (eager), on every backend:
    before, TensorFlow wrote slot 5 for 6 and 10 and slot 0 for -1, JAX
    slot 5 for all three, PyTorch nothing."""
    layer = _gqa(None)
    x = rand(B, 1, D)
    cache = np.zeros((B, 2, 6, 2, 4), "float32")
    value = _index(index) if as_tensor else index
    with pytest.raises(
        ValueError,
        match=re.escape("[0, 5]") + rf".*cache_update_index={index}(?!\d)",
    ):
        _call(layer, x, cache=cache, cache_update_index=value)


def test_an_index_that_is_not_one_integer_is_refused(rand):
    layer = _gqa(None)
    x = rand(B, 1, D)
    cache = np.zeros((B, 2, 6, 2, 4), "float32")
    with pytest.raises(TypeError, match="cache_update_index=1.0"):
        _call(layer, x, cache=cache, cache_update_index=1.0)
    with pytest.raises(TypeError, match="cache_update_index.dtype=float32"):
        _call(
            layer,
            x,
            cache=cache,
            cache_update_index=np.float32(1) + np.zeros(()),
        )
    with pytest.raises(ValueError, match=r"cache_update_index.shape=\(2,\)"):
        _call(layer, x, cache=cache, cache_update_index=np.array([0, 1]))


def test_the_spec_is_the_layers_heads_and_window(rand):
    layer = _gqa(None)
    with pytest.raises(ValueError, match="call it"):
        layer.cache_spec()
    x = rand(B, 1, D)
    _call(layer, x)
    spec = layer.cache_spec()
    assert (spec.kv_heads, spec.key_dim, spec.value_dim) == (2, 4, 4)
    assert spec.window is None
    windowed = keras_attention.SelfAttention(2, attention_width=3)
    windowed(x)
    assert windowed.cache_spec().window == 3


def test_slots_that_are_not_positions_take_no_attention_mask(rand):
    layer = keras_attention.GroupedQueryAttention(4, 4, 2, sliding_window=2)
    x = rand(B, 1, D)
    _call(layer, x)
    cache = keras_attention.RollingCache.allocate(layer, B)
    with pytest.raises(ValueError, match="are not positions"):
        _call(
            layer,
            x,
            cache=cache,
            cache_update_index=0,
            attention_mask=np.ones((B, 1, 2), bool),
        )
