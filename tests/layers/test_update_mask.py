"""layers/_update_mask.py: `cache_update_mask`, every lane.

A `False` token's keys and values are not written: its slot keeps what
the cache held, on keras-hub's cache tensor and on int8 entries, for the
three multi-head layers; the whole call with it is keras-hub's Gemma 3
attention (`CachedGemma3Attention`) with its weights copied; every
`True` is no mask; the kinds whose slots are not positions refuse it.
"""

import keras
import numpy as np
import pytest

import keras_attention
from tests.layer_basics import randomize_weights
from tests.layer_basics import to_np

HEADS, KV_HEADS, HEAD_DIM, DIM, LENGTH = 4, 2, 4, 8, 6
# Row 0 keeps its first new token's slot, row 1 its second's.
MASK = np.array([[False, True], [True, False]])


def _layer(name):
    if name == "GroupedQueryAttention":
        return keras_attention.GroupedQueryAttention(HEAD_DIM, HEADS, KV_HEADS)
    if name == "MultiHeadAttention":
        return keras_attention.MultiHeadAttention(KV_HEADS, HEAD_DIM)
    return keras_attention.SelfAttention(KV_HEADS, HEAD_DIM)


def _call(layer, x, **kwargs):
    if isinstance(layer, keras_attention.SelfAttention):
        return layer(x, **kwargs)
    return layer(x, x, **kwargs)


def _prefilled(layer, rng, kind):
    """`layer` built, and its cache with 3 positions written."""
    x = rng.normal(size=(2, 3, DIM)).astype("float32")
    _call(layer, x)
    if kind == "int8":
        cache = keras_attention.QuantizedCache.allocate(layer, 2, LENGTH)
    else:
        cache = keras_attention.KeyValueCache.allocate(layer, 2, LENGTH).tensor
    _, cache = _call(layer, x, cache=cache, cache_update_index=0)
    return cache


def _slots(cache):
    """Per row and slot, what the cache holds: `(2, LENGTH, ...)`."""
    if isinstance(cache, keras_attention.QuantizedCache):
        values = to_np(keras.ops.cast(cache.values, "float32"))
        scales = to_np(cache.scales)[..., None]
        return np.moveaxis(values * scales, 1, 2)
    return np.moveaxis(to_np(cache), 1, 2)


@pytest.mark.parametrize(
    "name", ["GroupedQueryAttention", "MultiHeadAttention", "SelfAttention"]
)
@pytest.mark.parametrize("kind", ["tensor", "int8"])
def test_a_masked_token_keeps_the_slot_as_it_was(name, kind, rng):
    layer = _layer(name)
    cache = _prefilled(layer, rng, kind)
    # The new tokens overwrite slots 1 and 2, which hold entries already.
    x = rng.normal(size=(2, 2, DIM)).astype("float32")
    masked = _call(
        layer, x, cache=cache, cache_update_index=1, cache_update_mask=MASK
    )[1]
    written = _call(layer, x, cache=cache, cache_update_index=1)[1]
    before, masked, written = _slots(cache), _slots(masked), _slots(written)
    for row, keep in enumerate(MASK):
        for step, kept in enumerate(keep):
            slot = 1 + step
            want = written if kept else before
            np.testing.assert_array_equal(masked[row, slot], want[row, slot])
        assert not np.allclose(before[row, 1:3], written[row, 1:3])
    np.testing.assert_array_equal(masked[:, 3:], written[:, 3:])
    np.testing.assert_array_equal(masked[:, :1], before[:, :1])


def test_every_token_written_is_no_mask(rng):
    layer = _layer("GroupedQueryAttention")
    cache = _prefilled(layer, rng, "tensor")
    x = rng.normal(size=(2, 2, DIM)).astype("float32")
    full = _call(layer, x, cache=cache, cache_update_index=3)
    masked = _call(
        layer,
        x,
        cache=cache,
        cache_update_index=3,
        cache_update_mask=np.ones((2, 2), bool),
    )
    for got, want in zip(masked, full, strict=True):
        np.testing.assert_array_equal(to_np(got), to_np(want))


