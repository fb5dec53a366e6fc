"""The multi-head layers' rotary embedding: taken from an instance or a
config, and the projected heads rotated at their positions (private
module)."""

import keras
from keras import ops

from keras_attention.layers.rotary import RotaryEmbedding


def get_rotary(value):
    """A `RotaryEmbedding` (or any layer) from an instance or a config."""
    if value is None or isinstance(value, keras.layers.Layer):
        return value
    if isinstance(value, dict):
        return keras.saving.deserialize_keras_object(value)
    raise ValueError(
        "Received an invalid value for argument `rotary_embedding`, expected "
        "a keras_attention.RotaryEmbedding, its config or None. Received: "
        f"rotary_embedding={value!r}"
    )


def rotate(rotary_embedding, tensor, start_index):
    """`tensor (batch_size, T, heads, head_dim)` rotated from `start_index`
    (a scalar, or one start per sequence `(batch_size,)`)."""
    if rotary_embedding is None:
        return tensor
    rank = getattr(start_index, "shape", ())
    if len(rank) == 1:
        steps = ops.arange(ops.shape(tensor)[1], dtype="int32")
        positions = ops.cast(start_index, "int32")[:, None] + steps[None]
        return rotary_embedding(tensor, positions=positions)
    return rotary_embedding(tensor, start_index=start_index)


def rotate_pair(rotary_embedding, query, key, start_index):
    """`(query, key)`, both `(batch_size, T, heads, head_dim)`, rotated
    from `start_index`.

    Where the rotation treats every head alike (a `RotaryEmbedding` over
    the time axis and the last one) and the two have the same time steps,
    head size and dtype, the key's heads ride beside the query's through
    one call of the layer: the same numbers, half the calls, which is most
    of a decoding step's rotary time on an eager backend."""
    if rotary_embedding is None:
        return query, key
    if not _one_call(rotary_embedding, query, key):
        return (
            rotate(rotary_embedding, query, start_index),
            rotate(rotary_embedding, key, start_index),
        )
    heads = query.shape[2]
    both = ops.concatenate([query, key], axis=2)
    both = rotate(rotary_embedding, both, start_index)
    return both[:, :, :heads], both[:, :, heads:]


def _one_call(rotary_embedding, query, key):
    if not isinstance(rotary_embedding, RotaryEmbedding):
        return False
    if (rotary_embedding.sequence_axis, rotary_embedding.feature_axis) not in (
        (1, -1),
        (1, 3),
        (-3, -1),
        (-3, 3),
    ):
        return False
    if len(query.shape) != 4 or query.dtype != key.dtype:
        return False
    lengths = (query.shape[1], key.shape[1])
    heads = (query.shape[2], key.shape[2])
    known = None not in lengths and None not in heads
    return known and lengths[0] == lengths[1] and query.shape[3] == key.shape[3]
