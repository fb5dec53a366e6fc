"""The memory's projection (tfa's `keys`), computed once per sequence.

Each check runs a cell that carries the keys in its state list against the
same layers stepping without them (a cell with `attention_fn=
compute_attention` gets no keys: its mechanism projects the memory at
every step, the computation before the keys were carried). Memories are
padded, the padding holding large values, and `units` equals the memory
depth, so a projection applied twice still runs (and shows).
"""

import keras
import numpy as np
import pytest

from keras_attention import seq2seq
from tests.autodiff import gradients
from tests.layer_basics import normal_arrays
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import assert_array_equal
from tests.seq2seq._arrays import to_numpy

INPUTS, QUERY, MEMORY, OTHER_MEMORY = normal_arrays(
    5, (2, 4, 3), (2, 8), (2, 5, 6), (2, 5, 6)
)
MEMORY_MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
MEMORY[~MEMORY_MASK] = 50.0
# A padded step inside the sequence: the states, keys included, must come
# out of it unchanged.
INPUTS_MASK = np.array([[1, 0, 1, 1], [1, 1, 1, 1]], dtype=bool)

MECHANISMS = {
    "bahdanau": lambda: seq2seq.BahdanauAttention(6),
    "normalized": lambda: seq2seq.BahdanauAttention(6, normalize=True),
    "concat": lambda: seq2seq.LuongAttention("concat", units=6),
    "monotonic": lambda: seq2seq.BahdanauMonotonicAttention(
        6, normalize=True, score_bias_init=1.0
    ),
}


def _cells(name="bahdanau"):
    """A cell with keys and one on the same layers without them."""
    mechanism, gru = MECHANISMS[name](), keras.layers.GRUCell(8)
    layer = keras.layers.Dense(7, activation="tanh", use_bias=False)
    cell = seq2seq.AttentionDecoderCell(gru, mechanism, attention_layer=layer)
    reference = seq2seq.AttentionDecoderCell(
        gru,
        mechanism,
        attention_layer=layer,
        attention_fn=seq2seq.compute_attention,
    )
    return cell, reference


def test_state_list_carries_each_memorys_keys_once():
    cell, reference = _cells()
    for memory in (MEMORY, OTHER_MEMORY):
        states = cell.get_initial_state(memory=memory, memory_mask=MEMORY_MASK)
        kernel = to_numpy(cell.mechanisms[0].score.key_kernel)
        assert len(states) == len(cell.state_size) == 6
        assert cell.keys_indices == [3] and cell.num_constant_states == 3
        assert_allclose(states[3], memory @ kernel, rtol=1e-5, atol=1e-5)
        assert_allclose(states[-2], memory)
    assert reference.keyed_mechanisms == [False]
    assert len(reference.get_initial_state(memory=MEMORY)) == 5


@pytest.mark.parametrize(
    "make",
    [
        lambda: seq2seq.LuongAttention("general"),
        lambda: seq2seq.LuongAttention("dot"),
        lambda: seq2seq.LuongMonotonicAttention("general", scale=True),
    ],
)
def test_mechanisms_without_a_memory_projection_carry_no_keys(make):
    cell = seq2seq.AttentionDecoderCell(keras.layers.GRUCell(6), make())
    states = cell.get_initial_state(memory=MEMORY)
    assert cell.keys_indices == [None] and cell.num_constant_states == 2
    assert len(states) == len(cell.state_size) == 5


def test_half_precision_cell_carries_no_keys():
    # `keras.layers.RNN` would cast float32 keys to float16.
    keras.config.set_dtype_policy("mixed_float16")
    cell, _ = _cells()
    assert cell.keyed_mechanisms == [False]
    assert len(cell.get_initial_state(memory=MEMORY)) == 5


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_mechanism_called_with_its_keys_gives_the_same_numbers(name):
    mechanism = MECHANISMS[name]()
    want = mechanism(QUERY, MEMORY, MEMORY_MASK)
    keys = mechanism.project_memory(MEMORY)
    got = mechanism(QUERY, MEMORY, MEMORY_MASK, keys=keys)
    for a, b in zip(got, want, strict=True):
        assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"keys.shape=\(1, 5, 6\)"):
        mechanism(QUERY, MEMORY, MEMORY_MASK, keys=keys[:1])


def test_project_memory_of_an_unbuilt_mechanism_raises():
    with pytest.raises(ValueError, match=r"needs a built mechanism"):
        seq2seq.BahdanauAttention(6).project_memory(MEMORY)


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_teacher_forcing_with_keys_equals_projecting_at_each_step(name):
    cell, reference = _cells(name)
    decoder = seq2seq.AttentionDecoder(cell, return_alignments=True)
    expected = seq2seq.AttentionDecoder(reference, return_alignments=True)
    # A second memory of the same shape: keys kept from the first call
    # would be stale (one mechanism is enough: JAX compiles each call).
    memories = (MEMORY, OTHER_MEMORY) if name == "bahdanau" else (MEMORY,)
    for memory in memories:
        args = (INPUTS, memory, INPUTS_MASK, MEMORY_MASK)
        for got, want in zip(decoder(*args), expected(*args), strict=True):
            assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_gradients_with_keys_equal_projecting_at_each_step():
    cell, reference = _cells("normalized")
    decoders = [seq2seq.AttentionDecoder(c) for c in (cell, reference)]
    decoders[1](INPUTS, MEMORY)  # builds both (shared layers)
    weights = cell.trainable_variables
    results = [
        gradients(
            lambda memory, *_, d=d: keras.ops.sum(
                keras.ops.square(d(INPUTS, memory, INPUTS_MASK, MEMORY_MASK))
            ),
            [MEMORY, *weights],
        )
        for d in decoders
    ]
    (value, grads), (want_value, want_grads) = results
    assert_allclose(value, want_value, rtol=1e-5)
    for got, want in zip(grads, want_grads, strict=True):
        assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_state_list_without_keys_still_steps():
    # A list made by hand in the documented layout before the keys.
    cell, _ = _cells()
    states = cell.get_initial_state(memory=MEMORY, memory_mask=MEMORY_MASK)
    old_layout = states[:3] + states[4:]
    output, new_states = cell(INPUTS[:, 0], states)
    old_output, old_new_states = cell(INPUTS[:, 0], old_layout)
    assert_allclose(old_output, output, rtol=1e-6, atol=1e-6)
    assert len(old_new_states) == 5 and len(new_states) == 6


def test_beam_search_with_keys_equals_projecting_at_each_step():
    # Greedy decoding of keys is checked by tests/test_saved_models.py
    # (the translator's golden outputs).
    cell, reference = _cells()
    embedding = keras.layers.Embedding(6, 3)
    output_layer = keras.layers.Dense(6)
    got, want = (
        seq2seq.beam_search_decode(
            c,
            MEMORY,
            embedding,
            output_layer,
            start_token=1,
            end_token=2,
            max_length=4,
            beam_width=2,
            memory_mask=MEMORY_MASK,
        )
        for c in (cell, reference)
    )
    assert_array_equal(got.tokens, want.tokens)
    assert_allclose(got.scores, want.scores, rtol=1e-5, atol=1e-6)
    assert_allclose(got.alignments, want.alignments, rtol=1e-5, atol=1e-6)
