"""Shape checks of the masks a layer is given: padding masks and
`attention_mask` against the inputs' shapes (private module)."""

import numpy as np


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


def attention_mask_rank(layer_name, attention_mask, query, value):
    """An `attention_mask` must be `(Tq, Tv)`, `(B, Tq, Tv)` or per head."""
    if attention_mask is None or len(attention_mask.shape) in (2, 3, 4):
        return
    raise ValueError(
        f"{layer_name} expects `attention_mask` of shape `(Tq, Tv)`, "
        "`(batch_size, Tq, Tv)` or `(batch_size, num_heads, Tq, Tv)`. "
        f"Received: attention_mask.shape={tuple(attention_mask.shape)}, "
        f"query.shape={tuple(query.shape)}, value.shape={tuple(value.shape)}"
    )
