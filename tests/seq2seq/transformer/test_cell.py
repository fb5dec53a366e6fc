"""TransformerDecoderCell: the state layout, cached and uncached steps."""

import keras
import numpy as np
import pytest

from keras_attention import seq2seq
from keras_attention.seq2seq.transformer import TransformerDecoderBlock
from keras_attention.seq2seq.transformer import TransformerDecoderCell
from keras_attention.seq2seq.transformer.cell import TransformerStateLayout
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import to_numpy


def _cells(num_key_value_heads=None):
    blocks = [
        TransformerDecoderBlock(
            8, 2, 16, num_key_value_heads=num_key_value_heads, name=f"b{i}"
        )
        for i in range(2)
    ]
    norm = keras.layers.LayerNormalization()
    for block in blocks:
        block.build((None, None, 8), (None, None, 8))
    norm.build((None, None, 8))
    return (
        TransformerDecoderCell(blocks, norm, max_length=5),
        TransformerDecoderCell(blocks, norm, max_length=5, use_cache=False),
    )


def test_state_layout_counts_varying_and_constant_states():
    cached = TransformerStateLayout(3, use_cache=True)
    assert cached.alignments_index == 4
    assert cached.num_varying_states == 5
    assert cached.num_constant_states == 5
    uncached = TransformerStateLayout(3, use_cache=False)
    assert uncached.alignments_index == 2
    assert uncached.num_varying_states == 3
    assert uncached.num_constant_states == 2
    cell, _ = _cells()
    memory = np.ones((2, 3, 8), "float32")
    states = cell.get_initial_state(memory=memory)
    # position, 2 self caches, alignments, 2 cross caches, memory, mask
    assert len(states) == 8
    assert to_numpy(cell.state_layout.memory(states)).shape == (2, 3, 8)


# Grouped heads in the TensorFlow lane only; on JAX and PyTorch
# test_model.py decodes a grouped-head Transformer with and without the
# cache.
@pytest.mark.parametrize(
    "num_key_value_heads",
    [None, pytest.param(1, marks=pytest.mark.tensorflow_lane)],
)
def test_cached_and_uncached_steps_agree(num_key_value_heads):
    cached, uncached = _cells(num_key_value_heads)
    rng = np.random.default_rng(1)
    memory = rng.normal(size=(2, 3, 8)).astype("float32")
    mask = np.array([[1, 1, 0], [1, 1, 1]], bool)
    a = cached.get_initial_state(memory=memory, memory_mask=mask)
    b = uncached.get_initial_state(memory=memory, memory_mask=mask)
    for _ in range(4):
        x = rng.normal(size=(2, 8)).astype("float32")
        out_a, a = cached(x, a)
        out_b, b = uncached(x, b)
        assert_allclose(out_a, out_b, atol=1e-5)
        assert_allclose(
            cached.state_layout.alignments(a),
            uncached.state_layout.alignments(b),
            atol=1e-5,
        )
    assert to_numpy(a[0]).tolist() == [4, 4]


def test_beam_search_is_the_same_with_and_without_the_cache():
    cached, uncached = _cells()
    memory = np.random.default_rng(2).normal(size=(2, 3, 8)).astype("float32")
    embedding = keras.layers.Embedding(7, 8)
    output_layer = keras.layers.Dense(7)
    results = [
        seq2seq.beam_search_decode(
            cell, memory, embedding, output_layer, 1, 2, 5, beam_width=3
        )
        for cell in (cached, uncached)
    ]
    assert (
        to_numpy(results[0].tokens).tolist()
        == to_numpy(results[1].tokens).tolist()
    )
    assert_allclose(results[0].scores, results[1].scores, atol=1e-4)


def test_cell_refuses_a_cell_state_and_no_blocks():
    cell, _ = _cells()
    with pytest.raises(ValueError, match="cell_state"):
        cell.get_initial_state(np.ones((1, 2, 8), "float32"), cell_state=[1])
    with pytest.raises(ValueError, match="at least one block"):
        TransformerDecoderCell([], keras.layers.LayerNormalization(), 4)


def _local_and_global_cells(cache_dtype=None):
    """A local block (window 2) under a global one; cached with their
    caches, and uncached."""
    blocks = [
        TransformerDecoderBlock(8, 2, 16, sliding_window=2, name="local"),
        TransformerDecoderBlock(8, 2, 16, name="global"),
    ]
    norm = keras.layers.LayerNormalization()
    for block in blocks:
        block.build((None, None, 8), (None, None, 8))
    norm.build((None, None, 8))
    return (
        TransformerDecoderCell(
            blocks, norm, max_length=6, cache_dtype=cache_dtype
        ),
        TransformerDecoderCell(blocks, norm, max_length=6, use_cache=False),
    )


def test_a_local_block_decodes_with_a_rolling_cache_as_uncached():
    """Six steps through a window of 2: the local block's rolling cache
    (two tensors in the state list) equals the whole prefix with its
    band; the global block keeps keras-hub's tensor."""
    cached, uncached = _local_and_global_cells()
    assert cached.state_layout.cache_sizes == (2, 1)
    rng = np.random.default_rng(5)
    memory = rng.normal(size=(2, 3, 8)).astype("float32")
    a = cached.get_initial_state(memory=memory)
    b = uncached.get_initial_state(memory=memory)
    # position, the rolling cache's sinks and window, the global cache.
    assert [tuple(s.shape) for s in a[1:4]] == [
        (2, 2, 0, 2, 4),
        (2, 2, 2, 2, 4),
        (2, 2, 6, 2, 4),
    ]
    for _ in range(6):
        x = rng.normal(size=(2, 8)).astype("float32")
        out_a, a = cached(x, a)
        out_b, b = uncached(x, b)
        assert_allclose(out_a, out_b, atol=1e-5)


# float8 keeps about four times int8's error (BENCHMARKS.md).
@pytest.mark.parametrize(
    "dtype, atol", [("int8", 0.05), ("float8_e4m3fn", 0.2)]
)
def test_a_quantized_cache_steps_close_to_the_float_one(dtype, atol):
    quantized, _ = _local_and_global_cells(dtype)
    dense, _ = _local_and_global_cells()
    dense.blocks = quantized.blocks
    dense.norm = quantized.norm
    rng = np.random.default_rng(6)
    memory = rng.normal(size=(2, 3, 8)).astype("float32")
    a = quantized.get_initial_state(memory=memory)
    b = dense.get_initial_state(memory=memory)
    assert keras.backend.standardize_dtype(a[3].dtype) == dtype
    for _ in range(5):
        x = rng.normal(size=(2, 8)).astype("float32")
        out_a, a = quantized(x, a)
        out_b, b = dense(x, b)
        assert_allclose(out_a, out_b, atol=atol)
        # The states keep the cache's dtype from step to step.
        assert keras.backend.standardize_dtype(a[3].dtype) == dtype
    with pytest.raises(ValueError, match="Received: cache_dtype='int4'"):
        TransformerDecoderCell(
            quantized.blocks, quantized.norm, 4, True, "int4"
        )
