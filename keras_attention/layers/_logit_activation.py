"""`attention_activation`: a Keras activation applied to the logits before
the softmax, its config form (private module)."""

import keras
from keras import ops


def get(identifier):
    """`attention_activation`: `None`, or a Keras activation."""
    if identifier is None:
        return None
    return keras.activations.get(identifier)


def serialize(function):
    if function is None:
        return None
    return keras.activations.serialize(function)


def apply(logits, function):
    """`function(logits)` in the logits dtype (float32 for half inputs)."""
    if function is None:
        return logits
    return ops.cast(function(logits), logits.dtype)
