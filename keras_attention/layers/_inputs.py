"""The inputs of a query/value/key layer's call: their shapes, a single
query vector as a one-step sequence, Keras's `mask` argument folded
into the query and value masks, and `keras.layers.Attention`'s list call
`[query, value(, key)]` with its masks (private module)."""

from keras import ops


def keras_masks(layer_name, mask, query_mask, value_mask):
    """`(query_mask, value_mask)` with the call's `mask` argument folded in.

    Keras fills `mask` with the Keras mask of the first input (`query`),
    as in the one-input form `layer(x)`; a list `[query_mask, value_mask]`
    (or `[query_mask]`) is `keras.layers.Attention`'s form. The explicit
    `query_mask` and `value_mask` win.
    """
    if mask is None:
        return query_mask, value_mask
    if isinstance(mask, (list, tuple)):
        if len(mask) not in (1, 2):
            raise ValueError(
                f"{layer_name}'s `mask` is the query's mask or a list "
                "[query_mask, value_mask]. Received: mask, a "
                f"{type(mask).__name__} of {len(mask)} masks"
            )
        from_list = (mask[0], mask[1] if len(mask) == 2 else None)
    else:
        from_list = (mask, None)
    return (
        from_list[0] if query_mask is None else query_mask,
        from_list[1] if value_mask is None else value_mask,
    )


def check_query_value_key(layer_name, query_shape, value_shape, key_shape):
    """Validates the shapes given to a query/value/key attention layer.

    `query` is `(B, Dq)` or `(B, Tq, Dq)`; `value` is `(B, Tv, Dv)`; `key`, if
    given, is `(B, Tv, Dk)`. Inputs of rank above 3 come here folded
    (`_leading_axes`).
    """
    if query_shape and isinstance(query_shape[0], (list, tuple)):
        raise ValueError(
            f"{layer_name} takes `query` and `value` as separate arguments, "
            f"`layer(query, value, key=None)`, not one list as "
            "`keras.layers.Attention([query, value, key])` does. Received: "
            f"a list of {len(query_shape)} tensors as `query`, shapes "
            f"{[tuple(s) for s in query_shape]}"
        )
    shapes = (
        f"query.shape={tuple(query_shape)}, value.shape={tuple(value_shape)}"
    )
    if key_shape is not None:
        shapes += f", key.shape={tuple(key_shape)}"
    if len(query_shape) not in (2, 3):
        raise ValueError(
            f"{layer_name} expects `query` of shape `(batch_size, dim)`, "
            "`(batch_size, Tq, dim)` or `(batch_size, ..., Tq, dim)`. "
            f"Received: {shapes}"
        )
    if len(value_shape) != 3:
        raise ValueError(
            f"{layer_name} expects `value` of shape `(batch_size, Tv, dim)`. "
            f"Received: {shapes}"
        )
    if key_shape is not None:
        if len(key_shape) != 3:
            raise ValueError(
                f"{layer_name} expects `key` of shape `(batch_size, Tv, dim)`."
                f" Received: {shapes}"
            )
        if (
            key_shape[1] is not None
            and value_shape[1] is not None
            and key_shape[1] != value_shape[1]
        ):
            raise ValueError(
                f"{layer_name} needs `key` and `value` with the same number "
                f"of positions (axis 1). Received: {shapes}"
            )
    batch_sizes = {
        s[0] for s in (query_shape, value_shape, key_shape or value_shape)
    } - {None}
    if len(batch_sizes) > 1:
        raise ValueError(
            f"{layer_name} needs the same batch size for all inputs. "
            f"Received: {shapes}"
        )


def as_query_sequence(
    query, query_mask, attention_mask, use_causal_mask, layer_name
):
    """Turns a single query vector `(B, D)` into a sequence `(B, 1, D)`.

    For a single query vector, `query_mask` is `(B,)` and `attention_mask`
    is `(B, Tv)`; both gain the query axis too.

    Returns `(query, query_mask, attention_mask, squeeze)` where `squeeze`
    says whether the outputs must lose their query axis again.
    """
    if len(query.shape) == 3:
        if attention_mask is not None and len(attention_mask.shape) != 3:
            raise ValueError(
                f"{layer_name} expects `attention_mask` of shape "
                "`(batch_size, Tq, Tv)` for a query sequence. Received: "
                f"attention_mask.shape={tuple(attention_mask.shape)}, "
                f"query.shape={tuple(query.shape)}"
            )
        return query, query_mask, attention_mask, False
    if use_causal_mask:
        raise ValueError(
            f"{layer_name}: `use_causal_mask=True` needs a query sequence "
            "`(batch_size, Tq, dim)`, not a single query vector. Received: "
            f"query.shape={tuple(query.shape)}"
        )
    if query_mask is not None:
        query_mask = ops.reshape(query_mask, (-1, 1))
    if attention_mask is not None:
        if len(attention_mask.shape) != 2:
            raise ValueError(
                f"{layer_name} expects `attention_mask` of shape "
                "`(batch_size, Tv)` for a single query vector. Received: "
                f"attention_mask.shape={tuple(attention_mask.shape)}, "
                f"query.shape={tuple(query.shape)}"
            )
        attention_mask = ops.expand_dims(attention_mask, 1)
    return ops.expand_dims(query, 1), query_mask, attention_mask, True


def unpack_list_call(query, value, key):
    """`keras.layers.Attention`'s list call: `[query, value(, key)]`."""
    if not isinstance(query, (list, tuple)):
        return query, value, key
    if len(query) not in (2, 3) or value is not None or key is not None:
        raise ValueError(
            "Attention layers called on a list take [query, value] or "
            "[query, value, key] (length 2 or 3) and no other `value` / "
            f"`key`. Received length: {len(query)}"
        )
    return query[0], query[1], query[2] if len(query) == 3 else None


def is_list_of_shapes(shape):
    return bool(shape) and isinstance(shape[0], (list, tuple))


def list_masks(query_mask, value_mask, key_mask, mask):
    """The masks of a list call.

    Keras fills `query_mask` with the list of the inputs' Keras masks
    when `query` is a list; `mask` may be Keras's `[query_mask,
    value_mask]` or, filled in by Keras, one mask per input (the key's,
    third, is then the key mask).
    """
    if isinstance(query_mask, (list, tuple)):
        filled = list(query_mask) + [None] * (3 - len(query_mask))
        query_mask = filled[0]
        value_mask = filled[1] if value_mask is None else value_mask
        key_mask = filled[2] if key_mask is None else key_mask
    if isinstance(mask, (list, tuple)) and len(mask) == 3:
        key_mask = mask[2] if key_mask is None else key_mask
        mask = list(mask[:2])
    return query_mask, value_mask, key_mask, mask
