"""The rolling cache: decoding 4x the window equals the full causal pass
with the window (and with StreamingLLM's sink tokens, the full pass with
their mask), its memory stays the window's, and it runs compiled."""

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention.ops import mods
from tests.layer_basics import to_np

B, D, W = 2, 8, 3


def _pair(rand, window=W, **kwargs):
    """A windowed GQA with rotary positions and its full causal pass over
    4x the window."""
    layer = keras_attention.GroupedQueryAttention(
        4,
        4,
        2,
        sliding_window=window,
        rotary_embedding=keras_attention.RotaryEmbedding(),
        **kwargs,
    )
    x = rand(B, 4 * W, D)
    return layer, x, to_np(layer(x, x, use_causal_mask=True))


def _decode(layer, x, cache, spans):
    """`layer` over `x` in calls of the `spans`, through `cache`."""
    outputs = []
    for lo, hi in spans:
        step = x[:, lo:hi]
        out, cache = layer(
            step, step, cache=cache, cache_update_index=lo, use_causal_mask=True
        )
        outputs.append(to_np(out))
    return np.concatenate(outputs, axis=1), cache


@pytest.mark.parametrize(
    "spans",
    [
        [(i, i + 1) for i in range(4 * W)],  # token by token
        [(0, 5), (5, 6), (6, 10), (10, 11), (11, 12)],  # prompts and tokens
    ],
    ids=["tokens", "chunks"],
)
def test_decoding_4x_the_window_equals_the_full_windowed_pass(spans, rand):
    layer, x, full = _pair(rand)
    cache = keras_attention.RollingCache.allocate(layer, B)
    out, cache = _decode(layer, x, cache, spans)
    np.testing.assert_allclose(out, full, rtol=1e-5, atol=1e-5)
    # The memory is the window's, not the 12 positions decoded.
    assert tuple(cache.window.shape) == (B, 2, W, 2, 4)
    assert cache.num_sink_tokens == 0


def test_the_slots_hold_the_last_window_written_modulo_it(rand):
    """A hand case: after positions 0..6 in a window of 3 with 1 sink
    token, slot `1 + (p - 1) % 3` holds position `p` (4, 5, 6) and slot 0
    the sink; the keys stored are those the layer projected."""
    layer = keras_attention.GroupedQueryAttention(4, 4, 2)
    x = rand(1, 7, D)
    layer(x, x)
    cache = keras_attention.RollingCache.allocate(
        layer, 1, window=3, num_sink_tokens=1
    )
    positions = to_np(cache.slot_positions(6)).tolist()
    assert positions == [0, 4, 5, 6]
    assert to_np(cache.slot_positions(1)).tolist() == [0, 1, -1, -1]
    _, cache = _decode(layer, x, cache, [(0, 7)])
    keys = to_np(layer.key_dense(x))[0]  # (7, heads, head_dim)
    np.testing.assert_allclose(to_np(cache.sinks)[0, 0, 0], keys[0])
    # Slots 0, 1, 2 of the window hold positions 4, 5, 6.
    np.testing.assert_allclose(to_np(cache.window)[0, 0], keys[4:7], atol=0)


def test_sink_tokens_equal_the_full_pass_with_streamings_mask(rand):
    """StreamingLLM: a layer without a window, a cache of 2 sink tokens
    and a window of 3, equals the full pass with `mods.streaming(3, 2)`
    (and differs from the plain causal pass)."""
    plain = keras_attention.GroupedQueryAttention(
        4, 4, 2, rotary_embedding=keras_attention.RotaryEmbedding()
    )
    masked = keras_attention.GroupedQueryAttention(
        4,
        4,
        2,
        rotary_embedding=keras_attention.RotaryEmbedding(),
        mask_mod=mods.streaming(W, 2),
    )
    x = rand(B, 4 * W, D)
    plain(x, x)
    masked(x, x)
    masked.set_weights(plain.get_weights())
    full = to_np(masked(x, x, use_causal_mask=True))
    cache = keras_attention.RollingCache.allocate(
        plain, B, window=W, num_sink_tokens=2
    )
    spans = [(0, 1), (1, 5), (5, 6), (6, 11), (11, 12)]
    out, cache = _decode(plain, x, cache, spans)
    np.testing.assert_allclose(out, full, rtol=1e-5, atol=1e-5)
    causal = to_np(plain(x, x, use_causal_mask=True))
    assert not np.allclose(out[:, -1], causal[:, -1], atol=1e-3)
    assert cache.nbytes == B * 2 * (2 + W) * 2 * 4 * 4


