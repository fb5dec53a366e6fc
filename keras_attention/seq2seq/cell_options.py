"""The options of `AttentionDecoderCell`: its cell, mechanisms,
attentional layers and callables, checked and serialised.

`attention_layer_units` / `attention_layer` become one attentional layer
per mechanism (Luong's `tanh(W_c [c_t; h_t])`), and `cell_input_fn` /
`attention_fn` are checked to be callables, before the cell keeps them;
the wrapped cell, the mechanisms and the layers go to and from a config.
"""

import keras

from keras_attention import _validation


def as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def check_cell(cell):
    """A Keras RNN cell (with `state_size`), else a `ValueError`."""
    if not hasattr(cell, "state_size") or not callable(cell):
        raise ValueError(
            "Received an invalid value for argument `cell`, expected a "
            "Keras RNN cell with a `state_size` attribute, such as "
            f"`keras.layers.GRUCell`. Received: cell={cell!r}"
        )


def mechanisms(attention, mechanism_class):
    """`attention` as a non-empty list of mechanisms, else a `ValueError`."""
    found = as_list(attention)
    if not found or not all(isinstance(m, mechanism_class) for m in found):
        raise ValueError(
            "Received an invalid value for argument `attention`, "
            "expected a keras_attention.seq2seq attention mechanism "
            "(BahdanauAttention or LuongAttention) or a list of them. "
            f"Received: attention={attention!r}"
        )
    return found


def serialize(objects):
    """The config of an object, or the list of configs of a list."""
    if isinstance(objects, (list, tuple)):
        return [keras.saving.serialize_keras_object(x) for x in objects]
    return keras.saving.serialize_keras_object(objects)


def deserialize(config):
    """Inverse of `serialize`."""
    if isinstance(config, list):
        return [keras.saving.deserialize_keras_object(x) for x in config]
    return keras.saving.deserialize_keras_object(config)


def attention_layers(units, layers, count, dtype_policy):
    """One attentional layer per mechanism, or `None` (the context).

    From `attention_layer_units` (`units`: a size, or one per mechanism)
    or `attention_layer` (`layers`: a layer, or one per mechanism) of an
    `AttentionDecoderCell` with `count` mechanisms.
    """
    if units is not None and layers is not None:
        raise ValueError(
            "Pass `attention_layer_units` or `attention_layer`, not "
            f"both. Received: attention_layer_units={units!r}, "
            f"attention_layer={layers!r}"
        )
    if layers is not None:
        layers = as_list(layers)
        if len(layers) != count or not all(
            isinstance(layer, keras.layers.Layer) for layer in layers
        ):
            raise ValueError(
                "Received an invalid value for argument "
                f"`attention_layer`, expected {count} Keras layer(s), "
                f"one per mechanism. Received: attention_layer={layers!r}"
            )
        return layers
    if units is None:
        return None
    sizes = as_list(units)
    if len(sizes) != count:
        raise ValueError(
            f"`attention_layer_units` needs one size per mechanism "
            f"({count}). Received: attention_layer_units={units!r}"
        )
    sizes = [
        _validation.positive_int("attention_layer_units", size)
        for size in sizes
    ]
    return [
        keras.layers.Dense(
            size,
            activation="tanh",
            use_bias=False,
            dtype=dtype_policy,
            name="attention_layer" if count == 1 else f"attention_layer_{i}",
        )
        for i, size in enumerate(sizes)
    ]


def check_callable(name, function, expected):
    """`function` if it is callable or `None`; `expected` describes it."""
    if function is not None and not callable(function):
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a "
            f"callable {expected} or None. Received: {name}={function!r}"
        )
    return function
