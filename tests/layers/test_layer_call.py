"""layers/_layer_call.py: one layer call's arguments, read by name."""

import numpy as np

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
