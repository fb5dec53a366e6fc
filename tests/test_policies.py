"""_policies.py: a layer's dtype policy with its sublayers' own, so that
a quantized sublayer is rebuilt quantized when the layer is loaded."""

import keras

from keras_attention import _policies


def _layers(sub_policy):
    layer = keras.layers.Dense(2, name="outer", dtype="float32")
    same = keras.layers.Dense(2, name="same", dtype="float32")
    other = keras.layers.Dense(2, name="proj", dtype=sub_policy)
    return layer, [same, None, other]


def test_same_policies_give_the_layer_s_own():
    layer, sublayers = _layers("float32")
    config = _policies.policy_config(layer, sublayers)
    assert config == keras.dtype_policies.serialize(layer.dtype_policy)


def test_a_sublayer_s_other_policy_goes_into_a_map_of_its_path():
    layer, sublayers = _layers("mixed_bfloat16")
    config = _policies.policy_config(layer, sublayers)
    policy = keras.dtype_policies.deserialize(config)
    assert isinstance(policy, keras.dtype_policies.DTypePolicyMap)
    assert policy.default_policy.name == "float32"
    # The pattern matches the end of the path, wherever the layer is.
    assert policy["outer/proj"].name == "mixed_bfloat16"
    assert policy["model/block/outer/proj"].name == "mixed_bfloat16"
    assert policy["outer/same"].name == "float32"
    assert policy["other/proj"].name == "float32"
