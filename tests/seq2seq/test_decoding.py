"""Greedy and beam-search decoding."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import seq2seq
from tests.layer_basics import normal_arrays
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import assert_array_equal
from tests.seq2seq._arrays import to_numpy

PAD, START, END, A, B = range(5)
VOCAB = 5
(MEMORY,) = normal_arrays(2, (3, 6, 8))
MEMORY_MASK = np.array(
    [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]], dtype=bool
)


def _model(kind="gru", vocab=11):
    inner = (
        keras.layers.GRUCell(8) if kind == "gru" else keras.layers.LSTMCell(8)
    )
    cell = seq2seq.AttentionDecoderCell(
        inner, seq2seq.BahdanauAttention(8), attention_layer_units=8
    )
    embedding = keras.layers.Embedding(vocab, 4)
    output_layer = keras.layers.Dense(vocab)
    return cell, embedding, output_layer


def _as_np(result):
    return [to_numpy(x) for x in result]


# LSTM in the TensorFlow lane only (8 s on JAX): the decoders treat every
# cell state alike, and the GRU case runs on JAX and PyTorch.
@pytest.mark.parametrize(
    "kind", ["gru", pytest.param("lstm", marks=pytest.mark.tensorflow_lane)]
)
def test_beam_width_one_equals_greedy(kind):
    cell, embedding, output_layer = _model(kind)
    common = {
        "cell": cell,
        "memory": MEMORY,
        "embedding": embedding,
        "output_layer": output_layer,
        "start_token": 1,
        "end_token": 2,
        "max_length": 9,
        "memory_mask": MEMORY_MASK,
    }
    greedy = _as_np(seq2seq.greedy_decode(**common))
    beam = _as_np(
        seq2seq.beam_search_decode(**common, beam_width=1, length_penalty=1.0)
    )
    assert_array_equal(beam[0], greedy[0])
    assert_allclose(beam[1], greedy[1], rtol=1e-5)
    assert_allclose(beam[2], greedy[2], atol=1e-6)
    assert_array_equal(beam[3], greedy[3])


def _teacher_forced(cell, embedding, output_layer, tokens):
    inputs = np.concatenate(
        [np.full((tokens.shape[0], 1), 1), tokens[:, :-1]], axis=1
    )
    decoder = seq2seq.AttentionDecoder(cell, return_alignments=True)
    outputs, alignments = decoder(
        embedding(inputs), MEMORY, memory_mask=MEMORY_MASK
    )
    log_probs = ops.log_softmax(output_layer(outputs), axis=-1)
    return to_numpy(log_probs), to_numpy(alignments)


def test_greedy_step_by_step_equals_teacher_forcing_on_its_output():
    cell, embedding, output_layer = _model()
    # An end token that is never the argmax: the run uses every step.
    result = seq2seq.greedy_decode(
        cell, MEMORY, embedding, output_layer, 1, 10, 7, MEMORY_MASK
    )
    tokens, scores, alignments, lengths = _as_np(result)
    log_probs, forced_alignments = _teacher_forced(
        cell, embedding, output_layer, tokens
    )
    valid = np.arange(7)[None, :] < lengths[:, None]
    argmax = log_probs.argmax(-1)
    assert_array_equal(argmax[valid], tokens[valid])
    picked = np.take_along_axis(log_probs, tokens[..., None], -1)[..., 0]
    assert_allclose((picked * valid).sum(1), scores, rtol=1e-4)
    assert_allclose(alignments, forced_alignments, atol=1e-5)


def test_beam_scores_are_the_log_probabilities_of_its_tokens():
    cell, embedding, output_layer = _model()
    tokens, scores, _, lengths = _as_np(
        seq2seq.beam_search_decode(
            cell,
            MEMORY,
            embedding,
            output_layer,
            1,
            2,
            6,
            3,
            memory_mask=MEMORY_MASK,
        )
    )
    log_probs, _ = _teacher_forced(cell, embedding, output_layer, tokens)
    valid = np.arange(6)[None, :] < lengths[:, None]
    picked = np.take_along_axis(log_probs, tokens[..., None], -1)[..., 0]
    assert_allclose((picked * valid).sum(1), scores, rtol=1e-4)


class _PreviousToken(keras.layers.Layer):
    """A "cell" whose output is its input's one-hot part: a bigram model."""

    state_size = VOCAB
    output_size = VOCAB

    def call(self, inputs, states, training=None):
        out = inputs[:, :VOCAB]
        return out, [out]


def _bigram(table, rng):
    """Decoder pieces whose next-token distribution is `table[previous]`."""
    table = np.array(table, dtype="float32") + 1e-6
    log_table = np.log(table / table.sum(1, keepdims=True))
    cell = seq2seq.AttentionDecoderCell(
        _PreviousToken(),
        seq2seq.LuongAttention("dot"),
        output_attention=False,
    )
    memory = rng.normal(size=(2, 3, VOCAB)).astype("float32")
    return {
        "cell": cell,
        "memory": memory,
        "embedding": lambda ids: ops.one_hot(ids, VOCAB),
        "output_layer": lambda h: ops.matmul(h, log_table),
        "start_token": START,
        "end_token": END,
        "max_length": 5,
    }


