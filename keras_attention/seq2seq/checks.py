"""Input checks of the decoder and the decoding functions.

Each function raises a `ValueError` or `TypeError` that names the argument
and the value received, before any backend op sees the input: a batch
mismatch would otherwise end in a backend's `ConcatOp` error, a token id
past the vocabulary in a `GatherV2` error (or, on JAX, a silent clamp).
The decoder modules call them with one line each.
"""

import numbers

import keras

from keras_attention import _validation


def same_batch(layer_name: str, inputs_shape, memory_shape) -> None:
    """A `ValueError` when `inputs` and `memory` have different batch sizes.

    Args:
        layer_name: The caller's name, for the message.
        inputs_shape: Shape of the decoder inputs `(batch, target_time, d)`.
        memory_shape: Shape of the memory `(batch, source_time, depth)`.
    """
    inputs_batch, memory_batch = inputs_shape[0], memory_shape[0]
    if None in (inputs_batch, memory_batch) or inputs_batch == memory_batch:
        return
    raise ValueError(
        f"{layer_name} needs `inputs` and `memory` of the same batch size. "
        f"Received: inputs.shape={tuple(inputs_shape)}, "
        f"memory.shape={tuple(memory_shape)}"
    )


def floating_memory(layer_name: str, memory) -> None:
    """A `TypeError` for an integer (or boolean) `memory` tensor."""
    _validation.floating_inputs(layer_name, memory=memory)


def vocabulary_size(embedding, output_layer):
    """The number of token ids the decoder knows, or `None` if unknown.

    Read from a `keras.layers.Embedding` (`input_dim`) or a
    `keras.layers.Dense` output layer (`units`); any other callable says
    nothing, and the ids are then only checked to be non-negative.
    """
    if isinstance(embedding, keras.layers.Embedding):
        return int(embedding.input_dim)
    if isinstance(output_layer, keras.layers.Dense):
        return int(output_layer.units)
    return None


def token_ids(
    embedding, output_layer, start_token, end_token, pad_token
) -> None:
    """A `ValueError` for a special token that is not a valid id.

    Each token must be a Python or NumPy integer in `[0, vocabulary_size)`.

    Args:
        embedding: The decoder's embedding (see `vocabulary_size`).
        output_layer: The decoder's output layer.
        start_token: The id fed at the first step.
        end_token: The id that ends a sequence.
        pad_token: The id written after the end token.
    """
    size = vocabulary_size(embedding, output_layer)
    tokens = {
        "start_token": start_token,
        "end_token": end_token,
        "pad_token": pad_token,
    }
    for name, value in tokens.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise _validation.invalid(name, value, "an integer token id")
        if value < 0 or (size is not None and value >= size):
            expected = (
                "a non-negative token id"
                if size is None
                else f"a token id in [0, {size}) (the vocabulary size)"
            )
            raise _validation.invalid(name, value, expected)
