"""The Transformer blocks: masks, causality, the cache, grouped heads."""

import keras
import numpy as np
import pytest

from keras_attention import GroupedQueryAttention
from keras_attention import MultiHeadAttention
from keras_attention import SelfAttention
from keras_attention.seq2seq.transformer import TransformerDecoderBlock
from keras_attention.seq2seq.transformer import TransformerEncoderBlock
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import to_numpy

RNG = np.random.default_rng(0)


def _rand(*shape):
    return RNG.normal(size=shape).astype("float32")


def test_encoder_block_is_its_sublayers_composed_pre_norm():
    block = TransformerEncoderBlock(8, 2, 16)
    x = _rand(2, 5, 8)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    block.build(x.shape)
    h = x + to_numpy(
        block.self_attention(block.self_attention_norm(x), mask=mask)
    )
    ff = block.feed_forward_outer(
        block.feed_forward_inner(block.feed_forward_norm(h))
    )
    assert_allclose(block(x, padding_mask=mask), h + to_numpy(ff), atol=1e-5)
    assert isinstance(block.self_attention, SelfAttention)
    assert block.self_attention.rotary_embedding is not None


def test_encoder_block_returns_its_self_attention_weights_per_head():
    block = TransformerEncoderBlock(8, 2, 16)
    x = _rand(2, 5, 8)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    outputs, weights = block(x, padding_mask=mask, return_attention_scores=True)
    # The same outputs as without the weights, and the sublayer's own.
    assert_allclose(outputs, block(x, padding_mask=mask), atol=1e-6)
    _, expected = block.self_attention(
        block.self_attention_norm(x), mask=mask, return_attention_scores=True
    )
    assert tuple(weights.shape) == (2, 2, 5, 5)
    assert_allclose(weights, expected, atol=1e-6)
    weights = to_numpy(weights)
    assert np.all(weights[0, :, :3, 3:] == 0)
    assert_allclose(weights[0, :, :3].sum(-1), 1.0, atol=1e-5)


def test_encoder_block_ignores_what_sits_at_padding():
    block = TransformerEncoderBlock(8, 2, 16)
    x = _rand(1, 5, 8)
    mask = np.array([[1, 1, 1, 0, 0]], bool)
    changed = x.copy()
    changed[:, 3:] = _rand(1, 2, 8)
    assert_allclose(
        to_numpy(block(x, padding_mask=mask))[:, :3],
        to_numpy(block(changed, padding_mask=mask))[:, :3],
        atol=1e-5,
    )


@pytest.mark.tensorflow_lane
@pytest.mark.parametrize("sliding_window", [None, 2])
def test_causal_encoder_block_step_by_step_with_the_cache_matches_the_whole(
    sliding_window,
):
    """A decoder-only model's block: the prompt, then one step at a time.

    Other lanes (3-4 s each on JAX): `tests/models/test_generation.py`
    decodes a model of these blocks, a local one (`RollingCache`) under a
    global one (keras-hub's tensor, int8), against its full causal pass.
    """
    from keras_attention import KeyValueCache
    from keras_attention import RollingCache

    block = TransformerEncoderBlock(8, 2, 16, sliding_window=sliding_window)
    x = _rand(2, 5, 8)
    whole, weights = block(
        x, use_causal_mask=True, return_attention_scores=True
    )
    assert np.all(to_numpy(weights)[:, :, 0, 1:] == 0)
    attention = block.self_attention
    if sliding_window is None:
        cache = KeyValueCache.allocate(attention, 2, 5)
    else:
        cache = RollingCache.allocate(attention, 2)
    first, cache = block(
        x[:, :2], use_causal_mask=True, cache=cache, cache_update_index=0
    )
    steps = [to_numpy(first)]
    for t in range(2, 5):
        out, cache = block(
            x[:, t : t + 1],
            use_causal_mask=True,
            cache=cache,
            cache_update_index=t,
        )
        steps.append(to_numpy(out))
    assert_allclose(np.concatenate(steps, 1), whole, atol=1e-5)


