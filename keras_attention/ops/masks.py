"""Attention masks: one vocabulary for every source of masking.

Masks are boolean with `True` meaning "attend". A layer's mask flags
(padding masks, an explicit `attention_mask`, causal masking, sliding
windows and bands) become one `AttentionMasks` in `attention_masks`: the
padding and explicit masks as tensors, every rule of positions as one band
mask mod (`keras_attention.ops.mods.band`, merged from `causal()`,
`sliding_window(w)` and `band(left, right)` by their `limits`). The dense
and fused paths take its `dense` tensor, the chunked path the same tensor
block by block (with block offsets) and the band's limits to skip whole
blocks, and `flex_attention` its `mask_mod`. `and_all` is the one AND of
mask tensors.
"""

import functools

from keras import ops

from keras_attention.ops import _eager
from keras_attention.ops import checks
from keras_attention.ops import mods
from keras_attention.ops.mask_mods import MaskCombination
from keras_attention.ops.mask_mods import and_masks
from keras_attention.ops.mask_mods import keep


def and_all(*masks):
    """The AND of boolean masks that broadcast together; `None`s skipped.

    Args:
        *masks: Boolean (or 0/1) tensors, or `None`.

    Returns:
        A boolean tensor, or `None` when every mask is `None`.
    """
    result = None
    for mask in masks:
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        result = mask if result is None else ops.logical_and(result, mask)
    return result


def merge_limits(*limits):
    """The band `(left, right)` inside every band of `limits`.

    Each of `limits` is a `(left, right)` pair (`None` on an open side) or
    `None` (no limit); the tighter side wins.
    """
    left = right = None
    for pair in limits:
        if pair is None:
            continue
        if pair[0] is not None:
            left = pair[0] if left is None else min(left, pair[0])
        if pair[1] is not None:
            right = pair[1] if right is None else min(right, pair[1])
    return left, right


def band_limits(mod):
    """`(left, right)` of a mask mod that is a band of positions (an AND
    of bands included), else `None`."""
    if isinstance(mod, MaskCombination):
        if mod.op != "and" or not mod.mask_mods:
            return None
        limits = [band_limits(m) for m in mod.mask_mods]
        return None if None in limits else merge_limits(*limits)
    return getattr(mod, "limits", None)


def position_mask(
    mask_mod,
    query_length,
    key_length,
    query_offset=0,
    key_offset=0,
    key_positions=None,
):
    """A mask mod of positions only, evaluated on a `(Tq, Tk)` grid.

    Query `r` of the grid is position `query_offset + r`, key `c` is
    `key_offset + c` (offsets: integers or scalar tensors, for a block of
    a longer sequence), or `key_positions[c] + key_offset` with a table
    of the keys' positions; the mod's batch and head are `0`. With one
    query offset per sequence (`(batch_size,)`) or a table per sequence
    (`(batch_size, Tk)`) the grid is per sequence.

    Returns:
        Boolean tensor of shape `(query_length, key_length)`, or
        `(batch_size, query_length, key_length)` per sequence.
    """
    mod = mods.shifted(mask_mod, query_offset, key_offset, key_positions)
    rows = ops.expand_dims(ops.arange(query_length), -1)
    cols = ops.expand_dims(ops.arange(key_length), 0)
    if len(getattr(query_offset, "shape", ())) == 1:
        batch_size = ops.shape(query_offset)[0]
    elif key_positions is not None and len(key_positions.shape) == 2:
        batch_size = ops.shape(key_positions)[0]
    else:
        return keep(mod, 0, 0, rows, cols)
    batch = ops.arange(batch_size)[:, None, None]
    return keep(mod, batch, 0, rows[None], cols[None])


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


