"""seq2seq/transformer/linear_block.py: the Gated DeltaNet block of a
hybrid decoder-only model, and the hybrid built, generated from with its
state caches (equal to full passes), saved and loaded."""

import os

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention.models import Generator
from keras_attention.models import language_model


def _hybrid(pattern=("linear", "linear", "linear", "full")):
    keras.utils.set_random_seed(0)
    return language_model.build_language_model(
        20,
        model_dim=16,
        num_layers=4,
        num_heads=2,
        feed_forward_dim=32,
        dropout=0.0,
        layer_types=pattern,
    )


def test_the_block_is_pre_norm_gated_delta_net_then_the_network():
    block = keras_attention.models.GatedDeltaBlock(8, 2, 16)
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    x = keras.ops.convert_to_tensor(x)
    got = keras.ops.convert_to_numpy(block(x))
    h = x + block.self_attention(block.self_attention_norm(x))
    ff = block.feed_forward_outer(
        block.feed_forward_inner(block.feed_forward_norm(h))
    )
    np.testing.assert_allclose(
        got, keras.ops.convert_to_numpy(h + ff), atol=1e-5
    )


def test_a_prefill_then_steps_equal_the_full_pass():
    block = keras_attention.models.GatedDeltaBlock(8, 2, 16)
    x = np.random.default_rng(1).normal(size=(2, 7, 8)).astype("float32")
    full = keras.ops.convert_to_numpy(block(x))
    cache = keras_attention.GatedDeltaCache.allocate(block.self_attention, 2)
    out, cache = block(x[:, :4], cache=cache, cache_update_index=0)
    steps = [keras.ops.convert_to_numpy(out)]
    for t in range(4, 7):
        out, cache = block(x[:, t : t + 1], cache=cache, cache_update_index=t)
        steps.append(keras.ops.convert_to_numpy(out))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


def test_the_pattern_repeats_over_the_blocks():
    model = _hybrid(("linear", "full"))
    kinds = [type(layer).__name__ for layer in model.layers[2:6]]
    assert kinds == ["GatedDeltaBlock", "TransformerEncoderBlock"] * 2


def test_the_hybrid_generates_with_its_caches_as_full_passes(tmp_path):
    model = _hybrid()
    generator = Generator(model)
    kinds = [type(c).__name__ for c in generator.caches(2, 8)]
    assert kinds == ["GatedDeltaCache"] * 3 + ["KeyValueCache"]
    # A quantized cache is for the full-attention blocks only.
    int8 = [type(c).__name__ for c in Generator(model, "int8").caches(2, 8)]
    assert int8 == ["GatedDeltaCache"] * 3 + ["QuantizedCache"]
    prompt = np.random.default_rng(2).integers(1, 20, (2, 5))
    cached = generator.generate(prompt, 6)
    np.testing.assert_array_equal(
        cached, np.asarray(generator.generate_uncached(prompt, 6))
    )
    path = os.path.join(tmp_path, "hybrid.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(Generator(loaded).generate(prompt, 6), cached)


def test_bad_patterns_and_calls_are_refused():
    with pytest.raises(ValueError, match="Received: layer_types"):
        _hybrid(("full", "convolution"))
    with pytest.raises(ValueError, match="Received: sliding_window=4"):
        keras_attention.models.GatedDeltaBlock(8, 2, 16, sliding_window=4)
    block = keras_attention.models.GatedDeltaBlock(8, 2, 16)
    with pytest.raises(ValueError, match="Received: use_causal_mask=False"):
        block(np.zeros((1, 3, 8), "float32"), use_causal_mask=False)