def _gemma3(rng):
    from keras_hub.src.models.gemma3 import gemma3_attention

    theirs = gemma3_attention.CachedGemma3Attention(
        head_dim=HEAD_DIM,
        num_query_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        use_query_key_norm=True,
        rope_wavelength=1000.0,
    )
    theirs.build((2, 3, DIM))
    randomize_weights(theirs, rng)
    ours = keras_attention.GroupedQueryAttention(
        HEAD_DIM,
        HEADS,
        KV_HEADS,
        use_bias=False,
        query_key_norm="rms",
        rotary_embedding=keras_attention.RotaryEmbedding(max_wavelength=1000),
    )
    x = np.zeros((2, 1, DIM), "float32")
    ours(x, x)
    named = {"/".join(v.path.split("/")[-2:]): v for v in theirs.weights}
    for name in ("query", "key", "value"):
        kernel = keras.ops.transpose(named[f"{name}/kernel"], (1, 0, 2))
        getattr(ours, f"{name}_dense").kernel.assign(kernel)
    ours.output_dense.kernel.assign(named["attention_output/kernel"])
    ours.query_norm.assign(1.0 + named["query_norm/scale"])
    ours.key_norm.assign(1.0 + named["key_norm/scale"])
    return theirs, ours


def test_equals_keras_hubs_gemma3_attention_with_its_update_mask(rng):
    pytest.importorskip("keras_hub", reason="Gemma 3 is the reference")
    theirs, ours = _gemma3(rng)
    prompt = rng.normal(size=(2, 3, DIM)).astype("float32")
    step = rng.normal(size=(2, 2, DIM)).astype("float32")
    slots = np.arange(LENGTH)
    zeros = np.zeros((2, LENGTH, KV_HEADS, HEAD_DIM), "float32")
    their_cache, our_cache = (zeros, zeros), np.zeros((2, 2, LENGTH) + (2, 4))
    our_cache = our_cache.astype("float32")
    for x, index, mask in ((prompt, 0, None), (step, 2, MASK)):
        positions = index + np.arange(x.shape[1])
        seen = slots[None, None] <= positions[None, :, None]
        seen = np.repeat(seen, 2, 0)
        out, their_cache = theirs(
            x,
            attention_mask=seen.astype("int32"),
            cache=their_cache,
            cache_update_index=index,
            cache_update_mask=mask,
        )
        got, our_cache = ours(
            x,
            x,
            attention_mask=seen,
            cache=our_cache,
            cache_update_index=index,
            cache_update_mask=mask,
        )
        np.testing.assert_allclose(to_np(got), to_np(out), atol=1e-5)
        for i in range(2):
            np.testing.assert_allclose(
                to_np(our_cache)[:, i], to_np(their_cache[i]), atol=1e-5
            )


@pytest.mark.parametrize(
    "kind, kwargs, match",
    [
        ("none", {}, "needs a cache. Received: cache=None"),
        ("tensor", {"index": None}, "Received: cache_update_index=None"),
        ("rolling", {}, "Received: cache=RollingCache"),
        ("paged", {}, "Received: cache=PagedCache"),
        ("tensor", {"mask": np.ones((2, 2), bool)}, r"shape=\(2, 2\)"),
    ],
)
def test_kinds_and_calls_it_does_not_fit_are_refused(kind, kwargs, match):
    layer = keras_attention.GroupedQueryAttention(
        HEAD_DIM, HEADS, KV_HEADS, sliding_window=2
    )
    x = np.ones((1, 1, DIM), "float32")
    layer(x, x)
    caches = {
        "none": None,
        "tensor": keras_attention.KeyValueCache.allocate(layer, 1, 4),
        "rolling": keras_attention.RollingCache.allocate(layer, 1),
        "paged": keras_attention.PagedCache.allocate(layer, 2, 2, 2)
        .join(1)
        .reserve([1]),
    }
    index = kwargs.get("index", np.array([0]) if kind == "paged" else 0)
    with pytest.raises(ValueError, match=match):
        layer(
            x,
            x,
            cache=caches[kind],
            cache_update_index=None if kind == "none" else index,
            cache_update_mask=kwargs.get("mask", np.ones((1, 1), bool)),
        )
