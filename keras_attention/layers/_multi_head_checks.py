"""Argument and shape checks of the multi-head layers (private module)."""


def output_shape_tuple(output_shape):
    """`output_shape` as a tuple of positive integers, or `None`."""
    if output_shape is None:
        return None
    shape = (output_shape,) if isinstance(output_shape, int) else output_shape
    if (
        not isinstance(shape, (tuple, list))
        or not shape
        or any(
            isinstance(d, bool) or not isinstance(d, int) or d <= 0
            for d in shape
        )
    ):
        raise ValueError(
            f"Invalid `output_shape`: {output_shape!r}. When specified, the "
            "`output_shape` should be of type tuple, list, or int, of "
            f"positive integers. Received: output_shape={output_shape!r}"
        )
    return tuple(shape)


def attention_axes_tuple(attention_axes):
    """`attention_axes` as a tuple of integers, or `None` (Keras's rules)."""
    if attention_axes is None:
        return None
    axes = (
        (attention_axes,) if isinstance(attention_axes, int) else attention_axes
    )
    if not isinstance(axes, (tuple, list)) or any(
        isinstance(a, bool) or not isinstance(a, int) for a in axes
    ):
        raise ValueError(
            "`attention_axes` must be an int, list, or tuple. Received: "
            f"attention_axes={attention_axes!r}"
        )
    return tuple(axes)


def free_axes(axes, query_shape, value_shape):
    """N-D inputs: static middle axes, the same free axes in query and value."""
    if axes is None or axes.is_plain:
        return
    middle = range(1, len(query_shape) - 1)
    shapes = (
        f"query.shape={tuple(query_shape)}, value.shape={tuple(value_shape)}"
    )
    if any(query_shape[a] is None or value_shape[a] is None for a in middle):
        raise ValueError(
            "MultiHeadAttention over `attention_axes` of N-D inputs needs "
            f"the axes between batch and features to be known. Received: "
            f"{shapes}"
        )
    if any(query_shape[a] != value_shape[a] for a in axes.free):
        raise ValueError(
            "MultiHeadAttention needs `query` and `value` with the same "
            f"sizes on the axes not attended over {axes.free}. Received: "
            f"{shapes}"
        )
