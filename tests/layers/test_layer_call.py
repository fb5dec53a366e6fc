"""layers/_layer_call.py: one layer call's arguments, read by name."""

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
