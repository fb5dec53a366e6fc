"""The paged cache: sequences of lengths 3, 17 and 40 decoding in one
batch equal each decoded alone; sequences join and leave between steps;
the pages are given lowest first."""

import keras
import numpy as np
import pytest

import keras_attention
from tests.layer_basics import to_np

D, STEPS = 8, 3


def _layer():
    return keras_attention.GroupedQueryAttention(
        4, 4, 2, rotary_embedding=keras_attention.RotaryEmbedding()
    )


def _prefill(layer, cache, row, prompt):
    """The prompt of sequence `row` alone, through the cache's pool."""
    part = cache.select([row])
    _, part = layer(
        prompt,
        prompt,
        cache=part,
        cache_update_index=np.array([0]),
        use_causal_mask=True,
    )
    return cache.with_pages(part)


def _step(layer, cache, lengths, tokens):
    cache = cache.reserve([n + 1 for n in lengths])
    out, cache = layer(
        tokens,
        tokens,
        cache=cache,
        cache_update_index=np.array(lengths, "int32"),
        use_causal_mask=True,
    )
    return to_np(out)[:, 0], cache


def test_ragged_sequences_decode_together_as_alone(rand):
    """3, 17 and 40 positions, then 3 tokens each in one batch; alone:
    the full causal pass of each."""
    lengths = [3, 17, 40]
    layer = _layer()
    texts = [rand(1, n + STEPS, D) for n in lengths]
    alone = [to_np(layer(t, t, use_causal_mask=True))[0] for t in texts]
    cache = keras_attention.PagedCache.allocate(
        layer, num_pages=32, page_size=4, pages_per_sequence=11
    )
    for row, (n, text) in enumerate(zip(lengths, texts, strict=True)):
        cache = cache.join().reserve(lengths[:row] + [n])
        cache = _prefill(layer, cache, row, text[:, :n])
    for _ in range(STEPS):
        tokens = np.concatenate(
            [t[:, n : n + 1] for n, t in zip(lengths, texts, strict=True)], 0
        )
        out, cache = _step(layer, cache, lengths, tokens)
        for b, n in enumerate(lengths):
            np.testing.assert_allclose(
                out[b], alone[b][n], rtol=1e-5, atol=1e-5
            )
        lengths = [n + 1 for n in lengths]
    # 6, 20 and 43 positions in 2 + 5 + 11 pages of 4: 14 pages free.
    table = to_np(cache.block_table)
    assert sorted(table[table >= 0].tolist()) == list(range(18))


def test_a_sequence_joins_and_another_leaves_between_steps(rand):
    layer = _layer()
    texts = [rand(1, 9, D) for _ in range(3)]
    alone = [to_np(layer(t, t, use_causal_mask=True))[0] for t in texts]
    cache = keras_attention.PagedCache.allocate(
        layer, num_pages=8, page_size=2, pages_per_sequence=5
    )
    cache = cache.join(2).reserve([4, 6])
    cache = _prefill(layer, cache, 0, texts[0][:, :4])
    cache = _prefill(layer, cache, 1, texts[1][:, :6])
    lengths = [4, 6]
    tokens = np.concatenate([texts[0][:, 4:5], texts[1][:, 6:7]], 0)
    out, cache = _step(layer, cache, lengths, tokens)
    np.testing.assert_allclose(out[1], alone[1][6], atol=1e-5)
    # The first leaves (its pages 0, 1 and 5 free), a third joins with 5
    # positions, in them.
    cache = cache.leave(0).join().reserve([7, 5])
    assert to_np(cache.block_table).tolist() == [
        [2, 3, 4, 6, -1],
        [0, 1, 5, -1, -1],
    ]
    cache = _prefill(layer, cache, 1, texts[2][:, :5])
    lengths = [7, 5]
    tokens = np.concatenate([texts[1][:, 7:8], texts[2][:, 5:6]], 0)
    out, cache = _step(layer, cache, lengths, tokens)
    np.testing.assert_allclose(out[0], alone[1][7], atol=1e-5)
    np.testing.assert_allclose(out[1], alone[2][5], atol=1e-5)


def test_pages_are_given_lowest_first_and_kept():
    layer = _layer()
    layer(np.zeros((1, 1, D), "float32"), np.zeros((1, 1, D), "float32"))
    cache = keras_attention.PagedCache.allocate(layer, 6, 2, 3, batch_size=2)
    cache = cache.reserve([3, 1]).reserve([4, 3])
    assert to_np(cache.block_table).tolist() == [[0, 1, -1], [2, 3, -1]]
    assert cache.max_length == 6
    assert cache.nbytes == 2 * 6 * 2 * 2 * 4 * 4 + 2 * 3 * 4


class PagedStep(keras.Model):
    def __init__(self, attention):
        super().__init__()
        self.attention = attention

    def call(self, inputs):
        x, pages, table, index = inputs
        cache = keras_attention.PagedCache(pages, table)
        out, cache = self.attention(
            x, x, cache=cache, cache_update_index=index, use_causal_mask=True
        )
        return out, cache.pages


@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="jit_compile=True is Dynamo on PyTorch, not XLA",
)
def test_decoding_runs_compiled_with_traced_positions(rand):
    """Under `jit_compile=True` the block table and the positions are
    traced; each sequence writes at its own."""
    layer = _layer()
    texts = rand(2, 6, D)
    alone = to_np(layer(texts, texts, use_causal_mask=True))
    cache = keras_attention.PagedCache.allocate(layer, 8, 2, 3, batch_size=2)
    cache = cache.reserve([6, 6])
    model = PagedStep(layer)
    model.compile(jit_compile=True)
    pages, table = to_np(cache.pages), to_np(cache.block_table)
    # The second sequence starts one step later: ragged positions.
    for i in range(5):
        index = np.array([i + 1, i], "int32")
        tokens = np.stack([texts[0, i + 1], texts[1, i]])[:, None]
        if i == 0:  # the first sequence's first position, alone
            part = cache.select([0])
            _, part = layer(
                texts[:1, :1],
                texts[:1, :1],
                cache=part,
                cache_update_index=np.array([0]),
            )
            pages = to_np(part.pages)
        out, pages = model.predict_on_batch([tokens, pages, table, index])
        np.testing.assert_allclose(out[0, 0], alone[0, i + 1], atol=1e-5)
        np.testing.assert_allclose(out[1, 0], alone[1, i], atol=1e-5)


@pytest.mark.parametrize(
    "index, fragment",
    [
        ([0, 0, 0], r"one position per sequence, 2 .*=\[0, 0, 0\]"),
        ([-1, 0], r"negative for the sequences \[0\]\..*=\[-1, 0\]"),
    ],
)
def test_a_bad_index_is_named_with_its_problem(rand, index, fragment):
    layer = _layer()
    x = rand(2, 1, D)
    layer(x, x)
    cache = keras_attention.PagedCache.allocate(layer, 8, 2, 4)
    cache = cache.join(2).reserve([2, 2])
    with pytest.raises(ValueError, match=fragment):
        layer(x, x, cache=cache, cache_update_index=np.array(index))
