"""layers/_inputs.py: Keras's `mask` argument, the query/value/key shapes
and a single query vector as a one-step sequence."""

import numpy as np
import pytest
from keras import ops

from keras_attention.layers import _inputs

Q_MASK = np.array([[True, False]])
V_MASK = np.array([[True, True, False]])


def test_keras_masks_fold_the_mask_argument_in():
    # One mask is the query's; a list is [query_mask, value_mask].
    assert _inputs.keras_masks("L", None, None, None) == (None, None)
    query, value = _inputs.keras_masks("L", Q_MASK, None, None)
    assert query is Q_MASK and value is None
    query, value = _inputs.keras_masks("L", [Q_MASK, V_MASK], None, None)
    assert query is Q_MASK and value is V_MASK
    query, value = _inputs.keras_masks("L", [Q_MASK], None, None)
    assert query is Q_MASK and value is None
    # The explicit masks win over the call's `mask`.
    explicit = np.array([[False, True]])
    query, value = _inputs.keras_masks("L", [Q_MASK, V_MASK], explicit, None)
    assert query is explicit and value is V_MASK
    with pytest.raises(ValueError, match="L's `mask`.*a list of 3 masks"):
        _inputs.keras_masks("L", [Q_MASK, V_MASK, V_MASK], None, None)


def test_check_query_value_key_takes_good_shapes_and_names_bad_ones():
    _inputs.check_query_value_key("L", (2, 3, 4), (2, 5, 4), None)
    _inputs.check_query_value_key("L", (2, 4), (2, 5, 4), (2, 5, 6))
    _inputs.check_query_value_key("L", (None, 3, 4), (2, 5, 4), None)
    for shapes, match in [
        (((2, 3, 4, 1), (2, 5, 4), None), r"query.shape=\(2, 3, 4, 1\)"),
        (((2, 3, 4), (2, 5), None), "expects `value` of shape"),
        (((2, 3, 4), (2, 5, 4), (2, 6, 4)), "same number of positions"),
        (((2, 3, 4), (3, 5, 4), None), "same batch size"),
    ]:
        with pytest.raises(ValueError, match=match):
            _inputs.check_query_value_key("L", *shapes)


def test_a_single_query_vector_becomes_a_one_step_sequence():
    query = np.ones((2, 4), "float32")
    query_mask = np.array([True, False])
    attention_mask = np.array([[True, False, True]] * 2)
    got = _inputs.as_query_sequence(
        query, query_mask, attention_mask, False, "L"
    )
    query_3d, mask_3d, attention_3d, squeeze = got
    assert squeeze is True
    assert tuple(query_3d.shape) == (2, 1, 4)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(mask_3d), [[True], [False]]
    )
    np.testing.assert_array_equal(
        ops.convert_to_numpy(attention_3d), attention_mask[:, None, :]
    )
    sequence = np.ones((2, 3, 4), "float32")
    assert _inputs.as_query_sequence(sequence, None, None, True, "L")[3] is (
        False
    )
    with pytest.raises(ValueError, match="needs a query sequence"):
        _inputs.as_query_sequence(query, None, None, True, "L")
