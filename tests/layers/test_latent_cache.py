"""MLA's latent cache: checked against the layer (batch, width, dtype,
index) as every cache, allocated for it."""

import numpy as np
import pytest

import keras_attention
from keras_attention.layers._latent_cache import LatentCache
from tests.layer_basics import to_np

B = 2


def _mla():
    return keras_attention.MultiHeadLatentAttention(
        num_heads=2,
        kv_lora_rank=4,
        qk_nope_head_dim=2,
        qk_rope_head_dim=2,
        v_head_dim=2,
    )


def test_the_latent_cache_is_checked_as_well(rand):
    mla = _mla()
    x = rand(B, 1, 4)
    mla(x)
    good = np.zeros((B, 3, 6), "float32")
    with pytest.raises(ValueError, match=r"Received: cache.shape=\(3, 3, 6\)"):
        mla(x, cache=np.zeros((3, 3, 6), "float32"), cache_update_index=0)
    with pytest.raises(ValueError, match="Received: cache.dtype=int32"):
        mla(x, cache=good.astype("int32"), cache_update_index=0)
    with pytest.raises(ValueError, match=r"cache_update_index=3(?!\d)"):
        mla(x, cache=good, cache_update_index=3)
    with pytest.raises(TypeError, match="takes a cache tensor or one of"):
        mla(x, cache=keras_attention.KeyValueCache(np.zeros((B, 2, 3, 2, 4))))


def test_allocate_makes_the_zeros_of_its_layer(rand):
    """The allocated cache decodes as the zeros tensor keras-hub's callers
    make, and the layer returns the kind it was given."""
    mla = _mla()
    x = rand(B, 3, 4)
    full = to_np(mla(x, use_causal_mask=True))
    cache = LatentCache.allocate(mla, B, 3)
    tensor = np.zeros((B, 3, 6), "float32")
    for i in range(3):
        step = dict(cache_update_index=i, use_causal_mask=True)
        out, tensor = mla(x[:, i : i + 1], cache=tensor, **step)
        again, cache = mla(x[:, i : i + 1], cache=cache, **step)
        np.testing.assert_allclose(to_np(out)[:, 0], full[:, i], atol=1e-5)
        np.testing.assert_array_equal(to_np(again), to_np(out))
    assert isinstance(cache, LatentCache)
    np.testing.assert_array_equal(to_np(cache.tensor), to_np(tensor))
