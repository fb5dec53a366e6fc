"""`keras_attention.layers` re-exports every public layer."""

import keras

import keras_attention
import keras_attention.layers

PUBLIC_LAYERS = (
    "AdditiveAttention",
    "Attention",
    "AttentionPooling",
    "GatedDeltaNet",
    "GroupQueryAttention",
    "GroupedQueryAttention",
    "HardAttention",
    "MultiHead",
    "MultiHeadAttention",
    "MultiHeadLatentAttention",
    "RelativePositionBias",
    "RotaryEmbedding",
    "SelfAttention",
    "StructuredSelfAttention",
)


def test_layers_subpackage_reexports_the_public_layers():
    for name in PUBLIC_LAYERS:
        layer = getattr(keras_attention.layers, name)
        assert layer is getattr(keras_attention, name)
        assert issubclass(layer, keras.layers.Layer)


def test_every_public_layer_of_the_package_is_listed():
    top_level = {
        name
        for name in dir(keras_attention)
        if isinstance(getattr(keras_attention, name), type)
        and issubclass(getattr(keras_attention, name), keras.layers.Layer)
    }
    assert top_level == set(PUBLIC_LAYERS)
