"""Inputs of rank above 3, `(batch, ..., T, dim)`, as `keras.layers.Attention`
takes them: the axes before `(T, dim)` are folded into the batch for the
call and unfolded from its outputs (private module)."""

from keras import ops

# The masks of a call and how many axes each has after the leading ones:
# `(..., Tq)`, `(..., Tv)`, `(..., Tv)`, `(..., Tq, Tv)`, `(..., Tq, Tv)`.
_TRAILING = {
    "query_mask": 1,
    "value_mask": 1,
    "key_mask": 1,
    "attention_mask": 2,
    "attention_bias": 2,
}


def is_folded(shape):
    """Whether a query of this shape has axes to fold (rank above 3)."""
    return shape is not None and len(shape) > 3


def _shapes(query, value, key):
    text = f"query.shape={tuple(query.shape)}, value.shape={tuple(value.shape)}"
    if key is not None:
        text += f", key.shape={tuple(key.shape)}"
    return text


def check(layer_name, query_shape, value_shape, key_shape=None):
    """Value and key of the query's rank and leading axes, else a
    `ValueError` naming the shapes."""
    rank = len(query_shape)
    leading = tuple(query_shape[:-2])
    for name, shape in (("value", value_shape), ("key", key_shape)):
        if shape is None:
            continue
        if len(shape) != rank:
            raise ValueError(
                f"{layer_name} takes a query of rank {rank}, `(batch_size, "
                f"..., Tq, dim)`, with a `{name}` of the same rank, `("
                f"batch_size, ..., Tv, dim)`. Received: query.shape="
                f"{tuple(query_shape)}, {name}.shape={tuple(shape)}"
            )
        for q_size, size in zip(leading, shape[:-2], strict=True):
            if q_size is not None and size is not None and q_size != size:
                raise ValueError(
                    f"{layer_name} needs `{name}` with the query's axes "
                    f"before `(Tq, dim)`. Received: query.shape="
                    f"{tuple(query_shape)}, {name}.shape={tuple(shape)}"
                )


def folded_shape(shape):
    """`(batch, ..., T, dim)` as `(None, T, dim)`, for `build`."""
    return (None,) + tuple(shape[-2:])


def _fold(tensor, trailing):
    shape = ops.shape(tensor)
    return ops.reshape(tensor, (-1,) + tuple(shape[len(shape) - trailing :]))


def _fold_mask(layer_name, name, tensor, query, value):
    """A mask or bias of the call with its leading axes folded."""
    rank = len(query.shape) - 2 + _TRAILING[name]
    if name == "attention_bias":
        full = tuple(ops.shape(query)[:-1]) + (ops.shape(value)[-2],)
        return _fold(ops.broadcast_to(tensor, full), 2)
    if len(tensor.shape) != rank:
        expected = {"query_mask": "Tq", "attention_mask": "Tq, Tv"}.get(
            name, "Tv"
        )
        raise ValueError(
            f"{layer_name} expects `{name}` of shape `(batch_size, ..., "
            f"{expected})` for a query of rank {len(query.shape)}. Received: "
            f"{name}.shape={tuple(tensor.shape)}, {_shapes(query, value, None)}"
        )
    return _fold(tensor, _TRAILING[name])


def call(layer_name, call_fn, query, value, key, masks, **kwargs):
    """`call_fn` on the inputs with their leading axes folded.

    `masks` maps the call's mask and bias arguments (`_TRAILING`'s names)
    to tensors or `None`; a `value` of `None` stays `None` (the layer's
    self-attention). Each output of `call_fn`, `(batch * ..., T,
    ...)`, gets the query's leading axes back; `kwargs` pass through.
    """
    keys = query if value is None else value
    check(
        layer_name,
        query.shape,
        keys.shape,
        None if key is None else key.shape,
    )
    leading = tuple(ops.shape(query)[:-2])
    folded = {
        name: None
        if tensor is None
        else _fold_mask(layer_name, name, tensor, query, keys)
        for name, tensor in masks.items()
    }
    outputs = call_fn(
        _fold(query, 2),
        None if value is None else _fold(value, 2),
        None if key is None else _fold(key, 2),
        **folded,
        **kwargs,
    )

    def unfold(output):
        return ops.reshape(output, leading + tuple(ops.shape(output)[1:]))

    if isinstance(outputs, tuple):
        return tuple(unfold(output) for output in outputs)
    return unfold(outputs)
