"""Generation compiled end to end: the cached loop against the full model.

Two paths that must agree: `Generator.generate` (the prompt in one call,
then one token a step with each block's cache, one `ops.while_loop` under
`jax.jit` / `tf.function(jit_compile=True)`; eager on PyTorch) and
`generate_uncached` (the whole model over the prefix at every step). The
model has a local block (a `RollingCache` of its window, passed four
times over) under a global one (keras-hub's cache tensor, or int8 entries).
In the PyTorch lane too (`TORCH_LANE`): it needs no TensorFlow.
"""

import keras
import numpy as np
import pytest

from keras_attention.models import Generator
from keras_attention.models import build_language_model

VOCABULARY = 24
WINDOW = 2
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def model():
    # Seeded: the assertion on the continuation's ids below holds for
    # these weights, drawn the same whatever ran before in the worker.
    keras.utils.set_random_seed(7)
    model = build_language_model(
        VOCABULARY,
        model_dim=8,
        num_layers=2,
        num_heads=2,
        feed_forward_dim=16,
        dropout=0.0,
        sliding_window=WINDOW,
        global_every=2,
    )
    # Larger embeddings than Keras's initial ones, so that greedy choices
    # vary from step to step and a wrong cache shows.
    rng = np.random.default_rng(3)
    table = model.get_layer("token_embedding")
    table.set_weights([rng.normal(size=(VOCABULARY, 8)).astype("float32")])
    return model


PROMPT = np.array([[3, 9, 14], [20, 5, 7]], "int32")


@pytest.mark.parametrize("cache_dtype", [None, "int8"])
def test_compiled_cached_generation_equals_uncached_greedy(model, cache_dtype):
    local, global_ = (block.sliding_window for block in model.layers[2:4])
    assert (local, global_) == (WINDOW, None)
    generator = Generator(model, cache_dtype=cache_dtype)
    cached = generator.generate(PROMPT, NEW_TOKENS)
    uncached = generator.generate_uncached(PROMPT, NEW_TOKENS)
    np.testing.assert_array_equal(cached, uncached)
    np.testing.assert_array_equal(cached[:, :3], PROMPT)
    # The continuation is not one id repeated: a wrong cache would show.
    assert len(np.unique(cached[:, 3:])) >= 4
    # A second call reuses the compiled function.
    np.testing.assert_array_equal(
        generator.generate(PROMPT, NEW_TOKENS), cached
    )
    assert len(generator._compiled) == 1


def test_the_caches_keep_a_fixed_shape_and_the_local_one_its_window(model):
    caches = Generator(model, cache_dtype="int8").caches(2, 11)
    assert type(caches[0]).__name__ == "RollingCache"
    assert tuple(caches[0].window.shape) == (2, 2, WINDOW, 2, 4)
    assert type(caches[1]).__name__ == "QuantizedCache"
    assert tuple(caches[1].values.shape) == (2, 2, 11, 2, 4)
    assert type(Generator(model).caches(2, 11)[1]).__name__ == "KeyValueCache"


def test_bad_arguments_are_named(model):
    generator = Generator(model)
    with pytest.raises(ValueError, match="cache_dtype"):
        Generator(model, cache_dtype="int4")
    with pytest.raises(ValueError, match=r"prompt.shape=\(3,\)"):
        generator.generate(np.array([1, 2, 3]), 2)
    with pytest.raises(ValueError, match=r"\[0, 24\).*an id 24"):
        generator.generate(np.array([[1, 24]]), 2)
    with pytest.raises(ValueError, match="prompt.dtype=float"):
        generator.generate(np.array([[1.0, 2.0]]), 2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generator.generate(PROMPT, 0)
    with pytest.raises(ValueError, match="build_language_model"):
        Generator(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]))
