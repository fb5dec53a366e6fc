"""Masks as tensors on a grid, for attention written by hand: the
bands of positions (`causal_mask`, `sliding_window_mask`, `band_mask`)
and a layer's mask flags combined (`combine_masks`), each the tensor of
`ops/masks.py`'s vocabulary that the engine's dense kernels take.
"""

from keras_attention.ops import checks
from keras_attention.ops import mods
from keras_attention.ops.masks import attention_masks
from keras_attention.ops.masks import position_mask


def causal_mask(
    query_length: int, key_length: int, query_offset=0, key_offset=0
):
    """Lower-triangular boolean mask: query `i` sees keys `j <= i`.

    The same convention as `keras.layers.MultiHeadAttention`: the mask mod
    `keras_attention.ops.mods.causal()` on a grid.

    Args:
        query_length: Number of query positions `Tq`.
        key_length: Number of key positions `Tk`.
        query_offset: Position of the first query (an integer or a scalar
            tensor), for a block of a longer sequence. Defaults to `0`.
        key_offset: Position of the first key. Defaults to `0`.

    Returns:
        Boolean tensor of shape `(query_length, key_length)`.

    Example:

    >>> mask = keras_attention.ops.causal_mask(3, 3)
    >>> np.asarray(mask).astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    checks.lengths(query_length=query_length, key_length=key_length)
    return position_mask(
        mods.causal(), query_length, key_length, query_offset, key_offset
    )


def sliding_window_mask(
    query_length: int,
    key_length: int,
    window: int,
    query_offset=0,
    key_offset=0,
):
    """Band mask: query `i` sees keys `j` with `|i - j| < window`.

    The convention of `keras.layers.MultiHeadAttention(sliding_window=...)`:
    the mask mod `keras_attention.ops.mods.sliding_window(window)` on a grid.

    Returns:
        Boolean tensor of shape `(query_length, key_length)`.

    Example:

    >>> mask = keras_attention.ops.sliding_window_mask(4, 4, window=2)
    >>> np.asarray(mask).astype(int).tolist()
    [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]
    """
    checks.lengths(query_length=query_length, key_length=key_length)
    checks.lengths(window=window)
    return position_mask(
        mods.sliding_window(window),
        query_length,
        key_length,
        query_offset,
        key_offset,
    )


def band_mask(
    query_length: int,
    key_length: int,
    left=None,
    right=None,
    query_offset=0,
    key_offset=0,
):
    """Band mask: query `i` sees keys `i - left <= j <= i + right`.

    `None` leaves that side unbounded (the mask mod
    `keras_attention.ops.mods.band(left, right)` on a grid).
    `sliding_window_mask(w)` is `band_mask(left=w - 1, right=w - 1)`,
    `causal_mask` is `band_mask(right=0)`; a window of `w` keys centred on
    the query (keys `i - w // 2 <= j < i - w // 2 + w`) is `(w // 2, w - w
    // 2 - 1)` and the `w` most recent keys are `(w - 1, 0)`.

    Returns:
        Boolean tensor of shape `(query_length, key_length)`.

    Example:

    >>> mask = keras_attention.ops.band_mask(4, 4, left=1, right=0)
    >>> np.asarray(mask).astype(int).tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    """
    checks.lengths(query_length=query_length, key_length=key_length)
    checks.lengths(left=left, right=right)
    return position_mask(
        mods.band(left, right),
        query_length,
        key_length,
        query_offset,
        key_offset,
    )


def combine_masks(
    query_length,
    key_length,
    heads_axis: bool = False,
    query_offset=0,
    key_offset=0,
    **flags,
):
    """Combines a layer's mask flags into one boolean mask.

    `attention_masks(**flags).dense(...)`: the same mask that the chunked
    path builds block by block and `flex_attention` evaluates as a mask
    mod.

    Args:
        query_length: Number of query positions `Tq`.
        key_length: Number of key positions `Tk`.
        heads_axis: Whether the mask is for logits with a heads axis,
            `(batch_size, num_heads, Tq, Tk)`: the result then has one too
            (of size 1 unless `attention_mask` has one). Needed for a per-head
            `attention_mask`.
        query_offset: Position of the first query, for a block of a longer
            sequence (causal masking, windows, bands). Defaults to `0`.
        key_offset: Position of the first key. Defaults to `0`.
        **flags: The keyword arguments of `attention_masks`: `query_mask`,
            `value_mask`, `key_mask`, `attention_mask`, `use_causal_mask`,
            `sliding_window`, `band`.

    Returns:
        A boolean tensor that broadcasts to `(batch_size, Tq, Tk)` (or
        `(batch_size, num_heads, Tq, Tk)` with `heads_axis=True`), or `None`
        when no mask applies.

    Example:

    >>> mask = keras_attention.ops.combine_masks(
    ...     3, 3, value_mask=[[True, True, False]], use_causal_mask=True
    ... )
    >>> keras.ops.convert_to_numpy(mask).astype(int)
    array([[[1, 0, 0],
            [1, 1, 0],
            [1, 1, 0]]])
    """
    return attention_masks(**flags).dense(
        query_length, key_length, heads_axis, query_offset, key_offset
    )
