"""AttentionDecoder: teacher forcing over a target, padding, saving, errors.

Moved from `tests/seq2seq/test_cell.py` with the layer (`seq2seq/cell.py`
-> `seq2seq/decoder.py`); the step-by-step agreement with the cell stays
there.
"""

import os
import tempfile

import keras
import numpy as np
import pytest

from keras_attention import seq2seq
from tests.layer_basics import check_layer_basics
from tests.layer_basics import normal_arrays
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import to_numpy
from tests.seq2seq._cells import decoder_cell as _cell

INPUTS, MEMORY = normal_arrays(1, (2, 4, 3), (2, 5, 6))
MEMORY_MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
CONFIGS = [
    ("gru", {}),
    ("gru", {"attention_layer_units": 7}),
    ("lstm", {"attention_layer_units": 7}),
    ("gru", {"output_attention": False}),
]


def test_padding_values_of_the_memory_do_not_change_outputs():
    decoder = seq2seq.AttentionDecoder(_cell(), return_alignments=True)
    outputs, alignments = decoder(INPUTS, MEMORY, memory_mask=MEMORY_MASK)
    changed = MEMORY.copy()
    changed[~MEMORY_MASK] = 1e3
    outputs2, alignments2 = decoder(INPUTS, changed, memory_mask=MEMORY_MASK)
    assert_allclose(outputs2, outputs, atol=1e-5)
    assert_allclose(alignments2, alignments, atol=1e-6)
    assert np.all(to_numpy(alignments)[0, :, 3:] == 0)


def test_target_padding_steps_emit_zeros():
    ids = np.array([[3, 4, 0, 0], [1, 2, 3, 4]])
    embedded = keras.layers.Embedding(5, 3, mask_zero=True)(ids)
    decoder = seq2seq.AttentionDecoder(_cell(), return_alignments=True)
    outputs, alignments = decoder(embedded, MEMORY)
    assert np.all(to_numpy(outputs)[0, 2:] == 0)
    assert np.all(to_numpy(alignments)[0, 2:] == 0)
    assert np.all(to_numpy(outputs)[1] != 0)


def test_target_padding_step_leaves_the_state_unchanged():
    # A padded step in the middle is skipped: the steps after it see the
    # state of the last real step, as if the padding were not there.
    decoder = seq2seq.AttentionDecoder(_cell(), return_alignments=True)
    mask = np.array([[1, 0, 1, 1], [1, 1, 1, 1]], dtype=bool)
    outputs, alignments = decoder(
        INPUTS, MEMORY, memory_mask=MEMORY_MASK, inputs_mask=mask
    )
    kept = INPUTS[:1, [0, 2, 3]]
    want, want_alignments = decoder(
        kept, MEMORY[:1], memory_mask=MEMORY_MASK[:1]
    )
    assert_allclose(to_numpy(outputs)[:1, [0, 2, 3]], want, atol=1e-5)
    assert_allclose(
        to_numpy(alignments)[:1, [0, 2, 3]], want_alignments, atol=1e-6
    )
    assert np.all(to_numpy(outputs)[0, 1] == 0)


def test_fully_masked_memory_is_finite():
    decoder = seq2seq.AttentionDecoder(_cell(), return_alignments=True)
    mask = np.zeros((2, 5), dtype=bool)
    outputs, alignments = decoder(INPUTS, MEMORY, memory_mask=mask)
    assert np.all(np.isfinite(to_numpy(outputs)))
    assert np.all(to_numpy(alignments) == 0)


@pytest.mark.parametrize("kind, kwargs", CONFIGS[:3])
def test_attention_decoder_basics(kind, kwargs):
    check_layer_basics(
        seq2seq.AttentionDecoder,
        {"cell": _cell(kind, **kwargs), "return_alignments": True},
        [INPUTS, MEMORY],
        expected_output_shape=[(2, 4, 7 if kwargs else 6), (2, 4, 5)],
        rtol=1e-4,
        atol=1e-5,
    )


def test_functional_model_saves_and_loads_in_safe_mode():
    targets = keras.Input((None,), dtype="int32")
    source = keras.Input((None, 6))
    embedded = keras.layers.Embedding(9, 3, mask_zero=True)(targets)
    outputs, alignments = seq2seq.AttentionDecoder(
        _cell(attention=seq2seq.LuongAttention("general")),
        return_alignments=True,
    )(embedded, source)
    model = keras.Model([targets, source], [outputs, alignments])
    ids = np.array([[1, 2, 3, 0], [4, 5, 6, 7]])
    expected = model.predict([ids, MEMORY], verbose=0)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "decoder.keras")
        model.save(path)
        loaded = keras.saving.load_model(path, safe_mode=True)
    got = loaded.predict([ids, MEMORY], verbose=0)
    for got_i, want in zip(got, expected, strict=True):
        assert_allclose(got_i, want, atol=1e-6)


def test_decoder_with_another_cell_raises():
    with pytest.raises(ValueError, match="expected an AttentionDecoderCell"):
        seq2seq.AttentionDecoder(keras.layers.GRUCell(3))


def test_decoder_invalid_return_alignments_raises():
    with pytest.raises(ValueError, match="return_alignments=1"):
        seq2seq.AttentionDecoder(_cell(), return_alignments=1)


def test_decoder_inputs_of_wrong_rank_raise_naming_both_shapes():
    with pytest.raises(ValueError, match=r"inputs.shape=\(2, 3\)"):
        seq2seq.AttentionDecoder(_cell())(INPUTS[:, 0], MEMORY)
