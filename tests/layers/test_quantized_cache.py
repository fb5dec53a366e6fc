"""The quantized cache: int8 (and float8) keys and values with one scale
per position and head, quantized on write, dequantized in the kernel's
blocks; close to the float cache, the blocks equal to the dense path."""

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention.layers import _quantized_cache
from tests.layer_basics import to_np

B, T, D = 2, 6, 8


def test_quantize_is_absmax_per_row_by_hand():
    x = np.array([[1.0, -2.0, 0.5, 4.0], [0.0, 0.0, 0.0, 0.0]], "float32")
    q, scale = _quantized_cache.quantize(x, "int8")
    assert to_np(q).tolist() == [[32, -64, 16, 127], [0, 0, 0, 0]]
    np.testing.assert_allclose(to_np(scale), [4 / 127, 0.0], rtol=1e-6)
    back = to_np(_quantized_cache.dequantize(q, scale, "float32"))
    np.testing.assert_allclose(back, x, atol=(4 / 127) / 2 + 1e-7)


def _layer(chunk_size=None, **kwargs):
    return keras_attention.GroupedQueryAttention(
        4,
        4,
        2,
        rotary_embedding=keras_attention.RotaryEmbedding(),
        chunk_size=chunk_size,
        **kwargs,
    )


def _decode(layer, x, cache, **kwargs):
    outputs = []
    for i in range(x.shape[1]):
        step = x[:, i : i + 1]
        out, *rest = layer(
            step,
            step,
            cache=cache,
            cache_update_index=i,
            use_causal_mask=True,
            **kwargs,
        )
        cache = rest[-1]
        outputs.append(to_np(out)[:, 0])
    return np.stack(outputs, 1), cache


@pytest.mark.parametrize(
    "dtype, tolerance", [("int8", 0.02), ("float8_e4m3fn", 0.1)]
)
def test_decoding_is_close_to_the_float_cache(dtype, tolerance, rand):
    layer = _layer()
    x = rand(B, T, D)
    full = to_np(layer(x, x, use_causal_mask=True))
    cache = keras_attention.QuantizedCache.allocate(layer, B, T, dtype=dtype)
    out, cache = _decode(layer, x, cache)
    error = np.abs(out - full).max()
    assert 0 < error < tolerance
    assert cache.dtype == dtype
    # One byte an entry, four a scale.
    assert cache.nbytes == B * 2 * T * 2 * 4 + B * 2 * T * 2 * 4


def test_the_blocks_dequantize_as_the_dense_path(rand):
    """`chunk_size=2` (the block kernel, the key and value blocks
    dequantized one at a time) against `chunk_size=0` on the same int8
    cache: the same numbers; the weights come back on the dense path."""
    dense, blocks = _layer(0), _layer(2)
    x = rand(B, T, D)
    dense(x, x)
    blocks(x, x)
    blocks.set_weights(dense.get_weights())
    cache = keras_attention.QuantizedCache.allocate(dense, B, T)
    want, cache_a = _decode(dense, x, cache, return_attention_scores=True)
    got, cache_b = _decode(blocks, x, cache)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(cache_a.tensors, cache_b.tensors, strict=True):
        np.testing.assert_array_equal(to_np(a), to_np(b))


def test_an_explicit_mask_sees_the_slots_as_positions(rand):
    """The slots are positions, as keras-hub's: prefill 3 then a token,
    with the causal mask given as a tensor."""
    layer = _layer()
    x = rand(B, 4, D)
    full = to_np(layer(x, x, use_causal_mask=True))
    causal = np.tril(np.ones((4, 4), bool))[None].repeat(B, 0)
    cache = keras_attention.QuantizedCache.allocate(layer, B, 4)
    out, cache = layer(
        x[:, :3],
        x[:, :3],
        cache=cache,
        cache_update_index=0,
        attention_mask=causal[:, :3],
    )
    np.testing.assert_allclose(to_np(out), full[:, :3], atol=0.02)
    out, _ = layer(
        x[:, 3:],
        x[:, 3:],
        cache=cache,
        cache_update_index=3,
        attention_mask=causal[:, 3:],
    )
    np.testing.assert_allclose(to_np(out), full[:, 3:], atol=0.02)


@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="jit_compile=True is Dynamo on PyTorch, not XLA",
)
def test_decoding_runs_compiled(rand):
    layer = _layer()
    x = rand(B, T, D)
    full = to_np(layer(x, x, use_causal_mask=True))

    class QuantizedStep(keras.Model):
        def call(self, inputs):
            step, values, scales, index = inputs
            cache = keras_attention.QuantizedCache(values, scales)
            out, cache = layer(
                step,
                step,
                cache=cache,
                cache_update_index=index[0],
                use_causal_mask=True,
            )
            return out, cache.values, cache.scales

    model = QuantizedStep()
    model.compile(jit_compile=True)
    cache = keras_attention.QuantizedCache.allocate(layer, B, T)
    values, scales = to_np(cache.values), to_np(cache.scales)
    for i in range(T):
        out, values, scales = model.predict_on_batch(
            [x[:, i : i + 1], values, scales, np.full((B,), i, "int32")]
        )
        np.testing.assert_allclose(out[:, 0], full[:, i], atol=0.02)