class AttentionMasks:
    """The masks of one attention call, from `attention_masks`.

    Attributes:
        query_mask: Boolean `(batch_size, Tq)` or `None`.
        key_mask: Boolean `(batch_size, Tk)` (the value and key masks
            ANDed) or `None`.
        attention_mask: The explicit mask, `(Tq, Tk)`, `(batch_size, Tq,
            Tk)` or per head `(batch_size, heads, Tq, Tk)`, or `None`.
        band: The one `keras_attention.ops.mods.band` of every rule of
            positions (causal, windows, bands), or `None`: a mask mod
            whose `limits` say it all (`attention_masks` gives one object
            per pair of limits, shared by every call: mods are values).
        mask_mods: Further mask mods (for `flex_attention`).
    """

    def __init__(
        self,
        query_mask=None,
        key_mask=None,
        attention_mask=None,
        band=None,
        mask_mods=(),
    ):
        if band is not None and not isinstance(
            getattr(band, "limits", None), tuple
        ):
            # `dense` reads the band by its limits only.
            raise ValueError(
                "`AttentionMasks` takes as `band` a band of positions "
                "(`mods.band`, `mods.causal()`, `mods.sliding_window(w)`: "
                "a mask mod with `limits`); other mask mods go in "
                f"`mask_mods`. Received: band={band!r}"
            )
        self.query_mask = query_mask
        self.key_mask = key_mask
        self.attention_mask = attention_mask
        self.band = band
        self.mask_mods = tuple(m for m in mask_mods if m is not None)

    @property
    def limits(self):
        """`(left, right)` of the band (`(None, None)` without one): the
        keys each query may see, which the chunked path skips blocks by."""
        return (None, None) if self.band is None else self.band.limits

    @property
    def bounds(self):
        """`(left, right)` of the band holding every pair these masks
        keep: the band's and those of the mask mods that are bands (an
        AND of bands included, `band_limits`), merged; `(None, None)`
        where none bounds them. The planner's estimate of the pairs the
        blocks visit, and of their size."""
        mods = (self.band, *self.mask_mods)
        return merge_limits(*(band_limits(m) for m in mods if m is not None))

    def dense(
        self,
        query_length,
        key_length,
        heads_axis: bool = False,
        query_offset=0,
        key_offset=0,
        key_positions=None,
    ):
        """The mask as one tensor (`mask_mods` are not evaluated here).

        Args:
            query_length: Number of query positions `Tq`.
            key_length: Number of key positions `Tk`.
            heads_axis: Whether the mask is for logits with a heads axis,
                `(batch_size, num_heads, Tq, Tk)`: the result then has one
                too (of size 1 unless `attention_mask` has one).
            query_offset: Position of the first query, for a block of a
                longer sequence (the band), or of each sequence's first
                query `(batch_size,)`. Defaults to `0`.
            key_offset: Position of the first key. Defaults to `0`.
            key_positions: Optional positions of the keys, `(Tk,)` or
                `(batch_size, Tk)` (a cache's slots). Defaults to `None`.

        Returns:
            A boolean tensor that broadcasts to `(batch_size, Tq, Tk)` (or
            `(batch_size, num_heads, Tq, Tk)` with `heads_axis=True`), or
            `None` when no mask applies.
        """
        return _dense(
            self.query_mask,
            self.key_mask,
            self.attention_mask,
            self.limits,
            query_length,
            key_length,
            heads_axis,
            query_offset,
            key_offset,
            key_positions,
        )

    def mask_mod(self):
        """Every mask as one mask mod of `flex_attention` (or `None`)."""
        parts = []
        if self.query_mask is not None:
            parts.append(_as_mod(self.query_mask[:, None, :, None]))
        if self.key_mask is not None:
            parts.append(_as_mod(self.key_mask[:, None, None, :]))
        if self.attention_mask is not None:
            explicit = ops.cast(self.attention_mask, "bool")
            if len(explicit.shape) == 2:
                explicit = explicit[None]
            if len(explicit.shape) == 3:
                explicit = ops.expand_dims(explicit, 1)
            parts.append(_as_mod(explicit))
        if self.band is not None:
            parts.append(self.band)
        parts += self.mask_mods
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else and_masks(*parts)


# Typed: `1.0` or `True` is not the cached band of `1` (the band refuses
# them in its own words).
@functools.lru_cache(maxsize=256, typed=True)
def _interned_band(left, right):
    return mods.band(left, right)


