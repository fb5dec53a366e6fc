"""The projections' initializers, regularizers and constraints: a fresh
initializer per sublayer and their config in Keras's keys (private
module)."""

import keras


def clone_initializer(initializer):
    """A fresh initializer object per sublayer, so that an unseeded
    initializer does not give every projection the same values."""
    return initializer.__class__.from_config(initializer.get_config())


def projection_config(layer):
    """The config of the projections' initializers, regularizers and
    constraints, in Keras's keys (`MultiHeadAttention`, GQA)."""
    return {
        "kernel_initializer": keras.initializers.serialize(
            layer.kernel_initializer
        ),
        "bias_initializer": keras.initializers.serialize(
            layer.bias_initializer
        ),
        "kernel_regularizer": keras.regularizers.serialize(
            layer.kernel_regularizer
        ),
        "bias_regularizer": keras.regularizers.serialize(
            layer.bias_regularizer
        ),
        "activity_regularizer": keras.regularizers.serialize(
            layer.projection_activity_regularizer
        ),
        "kernel_constraint": keras.constraints.serialize(
            layer.kernel_constraint
        ),
        "bias_constraint": keras.constraints.serialize(layer.bias_constraint),
    }
