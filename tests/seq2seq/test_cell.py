"""AttentionDecoderCell: one step, inside `keras.layers.RNN`, config, errors.

AttentionDecoder (the teacher-forced layer) has its own file,
`tests/seq2seq/test_decoder.py`.
"""

import keras
import numpy as np
import pytest

from keras_attention import seq2seq
from tests.layer_basics import normal_arrays
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import to_numpy
from tests.seq2seq._cells import decoder_cell as _cell

INPUTS, MEMORY = normal_arrays(1, (2, 4, 3), (2, 5, 6))
MEMORY_MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)


def _step_by_step(cell, inputs, memory, memory_mask, cell_state=None):
    states = cell.get_initial_state(
        memory=memory, memory_mask=memory_mask, cell_state=cell_state
    )
    outputs, alignments = [], []
    for t in range(inputs.shape[1]):
        output, states = cell(inputs[:, t], states)
        outputs.append(to_numpy(output))
        alignments.append(to_numpy(states[cell.alignments_index]))
    return np.stack(outputs, 1), np.stack(alignments, 1)


CONFIGS = [
    ("gru", {}),
    ("gru", {"attention_layer_units": 7}),
    ("lstm", {"attention_layer_units": 7}),
    ("gru", {"output_attention": False}),
]


@pytest.mark.parametrize("kind, kwargs", CONFIGS)
def test_step_by_step_equals_teacher_forced_full_call(kind, kwargs):
    cell = _cell(kind, **kwargs)
    decoder = seq2seq.AttentionDecoder(cell, return_alignments=True)
    outputs, alignments = decoder(INPUTS, MEMORY, memory_mask=MEMORY_MASK)
    step_outputs, step_alignments = _step_by_step(
        cell, INPUTS, MEMORY, MEMORY_MASK
    )
    assert_allclose(outputs, step_outputs, atol=1e-5)
    assert_allclose(alignments, step_alignments, atol=1e-6)


@pytest.mark.parametrize("kind, kwargs", CONFIGS)
def test_cell_runs_inside_keras_rnn_with_memory_in_the_state(kind, kwargs):
    cell = _cell(kind, **kwargs)
    states = cell.get_initial_state(memory=MEMORY, memory_mask=MEMORY_MASK)
    rnn = keras.layers.RNN(cell, return_sequences=True, return_state=True)
    outputs, *final = rnn(INPUTS, initial_state=states)
    step_outputs, step_alignments = _step_by_step(
        cell, INPUTS, MEMORY, MEMORY_MASK
    )
    assert_allclose(outputs, step_outputs, atol=1e-5)
    assert_allclose(
        final[cell.alignments_index], step_alignments[:, -1], atol=1e-6
    )
    assert_allclose(final[-2], MEMORY)


def test_input_feeding_first_step_sees_zero_attention():
    cell = _cell(attention_layer_units=7)
    states = cell.get_initial_state(memory=MEMORY)
    output, new_states = cell(INPUTS[:, 0], states)
    gru = keras.layers.GRUCell(8)
    gru.build((None, 3 + 7))
    gru.set_weights(cell.cell.get_weights())
    feed = np.concatenate([INPUTS[:, 0], np.zeros((2, 7), "float32")], -1)
    h, _ = gru(feed, [np.zeros((2, 8), "float32")])
    assert_allclose(new_states[0], h, atol=1e-6)
    # The second step is fed the first step's attention vector.
    _, states2 = cell(INPUTS[:, 1], new_states)
    feed2 = np.concatenate([INPUTS[:, 1], to_numpy(output)], -1)
    h2, _ = gru(feed2, [h])
    assert_allclose(states2[0], h2, atol=1e-6)


def test_luong_attention_layer_is_tanh_of_context_and_state():
    cell = _cell(attention_layer_units=7)
    states = cell.get_initial_state(memory=MEMORY, memory_mask=MEMORY_MASK)
    output, new_states = cell(INPUTS[:, 0], states)
    h = to_numpy(new_states[0])
    alignments = to_numpy(new_states[cell.alignments_index])
    context = np.einsum("bs,bsd->bd", alignments, MEMORY)
    kernel = to_numpy(cell.attention_layer.kernel)
    expected = np.tanh(np.concatenate([context, h], -1) @ kernel)
    assert_allclose(output, expected, atol=1e-5)


def test_initial_cell_state_is_used(rng):
    decoder = seq2seq.AttentionDecoder(_cell())
    state = rng.normal(size=(2, 8)).astype("float32")
    with_state = decoder(INPUTS, MEMORY, initial_state=[state])
    without = decoder(INPUTS, MEMORY)
    assert not np.allclose(to_numpy(with_state), to_numpy(without))
    cell = decoder.cell
    step_outputs, _ = _step_by_step(cell, INPUTS, MEMORY, None, [state])
    assert_allclose(with_state, step_outputs, atol=1e-5)


def test_cell_config_round_trip():
    cell = _cell(
        "lstm",
        attention=seq2seq.LuongAttention("concat", units=3),
        attention_layer_units=7,
        output_attention=False,
    )
    config = cell.get_config()
    clone = seq2seq.AttentionDecoderCell.from_config(config)
    assert clone.get_config() == config
    assert isinstance(clone.cell, keras.layers.LSTMCell)
    assert clone.attention.score_name == "concat"


def test_cell_without_state_size_raises():
    with pytest.raises(ValueError, match="expected a Keras RNN cell"):
        seq2seq.AttentionDecoderCell(
            keras.layers.Dense(3), seq2seq.BahdanauAttention()
        )


def test_attention_of_wrong_type_raises():
    with pytest.raises(ValueError, match="argument `attention`"):
        seq2seq.AttentionDecoderCell(
            keras.layers.GRUCell(3), keras.layers.Attention()
        )


def test_invalid_attention_layer_units_raises():
    with pytest.raises(ValueError, match="attention_layer_units=0"):
        _cell(attention_layer_units=0)


def test_invalid_output_attention_raises():
    with pytest.raises(ValueError, match="output_attention='yes'"):
        _cell(output_attention="yes")


def test_initial_state_without_memory_raises():
    with pytest.raises(ValueError, match="needs the encoder memory"):
        _cell().get_initial_state(batch_size=2)


def test_memory_of_wrong_rank_raises():
    with pytest.raises(ValueError, match=r"memory.shape=\(2, 6\)"):
        _cell().get_initial_state(memory=MEMORY[:, 0])


def test_memory_of_another_depth_raises():
    cell = _cell()
    cell.get_initial_state(memory=MEMORY)
    with pytest.raises(ValueError, match="built for a memory of depth 6"):
        cell.get_initial_state(memory=MEMORY[..., :4])


def test_wrong_number_of_cell_states_raises():
    state = np.zeros((2, 8), "float32")
    with pytest.raises(ValueError, match="has 2 state"):
        _cell("lstm").get_initial_state(memory=MEMORY, cell_state=[state])


def test_building_without_memory_raises():
    with pytest.raises(ValueError, match="needs the memory before"):
        _cell().build((2, 3))