def _band(left=None, right=None):
    """`mods.band(left, right)`, one object per pair: a layer's calls
    share their band (nothing of `mods` runs again for it)."""
    try:
        return _interned_band(left, right)
    except TypeError:  # unhashable: refused in the band's own words
        return mods.band(left, right)


def _expand(mask, axis):
    return None if mask is None else ops.expand_dims(mask, axis)


def _as_mod(mask):
    return mods.boolean_mask(mask)


def attention_masks(
    query_mask=None,
    value_mask=None,
    key_mask=None,
    attention_mask=None,
    use_causal_mask: bool = False,
    sliding_window: int | None = None,
    band=None,
    mask_mods=(),
):
    """A layer's mask flags as one `AttentionMasks`.

    The one place the flags get their meaning: the padding masks are
    ANDed, and causal masking, `sliding_window` and `band` become one band
    mask mod (`keras_attention.ops.mods.causal()`, `sliding_window(w)` and
    `band(left, right)`, merged by their `limits`).

    Args:
        query_mask: Optional `(batch_size, Tq)`; a masked query gets no key.
        value_mask: Optional `(batch_size, Tk)`.
        key_mask: Optional `(batch_size, Tk)`, combined with `value_mask`.
        attention_mask: Optional `(batch_size, Tq, Tk)` or `(Tq, Tk)`, or
            per head `(batch_size, num_heads, Tq, Tk)`.
        use_causal_mask: Whether query `i` may only see keys `j <= i`.
        sliding_window: Optional positive integer: query `i` only sees keys
            `j` with `|i - j| < sliding_window`.
        band: Optional pair `(left, right)`: query `i` only sees keys
            `i - left <= j <= i + right` (`None` on a side for no limit).
        mask_mods: Further mask mods, ANDed in `mask_mod()`.

    Returns:
        An `AttentionMasks`.
    """
    for name, mask in (
        ("query_mask", query_mask),
        ("value_mask", value_mask),
        ("key_mask", key_mask),
        ("attention_mask", attention_mask),
    ):
        checks.mask_dtype(name, mask)
    rules = []
    if use_causal_mask:
        rules.append(mods.Causal.limits)
    if sliding_window is not None:
        rules.append(mods.sliding_window(sliding_window).limits)
    if band is not None:
        rules.append(_band(*band).limits)
    limits = merge_limits(*rules)
    merged = None if limits == (None, None) else _band(*limits)
    return AttentionMasks(
        query_mask=and_all(query_mask),
        key_mask=and_all(value_mask, key_mask),
        attention_mask=attention_mask,
        band=merged,
        mask_mods=mask_mods,
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


@_eager.compiled_when_eager
def _dense(
    query_mask,
    key_mask,
    attention_mask,
    limits,
    query_length,
    key_length,
    heads_axis,
    query_offset,
    key_offset,
    key_positions,
):
    """`AttentionMasks.dense` of the masks' parts, the band as its
    `limits` (a pure function, which an eager JAX call runs compiled,
    keyed by plain values)."""
    explicit, per_head = attention_mask, None
    if explicit is not None and len(explicit.shape) == 4:
        if not heads_axis:
            raise ValueError(
                "An `attention_mask` with a heads axis, `(batch_size, "
                "num_heads, Tq, Tk)`, needs `heads_axis=True`. Received: "
                f"attention_mask.shape={tuple(explicit.shape)}"
            )
        # ANDed once the `(B, Tq, Tk)` masks have their heads axis:
        # aligned from the right, batch would meet heads.
        explicit, per_head = None, explicit
    positions = None
    if limits != (None, None):
        positions = position_mask(
            _band(*limits),
            query_length,
            key_length,
            query_offset,
            key_offset,
            key_positions,
        )
    mask = and_all(
        _expand(key_mask, -2),
        _expand(query_mask, -1),
        explicit,
        positions,
    )
    if heads_axis and mask is not None and len(mask.shape) == 3:
        mask = ops.expand_dims(mask, -3)
    return and_all(mask, per_head)