def test_beam_search_finds_a_better_sequence_than_greedy(rng):
    # From <start>, A is likelier than B, but every continuation of A is
    # unlikely while B is almost surely followed by <end>.
    uniform = [0.25] * 5
    table = [
        uniform,
        [0, 0, 0, 0.6, 0.4],  # <start>
        uniform,
        [0, 0, 0.35, 0.33, 0.32],  # A
        [0, 0, 0.99, 0.005, 0.005],  # B
    ]
    common = _bigram(table, rng)
    greedy = _as_np(seq2seq.greedy_decode(**common))
    beam = _as_np(seq2seq.beam_search_decode(**common, beam_width=2))
    assert_array_equal(greedy[0][:, :2], [[A, END]] * 2)
    assert_array_equal(beam[0][:, :2], [[B, END]] * 2)
    assert np.all(beam[1] > greedy[1] + 0.5)
    assert_allclose(beam[1], np.log(0.4 * 0.99), atol=1e-3)
    assert_array_equal(beam[3], [2, 2])
    assert np.all(beam[0][:, 2:] == PAD)


def test_length_penalty_prefers_longer_hypotheses(rng):
    uniform = [0.25] * 5
    table = [
        uniform,
        [0, 0, 0.5, 0.5, 0],  # <start>: <end> or A
        uniform,
        [0, 0, 0.9, 0.1, 0],  # A
        uniform,
    ]
    common = _bigram(table, rng)
    plain = _as_np(seq2seq.beam_search_decode(**common, beam_width=2))
    penalized = _as_np(
        seq2seq.beam_search_decode(**common, beam_width=2, length_penalty=5.0)
    )
    assert_array_equal(plain[3], [1, 1])
    assert_array_equal(penalized[3], [2, 2])
    assert_array_equal(penalized[0][:, :2], [[A, END]] * 2)


def test_tokens_after_the_end_token_are_padding_and_alignments_zero(rng):
    uniform = [0.25] * 5
    table = [
        uniform,
        [0, 0, 0.1, 0.9, 0],
        uniform,
        [0, 0, 0.9, 0.1, 0],
        uniform,
    ]
    common = _bigram(table, rng)
    tokens, _, alignments, lengths = _as_np(seq2seq.greedy_decode(**common))
    assert_array_equal(tokens, [[A, END, PAD, PAD, PAD]] * 2)
    assert_array_equal(lengths, [2, 2])
    assert np.all(alignments[:, 2:] == 0)
    assert_allclose(alignments[:, :2].sum(-1), 1.0, atol=1e-5)


def test_fully_masked_memory_decodes_without_nan():
    cell, embedding, output_layer = _model()
    result = _as_np(
        seq2seq.beam_search_decode(
            cell,
            MEMORY,
            embedding,
            output_layer,
            1,
            2,
            4,
            2,
            memory_mask=np.zeros((3, 6), dtype=bool),
        )
    )
    assert np.all(np.isfinite(result[1]))
    assert np.all(result[2] == 0)


def test_decoders_work_inside_a_compiled_function():
    cell, embedding, output_layer = _model()

    class Decode(keras.layers.Layer):
        def call(self, memory):
            result = seq2seq.beam_search_decode(
                cell, memory, embedding, output_layer, 1, 2, 5, 2
            )
            return result.tokens, result.scores

    memory = keras.Input((6, 8))
    model = keras.Model(memory, Decode()(memory))
    tokens, scores = model.predict(MEMORY, verbose=0)
    eager = _as_np(
        seq2seq.beam_search_decode(
            cell, MEMORY, embedding, output_layer, 1, 2, 5, 2
        )
    )
    assert_array_equal(tokens, eager[0])
    assert_allclose(scores, eager[1], rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_length": 0}, "max_length=0"),
        ({"beam_width": 0}, "beam_width=0"),
        ({"beam_width": 2.0}, "beam_width=2.0"),
        ({"length_penalty": -1.0}, "length_penalty=-1.0"),
    ],
)
def test_invalid_decoding_arguments_raise(kwargs, match):
    cell, embedding, output_layer = _model()
    arguments = {
        "cell": cell,
        "memory": MEMORY,
        "embedding": embedding,
        "output_layer": output_layer,
        "start_token": 1,
        "end_token": 2,
        "max_length": 3,
        "beam_width": 2,
        **kwargs,
    }
    with pytest.raises(ValueError, match=match):
        seq2seq.beam_search_decode(**arguments)


def test_greedy_invalid_max_length_raises():
    cell, embedding, output_layer = _model()
    with pytest.raises(ValueError, match="max_length=-1"):
        seq2seq.greedy_decode(cell, MEMORY, embedding, output_layer, 1, 2, -1)