def test_decoder_block_is_causal_and_masks_the_memory():
    block = TransformerDecoderBlock(8, 2, 16)
    y, memory = _rand(2, 4, 8), _rand(2, 3, 8)
    memory_mask = np.array([[1, 1, 0], [1, 1, 1]], bool)
    out, alignments = block(y, memory, memory_mask=memory_mask)
    later = y.copy()
    later[:, 2:] = _rand(2, 2, 8)
    out_later, _ = block(later, memory, memory_mask=memory_mask)
    assert_allclose(to_numpy(out)[:, :2], to_numpy(out_later)[:, :2], atol=1e-5)
    alignments = to_numpy(alignments)
    assert alignments.shape == (2, 4, 3)
    assert_allclose(alignments.sum(-1), np.ones((2, 4)), atol=1e-5)
    assert np.all(alignments[0, :, 2] == 0.0)


# Grouped heads in the TensorFlow lane only (15 s on JAX); on JAX and
# PyTorch tests/layers/test_cache.py checks GroupedQueryAttention's cached
# steps against the full pass, and test_model.py decodes a grouped-head
# Transformer with and without the cache.
@pytest.mark.parametrize(
    "num_key_value_heads",
    [None, pytest.param(1, marks=pytest.mark.tensorflow_lane)],
)
def test_decoder_block_step_by_step_with_the_cache_matches_the_whole(
    num_key_value_heads,
):
    block = TransformerDecoderBlock(
        8, 2, 16, num_key_value_heads=num_key_value_heads
    )
    kind = (
        MultiHeadAttention
        if num_key_value_heads is None
        else (GroupedQueryAttention)
    )
    assert isinstance(block.cross_attention, kind)
    y, memory = _rand(2, 4, 8), _rand(2, 3, 8)
    memory_mask = np.array([[1, 1, 0], [1, 1, 1]], bool)
    whole, whole_alignments = block(y, memory, memory_mask=memory_mask)
    heads = num_key_value_heads or 2
    cache = np.zeros((2, 2, 6, heads, 4), "float32")
    cross = block.cross_cache(memory)
    steps, alignments = [], []
    for t in range(4):
        out, align, cache = block(
            y[:, t : t + 1],
            memory,
            memory_mask=memory_mask,
            self_cache=cache,
            cross_cache=cross,
            cache_update_index=t,
        )
        steps.append(to_numpy(out))
        alignments.append(to_numpy(align))
    assert_allclose(np.concatenate(steps, 1), whole, atol=1e-5)
    assert_allclose(np.concatenate(alignments, 1), whole_alignments, atol=1e-5)


def test_blocks_round_trip_their_config_and_check_their_sizes():
    block = TransformerDecoderBlock(
        8, 2, 16, num_key_value_heads=1, dropout=0.1
    )
    clone = TransformerDecoderBlock.from_config(block.get_config())
    assert clone.get_config() == block.get_config()
    with pytest.raises(ValueError, match="multiple of `num_heads`"):
        TransformerEncoderBlock(10, 4, 16)
    with pytest.raises(ValueError, match="num_key_value_heads"):
        TransformerDecoderBlock(8, 4, 16, num_key_value_heads=3)
    with pytest.raises(ValueError, match="feed_forward_dim"):
        TransformerEncoderBlock(8, 2, 0)
    assert (
        keras.saving.get_registered_object(
            "keras_attention>TransformerEncoderBlock"
        )
        is TransformerEncoderBlock
    )


@pytest.mark.parametrize("rotates", [True, False])
def test_a_nope_block_sees_the_earlier_tokens_as_a_set(rotates):
    # Without rotation a causal block's last position depends on which
    # tokens came before, not on their order; with it, on the order too.
    block = TransformerEncoderBlock(8, 2, 16, use_rotary_embedding=rotates)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 5, 8)).astype("float32")
    swapped = x[:, [2, 0, 3, 1, 4]]
    last = [
        to_numpy(block(v, use_causal_mask=True))[:, -1] for v in (x, swapped)
    ]
    assert (block.self_attention.rotary_embedding is None) is not rotates
    assert np.allclose(*last, atol=1e-5) is not rotates
    clone = TransformerEncoderBlock.from_config(block.get_config())
    assert clone.get_config()["use_rotary_embedding"] is rotates


def test_use_rotary_embedding_is_a_bool_and_not_on_a_linear_block():
    from keras_attention.models import GatedDeltaBlock

    with pytest.raises(ValueError, match="Received: use_rotary_embedding=0"):
        TransformerDecoderBlock(8, 2, 16, use_rotary_embedding=0)
    with pytest.raises(ValueError, match="use_rotary_embedding=False"):
        GatedDeltaBlock(8, 2, 16, use_rotary_embedding=False)
