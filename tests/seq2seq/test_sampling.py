"""Sampling decoders (temperature, top-k, top-p); scheduled sampling is in
test_scheduled.py."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import seq2seq
from tests.layer_basics import normal_arrays
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import assert_array_equal
from tests.seq2seq._arrays import to_numpy

VOCAB = 6
(MEMORY,) = normal_arrays(17, (3, 4, 5))


def _model(scale=1.0):
    keras.utils.set_random_seed(4)
    cell = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(5), seq2seq.BahdanauAttention(4)
    )
    embedding = keras.layers.Embedding(VOCAB, 3)
    output_layer = keras.layers.Dense(
        VOCAB, kernel_initializer=keras.initializers.RandomNormal(stddev=scale)
    )
    return cell, embedding, output_layer


def _reference_filter(logits, temperature, top_k, top_p):
    z = logits / temperature
    keep = np.ones_like(z, dtype=bool)
    if top_k is not None:
        keep &= z >= np.sort(z, axis=-1)[:, -top_k][:, None]
    z = np.where(keep, z, -np.inf)
    if top_p is not None:
        p = np.exp(z - z.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        for row in range(len(p)):
            order = np.argsort(-p[row])
            mass = np.cumsum(p[row][order])
            size = np.searchsorted(mass, top_p) + 1
            drop = order[size:]
            z[row, drop] = -np.inf
    return z


@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    [(0.5, None, None), (1.0, 3, None), (2.0, None, 0.7), (1.0, 4, 0.5)],
)
def test_filter_logits_keeps_the_expected_tokens(
    rng, temperature, top_k, top_p
):
    logits = rng.normal(size=(5, VOCAB)).astype("float32")
    filtered = to_numpy(
        seq2seq.filter_logits(logits, temperature, top_k, top_p)
    )
    expected = _reference_filter(logits, temperature, top_k, top_p)
    kept = np.isfinite(expected)
    assert_array_equal(filtered > -1e29, kept)
    assert_allclose(filtered[kept], expected[kept], rtol=1e-6)


def test_top_k_one_is_greedy():
    cell, embedding, output_layer = _model()
    common = (cell, MEMORY, embedding, output_layer, 1, 2, 5)
    greedy = seq2seq.greedy_decode(*common)
    sampled = seq2seq.sample_decode(*common, top_k=1, seed=0)
    for got, want in zip(sampled, greedy, strict=True):
        assert_allclose(got, want, rtol=1e-6)


def test_samples_follow_the_filtered_distribution():
    cell, embedding, output_layer = _model(scale=2.0)
    memory = np.repeat(MEMORY[:1], 2000, axis=0)
    kwargs = {"temperature": 1.5, "top_p": 0.8, "seed": 1}
    result = seq2seq.sample_decode(
        cell, memory, embedding, output_layer, 1, 2, 1, **kwargs
    )
    states = cell.get_initial_state(memory=MEMORY[:1])
    output, _ = cell(embedding(np.array([1])), states)
    log_probs = to_numpy(ops.log_softmax(output_layer(output), -1))
    z = _reference_filter(log_probs, 1.5, None, 0.8)
    expected = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    counts = np.bincount(to_numpy(result.tokens)[:, 0], minlength=VOCAB)
    frequencies = counts / counts.sum()
    tolerance = 4 * np.sqrt(expected[0] * (1 - expected[0]) / 2000) + 1e-3
    assert np.all(np.abs(frequencies - expected[0]) < tolerance)
    assert np.all(counts[expected[0] == 0] == 0)
    # The scores are the model's log-probabilities of the sampled tokens.
    assert_allclose(
        result.scores, log_probs[0][to_numpy(result.tokens)[:, 0]], rtol=1e-5
    )


def test_a_seed_fixes_the_samples():
    cell, embedding, output_layer = _model()
    common = (cell, MEMORY, embedding, output_layer, 1, 2, 6)
    first = seq2seq.sample_decode(*common, temperature=3.0, seed=5)
    again = seq2seq.sample_decode(*common, temperature=3.0, seed=5)
    assert_array_equal(first.tokens, again.tokens)
    # Not the greedy output: the samples do vary.
    greedy = seq2seq.greedy_decode(*common)
    assert not np.array_equal(to_numpy(first.tokens), to_numpy(greedy.tokens))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"temperature": 0.0}, "temperature=0.0"),
        ({"top_k": 0}, "top_k=0"),
        ({"top_p": 1.5}, "top_p=1.5"),
    ],
)
def test_invalid_sampling_arguments_raise(kwargs, match):
    cell, embedding, output_layer = _model()
    with pytest.raises(ValueError, match=match):
        seq2seq.sample_decode(
            cell, MEMORY, embedding, output_layer, 1, 2, 3, **kwargs
        )


def _teacher_forced(cell, embedding, output_layer, ids):
    decoder = seq2seq.AttentionDecoder(cell)
    return output_layer(decoder(embedding(ids), MEMORY))