def test_self_attention_and_mha_take_it_too(rand):
    """SelfAttention's `attention_width` (causal: the history) and MHA's
    `sliding_window` are windows too."""
    x = rand(B, 4 * W, D)
    for layer in (
        keras_attention.SelfAttention(2, attention_width=W),
        keras_attention.MultiHeadAttention(2, 4, sliding_window=W),
    ):
        args = (
            (x,) if isinstance(layer, keras_attention.SelfAttention) else (x, x)
        )
        full = to_np(layer(*args, use_causal_mask=True))
        cache = keras_attention.RollingCache.allocate(layer, B)
        outputs = []
        for i in range(4 * W):
            step = (x[:, i : i + 1],) * len(args)
            out, cache = layer(
                *step, cache=cache, cache_update_index=i, use_causal_mask=True
            )
            outputs.append(to_np(out)[:, 0])
        np.testing.assert_allclose(
            np.stack(outputs, 1), full, rtol=1e-5, atol=1e-5
        )


class RollingStep(keras.Model):
    def __init__(self, attention):
        super().__init__()
        self.attention = attention

    def call(self, inputs):
        x, sinks, window, index = inputs
        cache = keras_attention.RollingCache(sinks, window)
        out, cache = self.attention(
            x, x, cache=cache, cache_update_index=index[0], use_causal_mask=True
        )
        return out, cache.sinks, cache.window


@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="jit_compile=True is Dynamo on PyTorch, not XLA; the eager "
    "steps run in the tests above",
)
def test_decoding_runs_compiled_with_a_traced_index(rand):
    """`jit_compile=True` (XLA, `jax.jit`): the slots and positions come
    from a traced index."""
    layer, x, full = _pair(rand)
    model = RollingStep(layer)
    model.compile(jit_compile=True)
    cache = keras_attention.RollingCache.allocate(layer, B)
    sinks, window = to_np(cache.sinks), to_np(cache.window)
    for i in range(4 * W):
        index = np.full((B,), i, "int32")
        out, sinks, window = model.predict_on_batch(
            [x[:, i : i + 1], sinks, window, index]
        )
        np.testing.assert_allclose(out[:, 0], full[:, i], atol=1e-5)


def test_the_blocks_read_the_slots_at_their_positions(rand):
    """`chunk_size=2`: the block kernel reads the band and the streaming
    mask at the slots' positions, as the dense path."""
    dense, x, full = _pair(rand)
    chunked = keras_attention.GroupedQueryAttention(
        4,
        4,
        2,
        sliding_window=W,
        rotary_embedding=keras_attention.RotaryEmbedding(),
        chunk_size=2,
    )
    chunked(x, x)
    chunked.set_weights(dense.get_weights())
    cache = keras_attention.RollingCache.allocate(chunked, B)
    out, _ = _decode(chunked, x, cache, [(0, 5), (5, 6), (6, 12)])
    np.testing.assert_allclose(out, full, rtol=1e-5, atol=1e-5)


def test_a_window_shorter_than_the_layers_is_refused_at_allocate(rand):
    layer, _, _ = _pair(rand)
    with pytest.raises(ValueError, match=rf"at least {W}\. .*window=2"):
        keras_attention.RollingCache.allocate(layer, B, window=W - 1)
    cache = keras_attention.RollingCache.allocate(layer, B, window=W + 1)
    assert cache.window_size == W + 1
