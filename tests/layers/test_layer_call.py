"""layers/_layer_call.py: one layer call's arguments, read by name, and
the shapes a `MultiHeadAttention` call is given."""

import numpy as np
import pytest

from keras_attention.layers import _layer_call
from keras_attention.layers._layer_call import LayerCall


def test_a_call_without_a_key_uses_the_value_and_names_its_masks():
    call = LayerCall("q", "v", query_mask="m", use_causal_mask=1)
    assert call.key == "v"
    assert call.mask_flags() == {
        "query_mask": "m",
        "value_mask": None,
        "key_mask": None,
        "attention_mask": None,
        "use_causal_mask": True,
    }
    assert LayerCall("q", "v", "k").key == "k"


def test_shapes_go_by_the_layers_names_of_its_inputs():
    q, v = np.zeros((2, 3, 4)), np.zeros((2, 5, 4))
    assert LayerCall(q, v).shapes() == {
        "query": (2, 3, 4),
        "value": (2, 5, 4),
        "key": (2, 5, 4),
    }
    one = LayerCall(q, q, names=("inputs",) * 3)
    assert one.shapes() == {"inputs": (2, 3, 4)}


def test_query_value_key_shapes():
    _layer_call.query_value_key_shapes((2, 3, 4), (2, 5, 6), None)
    _layer_call.query_value_key_shapes((None, 3, 4), (2, None, 6), (2, 5, 6))
    for shapes, match in [
        (((2, 3, 4), (2, 5, 6), (2, 4, 6)), "except the last one"),
        (((2, 3, 4), (2, 5, 6, 1), None), "same rank, at least 3"),
        (((2, 4), (2, 6), None), "same rank, at least 3"),
        (((2, 3, None), (2, 5, 6), None), "last axis"),
        (((2, 3, 4), (3, 5, 6), None), "same batch size"),
    ]:
        with pytest.raises(ValueError, match=match):
            _layer_call.query_value_key_shapes(*shapes)
