"""Helpers shared by the attention layers (private)."""

import keras
import numpy as np
from keras import ops

from keras_attention import _validation
from keras_attention import ops as ka_ops

check_rate = _validation.rate


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
    given, is `(B, Tv, Dk)`.
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
            f"{layer_name} expects `query` of shape `(batch_size, dim)` or "
            f"`(batch_size, Tq, dim)`. Received: {shapes}"
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


def _static_shape(mask):
    return tuple(getattr(mask, "shape", None) or np.shape(mask))


def _fits(mask_shape, expected, broadcast):
    """Whether `mask_shape` matches `expected` (`None` matches any size)."""
    if len(mask_shape) != len(expected):
        return False
    return all(
        m is None or e is None or m == e or (broadcast and m == 1)
        for m, e in zip(mask_shape, expected, strict=True)
    )


def check_mask_shape(layer_name, name, mask, expected, inputs, broadcast=False):
    """A `ValueError` naming `name` and both shapes unless `mask` fits.

    `expected` is the mask's shape from the inputs' shapes (`None` for an
    unknown size); `inputs` describes those, e.g. `{"value": (2, 6, 4)}`.
    With `broadcast`, a mask axis of size 1 fits any size.
    """
    if mask is None:
        return
    mask_shape = _static_shape(mask)
    if _fits(mask_shape, tuple(expected), broadcast):
        return
    sizes = ", ".join(f"{k}.shape={tuple(v)}" for k, v in inputs.items())
    raise ValueError(
        f"{layer_name} expects `{name}` of shape {tuple(expected)}"
        f"{' (or 1 on any axis)' if broadcast else ''} from {sizes}. "
        f"Received: {name}.shape={mask_shape}, {sizes}"
    )


def check_padding_masks(layer_name, query_shape, value_shape, key_shape, masks):
    """`query_mask`, `value_mask`, `key_mask`: the inputs' shapes less depth.

    `masks` maps argument names to masks (or `None`); unknown names are
    ignored. A Keras mask always fits; these catch explicit masks.
    """
    key_shape = value_shape if key_shape is None else key_shape
    for name, shape, input_name in (
        ("query_mask", query_shape, "query"),
        ("value_mask", value_shape, "value"),
        ("key_mask", key_shape, "key"),
    ):
        check_mask_shape(
            layer_name,
            name,
            masks.get(name),
            tuple(shape)[:-1],
            {input_name: shape},
        )


def check_heads_masks(layer_name, shapes, masks, num_heads):
    """The padding masks and `attention_mask` of a multi-head layer."""
    query_shape, value_shape, key_shape = shapes
    check_padding_masks(layer_name, query_shape, value_shape, key_shape, masks)
    if len(query_shape) == 3:
        check_attention_mask(
            layer_name,
            masks.get("attention_mask"),
            query_shape,
            value_shape,
            num_heads,
        )


def check_attention_mask(
    layer_name,
    attention_mask,
    query_shape,
    value_shape,
    num_heads=None,
    inputs=None,
):
    """`attention_mask`: `(B, Tq, Tv)`, or `(Tq, Tv)` / `(B, heads, Tq, Tv)`
    for the multi-head layers (`num_heads` given); size-1 axes broadcast.

    For a single query vector `(B, dim)` it is `(B, Tv)`. The rank itself is
    checked by the layers, with their own words. `inputs` names the
    shapes in the message (default: `query` and `value`).
    """
    if attention_mask is None:
        return
    batch, tv = query_shape[0], value_shape[1]
    if len(query_shape) == 2:
        by_rank = {2: (batch, tv)}
    else:
        tq = query_shape[1]
        by_rank = {3: (batch, tq, tv)}
        if num_heads is not None:
            by_rank.update({2: (tq, tv), 4: (batch, num_heads, tq, tv)})
    expected = by_rank.get(len(_static_shape(attention_mask)))
    if expected is not None:
        check_mask_shape(
            layer_name,
            "attention_mask",
            attention_mask,
            expected,
            inputs or {"query": query_shape, "value": value_shape},
            broadcast=True,
        )


def penalty(value):
    """`penalty_coefficient` as a `float` if it is finite and >= 0."""
    return _validation.non_negative("penalty_coefficient", value, finite=True)


def activation(identifier):
    """`attention_activation`: `None`, or a Keras activation."""
    if identifier is None:
        return None
    return keras.activations.get(identifier)


def serialize_activation(function):
    if function is None:
        return None
    return keras.activations.serialize(function)


def activate(logits, function):
    """`function(logits)` in the logits dtype (float32 for half inputs)."""
    if function is None:
        return logits
    return ops.cast(function(logits), logits.dtype)


def local_window_band(width, history_only):
    """keras-self-attention's local window as a `(left, right)` band.

    Centred, query `i` sees keys `i - width // 2 <= j < i - width // 2 +
    width` (for an even width one key more before the query than after
    it); with `history_only` (a causal layer) `i - width < j <= i`. The
    band of `keras_attention.ops.band_mask` and of the chunked path.
    """
    if history_only:
        return (width - 1, 0)
    return (width // 2, width - width // 2 - 1)


def local_window_mask(query_length, key_length, width, history_only):
    """keras-self-attention's local window `(Tq, Tk)`: `True` = attend."""
    left, right = local_window_band(width, history_only)
    return ka_ops.band_mask(query_length, key_length, left, right)


def and_mask(mask, other):
    """`mask & other`, either possibly `None`."""
    if other is None:
        return mask
    if mask is None:
        return other
    return ops.logical_and(ops.cast(mask, "bool"), other)


def check_window_query(layer_name, single_query):
    """A local window needs query positions: not a single query vector."""
    if single_query:
        raise ValueError(
            f"{layer_name}: `attention_width` needs a query sequence "
            "`(batch_size, Tq, dim)` whose positions line up with the "
            "values', not a single query vector."
        )


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
