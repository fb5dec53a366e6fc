"""`AttentionDecoderCell` with several mechanisms and tfa's options."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import seq2seq
from tests.layer_basics import normal_arrays
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import to_numpy

INPUTS, MEMORY = normal_arrays(13, (2, 3), (2, 5, 4))
MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)


@keras.saving.register_keras_serializable(package="tests")
def inputs_only(inputs, attention):
    return inputs


@keras.saving.register_keras_serializable(package="tests")
def state_then_context(
    mechanism, cell_output, memory, memory_mask, previous, layer, **kwargs
):
    context, alignments = mechanism(
        cell_output, memory, memory_mask, previous, **kwargs
    )
    return ops.concatenate([cell_output, context], -1), alignments


def _step(cell):
    states = cell.get_initial_state(memory=MEMORY, memory_mask=MASK)
    states[cell.attention_index] = ops.ones_like(states[cell.attention_index])
    return cell(INPUTS, states)


def test_one_context_per_mechanism_concatenated():
    mechanisms = [
        seq2seq.BahdanauAttention(3),
        # Its own previous alignments: one-hot on the first position.
        seq2seq.LuongMonotonicAttention("dot", score_bias_init=1.0),
    ]
    cell = seq2seq.AttentionDecoderCell(keras.layers.GRUCell(4), mechanisms)
    output, states = _step(cell)
    hidden = states[0]
    expected = [m(hidden, MEMORY, MASK) for m in mechanisms]
    assert_allclose(
        output,
        np.concatenate([to_numpy(c) for c, _ in expected], -1),
        atol=1e-6,
    )
    assert cell.alignments_indices == [2, 3]
    for index, (_, weights) in zip(
        cell.alignments_indices, expected, strict=True
    ):
        assert_allclose(states[index], weights, atol=1e-6)
    assert cell.output_size == 8 and tuple(output.shape) == (2, 8)


def test_attention_layers_per_mechanism_and_output_attention():
    layers = [keras.layers.Dense(3, name="a"), keras.layers.Dense(2, name="b")]
    mechanisms = [seq2seq.BahdanauAttention(3), seq2seq.LuongAttention()]
    cell = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(4), mechanisms, attention_layer=layers
    )
    output, states = _step(cell)
    hidden = states[0]
    contexts = [m(hidden, MEMORY, MASK)[0] for m in mechanisms]
    expected = [
        layer(ops.concatenate([c, hidden], -1))
        for layer, c in zip(layers, contexts, strict=True)
    ]
    assert_allclose(output, ops.concatenate(expected, -1), atol=1e-6)
    assert_allclose(states[cell.attention_index], output, atol=1e-6)
    hidden_cell = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(4),
        seq2seq.BahdanauAttention(3),
        attention_layer_units=2,
        output_attention=False,
    )
    output, states = _step(hidden_cell)
    assert_allclose(output, states[0])


def test_cell_input_fn_replaces_input_feeding(tmp_path):
    gru = keras.layers.GRUCell(4)
    cell = seq2seq.AttentionDecoderCell(
        gru, seq2seq.LuongAttention(), cell_input_fn=inputs_only
    )
    _, states = _step(cell)
    reference = keras.layers.GRUCell(4)
    reference.build((None, 3))
    reference.set_weights(gru.get_weights())
    expected, _ = reference(INPUTS, [np.zeros((2, 4), "float32")])
    assert_allclose(states[0], expected, atol=1e-6)
    restored = seq2seq.AttentionDecoderCell.from_config(cell.get_config())
    assert restored.cell_input_fn is inputs_only


def test_attention_fn_computes_each_attention_vector():
    cell = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(4),
        [seq2seq.LuongAttention("dot"), seq2seq.BahdanauAttention(3)],
        attention_fn=state_then_context,
    )
    # Its output depth, 2 * (4 + 4), is found by calling it.
    output, states = _step(cell)
    assert cell.attention_depth == 16 and tuple(output.shape) == (2, 16)
    hidden = states[0]
    expected = [
        ops.concatenate([hidden, m(hidden, MEMORY, MASK)[0]], -1)
        for m in cell.mechanisms
    ]
    assert_allclose(output, ops.concatenate(expected, -1), atol=1e-6)
    restored = seq2seq.AttentionDecoderCell.from_config(cell.get_config())
    assert restored.attention_fn is state_then_context


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"attention": []}, "attention=\\[\\]"),
        (
            {
                "attention_layer_units": 3,
                "attention_layer": keras.layers.Dense(3),
            },
            "not both",
        ),
        ({"attention_layer_units": [3, 3]}, "one size per mechanism \\(1\\)"),
        ({"attention_layer": ["dense"]}, "expected 1 Keras layer"),
        ({"cell_input_fn": "concat"}, "cell_input_fn='concat'"),
        ({"attention_fn": "luong"}, "attention_fn='luong'"),
    ],
)
def test_invalid_cell_options_raise(kwargs, match):
    arguments = {
        "cell": keras.layers.GRUCell(4),
        "attention": seq2seq.BahdanauAttention(),
        **kwargs,
    }
    with pytest.raises(ValueError, match=match):
        seq2seq.AttentionDecoderCell(**arguments)


def test_an_unregistered_cell_input_fn_is_refused_when_saving():
    cell = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(4),
        seq2seq.BahdanauAttention(),
        cell_input_fn=lambda inputs, attention: inputs,
    )
    with pytest.raises(ValueError, match="`cell_input_fn` callable must be"):
        cell.get_config()
