"""Input checks of the decoder and the decoding functions.

Each function raises a `ValueError` or `TypeError` that names the argument
and the value received, before any backend op sees the input: a batch
mismatch would otherwise end in a backend's `ConcatOp` error, a token id
past the vocabulary in a `GatherV2` error (or, on JAX, a silent clamp).
The decoder modules call them with one line each.
"""

import numbers

import keras
import numpy as np

from keras_attention import _validation
from keras_attention.ops import checks as ops_checks


def same_batch(layer_name: str, inputs_shape, memory_shape) -> None:
    """A `ValueError` for decoder inputs of another batch size or no step.

    Args:
        layer_name: The caller's name, for the message.
        inputs_shape: Shape of the decoder inputs `(batch, target_time, d)`.
        memory_shape: Shape of the memory `(batch, source_time, depth)`.
    """
    batch_sizes(layer_name, inputs=inputs_shape, memory=memory_shape)
    if inputs_shape[1] == 0:
        raise ValueError(
            f"{layer_name} needs at least one target step. Received: "
            f"inputs.shape={tuple(inputs_shape)}"
        )


def batch_sizes(layer_name: str, **shapes) -> None:
    """A `ValueError` when the named shapes have different batch sizes."""
    sizes = {shape[0] for shape in shapes.values() if shape[0] is not None}
    if len(sizes) > 1:
        received = ", ".join(
            f"{name}.shape={tuple(shape)}" for name, shape in shapes.items()
        )
        raise ValueError(
            f"{layer_name} needs inputs of the same batch size. "
            f"Received: {received}"
        )


def floating_memory(layer_name: str, memory) -> None:
    """A `TypeError` for an integer (or boolean) `memory` tensor."""
    ops_checks.floating(layer_name, memory=memory)


def floating(layer_name: str, **tensors) -> None:
    """A `TypeError` for the first of `tensors` that is not floating-point."""
    ops_checks.floating(layer_name, **tensors)


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


def decoder_parts(cell, embedding, output_layer, memory, seed=None):
    """A `ValueError` for a decoding's cell, layers or seed of a wrong type.

    Also a `TypeError` for a memory that is not floating-point, and a
    `ValueError` for an empty batch (nothing to decode).

    Args:
        cell: Must be an `AttentionDecoderCell` (duck-typed: it has the
            `get_initial_state(memory=...)` and `alignments_index` that
            decoding uses).
        embedding: Must be callable.
        output_layer: Must be callable.
        memory: The encoder outputs.
        seed: `None`, an integer or a `keras.random.SeedGenerator`.
    """
    if not (
        callable(getattr(cell, "get_initial_state", None))
        and hasattr(cell, "alignments_index")
    ):
        raise _validation.invalid(
            "cell", cell, "a keras_attention.seq2seq.AttentionDecoderCell"
        )
    _validation.layer_or_callable("embedding", embedding)
    _validation.layer_or_callable("output_layer", output_layer)
    _validation.seed("seed", seed)
    floating_memory(type(cell).__name__, memory)
    shape = tuple(getattr(memory, "shape", ()))
    if shape and shape[0] == 0:
        raise ValueError(
            "Decoding needs at least one example in `memory`. Received: "
            f"memory.shape={shape}"
        )


def alignment_inputs(p_choose, previous_alignments, mode, modes) -> tuple:
    """`monotonic_alignments`' inputs: floating, both `(batch, time)`.

    Returns:
        The two as tensors (NumPy arrays do not mix with PyTorch's).
    """
    if mode not in modes:
        raise _validation.invalid("mode", mode, f"one of {list(modes)}")
    ops_checks.floating(
        "monotonic_alignments",
        p_choose=p_choose,
        previous_alignments=previous_alignments,
    )
    shapes = (tuple(p_choose.shape), tuple(previous_alignments.shape))
    if len(shapes[0]) != 2 or shapes[0] != shapes[1] or 0 in shapes[0]:
        raise ValueError(
            "monotonic_alignments expects `p_choose` and "
            "`previous_alignments` of one shape `(batch_size, time)`, with "
            f"time > 0. Received: p_choose.shape={shapes[0]}, "
            f"previous_alignments.shape={shapes[1]}"
        )
    return (
        keras.ops.convert_to_tensor(p_choose),
        keras.ops.convert_to_tensor(previous_alignments),
    )


def token_id_inputs(layer_name: str, name: str, ids, vocabulary) -> None:
    """Token ids `(batch, time)`, time > 0, integers in `[0, vocabulary)`.

    Args:
        layer_name: The caller's name, for the message.
        name: The argument's name.
        ids: The ids (a NumPy array or a tensor; symbolic ones pass).
        vocabulary: The number of ids, or `None` if unknown.
    """
    dtype = getattr(ids, "dtype", None)
    shape = tuple(getattr(ids, "shape", ()))
    if dtype is not None:
        if isinstance(dtype, np.dtype) and dtype.kind in "USO":
            dtype = "string"
        if not keras.backend.standardize_dtype(dtype).startswith(
            ("int", "uint")
        ):
            raise TypeError(
                f"{layer_name} expects integer token ids as `{name}`. "
                f"Received: {name}.dtype={dtype}, {name}.shape={shape}"
            )
    if len(shape) != 2 or shape[1] == 0:
        raise ValueError(
            f"{layer_name} expects `{name}` of shape `(batch_size, time)` "
            f"with time > 0. Received: {name}.shape={shape}"
        )
    values = _concrete(ids)
    if values is None or not values.size:
        return
    if values.min() < 0 or (
        vocabulary is not None and values.max() >= vocabulary
    ):
        raise ValueError(
            f"{layer_name} expects `{name}` in [0, {vocabulary}) (the "
            f"vocabulary size). Received: {name} with min {values.min()} "
            f"and max {values.max()}"
        )


def logits_2d(log_probs) -> None:
    """`filter_logits`' input: floating `(batch_size, vocabulary_size)`."""
    ops_checks.floating("filter_logits", log_probs=log_probs)
    shape = tuple(log_probs.shape)
    if len(shape) != 2 or shape[1] == 0:
        raise ValueError(
            "filter_logits expects `log_probs` of shape `(batch_size, "
            f"vocabulary_size)`. Received: log_probs.shape={shape}"
        )


def _concrete(tensor):
    """`tensor`'s values as NumPy, or `None` for a traced (symbolic) one."""
    if isinstance(tensor, np.ndarray):
        return tensor
    if isinstance(tensor, keras.KerasTensor):
        return None
    try:
        return keras.ops.convert_to_numpy(tensor)
    except Exception:  # noqa: BLE001 - a graph tensor or a JAX tracer
        return None
