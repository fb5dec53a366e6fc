"""Attention masks: one boolean mask from every source of masking.

Masks are boolean with `True` meaning "attend". Every layer, seq2seq
mechanism and the chunked path build their masks here, so that a padding
mask, an explicit `attention_mask`, causal masking and a sliding window
mean the same thing everywhere.
"""

from keras import ops

from keras_attention.ops import checks


def _positions(length, offset):
    return ops.arange(length) + offset


def causal_mask(
    query_length: int, key_length: int, query_offset=0, key_offset=0
):
    """Lower-triangular boolean mask: query `i` sees keys `j <= i`.

    The same convention as `keras.layers.MultiHeadAttention`.

    Args:
        query_length: Number of query positions `Tq`.
        key_length: Number of key positions `Tk`.
        query_offset: Position of the first query (an integer or a scalar
            tensor), for a block of a longer sequence. Defaults to `0`.
        key_offset: Position of the first key. Defaults to `0`.

    Returns:
        Boolean tensor of shape `(query_length, key_length)`.
    """
    checks.lengths(query_length=query_length, key_length=key_length)
    rows = ops.expand_dims(_positions(query_length, query_offset), -1)
    cols = ops.expand_dims(_positions(key_length, key_offset), 0)
    return ops.greater_equal(rows, cols)


def sliding_window_mask(
    query_length: int,
    key_length: int,
    window: int,
    query_offset=0,
    key_offset=0,
):
    """Band mask: query `i` sees keys `j` with `|i - j| < window`.

    The convention of `keras.layers.MultiHeadAttention(sliding_window=...)`.

    Returns:
        Boolean tensor of shape `(query_length, key_length)`.
    """
    checks.lengths(query_length=query_length, key_length=key_length)
    checks.lengths(window=window)
    rows = ops.expand_dims(_positions(query_length, query_offset), -1)
    cols = ops.expand_dims(_positions(key_length, key_offset), 0)
    return ops.less(ops.abs(rows - cols), window)


def band_mask(
    query_length: int,
    key_length: int,
    left=None,
    right=None,
    query_offset=0,
    key_offset=0,
):
    """Band mask: query `i` sees keys `i - left <= j <= i + right`.

    `None` leaves that side unbounded. `sliding_window_mask(w)` is
    `band_mask(left=w - 1, right=w - 1)`, `causal_mask` is
    `band_mask(right=0)`; a window of `w` keys centred on the query (keys
    `i - w // 2 <= j < i - w // 2 + w`) is `(w // 2, w - w // 2 - 1)` and
    the `w` most recent keys are `(w - 1, 0)`.

    Returns:
        Boolean tensor of shape `(query_length, key_length)`.
    """
    checks.lengths(query_length=query_length, key_length=key_length)
    checks.lengths(left=left, right=right)
    rows = ops.expand_dims(_positions(query_length, query_offset), -1)
    cols = ops.expand_dims(_positions(key_length, key_offset), 0)
    offset = cols - rows
    mask = ops.ones((query_length, key_length), dtype="bool")
    if left is not None:
        mask = ops.logical_and(mask, ops.greater_equal(offset, -left))
    if right is not None:
        mask = ops.logical_and(mask, ops.less_equal(offset, right))
    return mask


def _and(mask, other):
    other = ops.cast(other, "bool")
    return other if mask is None else ops.logical_and(mask, other)


def combine_masks(
    query_length,
    key_length,
    query_mask=None,
    value_mask=None,
    key_mask=None,
    attention_mask=None,
    use_causal_mask: bool = False,
    sliding_window: int | None = None,
    heads_axis: bool = False,
    query_offset=0,
    key_offset=0,
    band=None,
):
    """Combines the padding, explicit, causal and window masks into one.

    Args:
        query_length: Number of query positions `Tq`.
        key_length: Number of key positions `Tk`.
        query_mask: Optional `(batch_size, Tq)`; a masked query gets no key.
        value_mask: Optional `(batch_size, Tk)`.
        key_mask: Optional `(batch_size, Tk)`, combined with `value_mask`.
        attention_mask: Optional `(batch_size, Tq, Tk)` or `(Tq, Tk)`; with
            `heads_axis=True` also `(batch_size, num_heads, Tq, Tk)`.
        use_causal_mask: Whether query `i` may only see keys `j <= i`.
        sliding_window: Optional positive integer: query `i` only sees keys
            `j` with `|i - j| < sliding_window`.
        heads_axis: Whether the mask is for logits with a heads axis,
            `(batch_size, num_heads, Tq, Tk)`: the result then has one too
            (of size 1 unless `attention_mask` has one).
        query_offset: Position of the first query, for a block of a longer
            sequence (causal and window masks). Defaults to `0`.
        key_offset: Position of the first key. Defaults to `0`.
        band: Optional pair `(left, right)`: query `i` only sees keys
            `i - left <= j <= i + right` (`band_mask`; `None` on a side
            for no limit). Defaults to `None`.

    Returns:
        A boolean tensor that broadcasts to `(batch_size, Tq, Tk)` (or
        `(batch_size, num_heads, Tq, Tk)` with `heads_axis=True`), or `None`
        when no mask applies.
    """
    per_head = None
    if attention_mask is not None and len(attention_mask.shape) == 4:
        if not heads_axis:
            raise ValueError(
                "An `attention_mask` with a heads axis, `(batch_size, "
                "num_heads, Tq, Tk)`, needs `heads_axis=True`. Received: "
                f"attention_mask.shape={tuple(attention_mask.shape)}"
            )
        # Combined after the `(B, Tq, Tk)` masks have gained their heads
        # axis: aligned from the right, batch would meet heads.
        per_head, attention_mask = attention_mask, None
    mask = None
    for padding in (value_mask, key_mask):
        if padding is not None:
            mask = _and(mask, ops.expand_dims(padding, -2))
    if query_mask is not None:
        mask = _and(mask, ops.expand_dims(query_mask, -1))
    if attention_mask is not None:
        mask = _and(mask, attention_mask)
    if use_causal_mask:
        mask = _and(
            mask,
            causal_mask(query_length, key_length, query_offset, key_offset),
        )
    if band is not None:
        mask = _and(
            mask,
            band_mask(
                query_length,
                key_length,
                band[0],
                band[1],
                query_offset,
                key_offset,
            ),
        )
    if sliding_window is not None:
        band = sliding_window_mask(
            query_length, key_length, sliding_window, query_offset, key_offset
        )
        mask = _and(mask, band)
    if heads_axis and mask is not None and len(mask.shape) == 3:
        mask = ops.expand_dims(mask, -3)
    if per_head is not None:
        mask = _and(mask, per_head)
    return mask
