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

The bands themselves (`causal()`, `sliding_window(w)`, `band(left,
right)`, re-exported by `keras_attention.ops.mods`) are defined here,
beside their `limits` and their grid (`position_mask`): a call's dense
mask evaluates its band by the band's own class.
"""

import functools

from keras import ops

from keras_attention.ops import _eager
from keras_attention.ops import checks
from keras_attention.ops._mod_base import Mod
from keras_attention.ops._mod_base import positive_integer
from keras_attention.ops._mod_base import register
from keras_attention.ops._tensor_mods import boolean_mask
from keras_attention.ops.mask_mods import MaskCombination
from keras_attention.ops.mask_mods import and_masks


@register
class Causal(Mod):
    """Mask mod: query `i` sees keys `j <= i` (`causal()`)."""

    limits = (None, 0)

    def __call__(self, batch, head, q_idx, kv_idx):
        return ops.greater_equal(q_idx, kv_idx)


def causal():
    """Mask mod of causal attention: `q_idx >= kv_idx`.

    Example:

    >>> mask = keras_attention.ops.mods.causal()(
    ...     0, 0, keras.ops.arange(3)[:, None], keras.ops.arange(3)[None]
    ... )
    >>> keras.ops.convert_to_numpy(mask).astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 1]])
    """
    return Causal()


@register
class SlidingWindow(Mod):
    """Mask mod: `|q_idx - kv_idx| < window` (`sliding_window(window)`)."""

    scalars = ("window",)

    def __init__(self, window):
        self.window = positive_integer(window, "window")

    @property
    def limits(self):
        return (self.window - 1, self.window - 1)

    def __call__(self, batch, head, q_idx, kv_idx):
        return ops.less(ops.abs(q_idx - kv_idx), self.window)

    def get_config(self):
        return {"window": self.window}


def sliding_window(window: int):
    """Mask mod of a window: `|q_idx - kv_idx| < window`.

    As `keras.layers.MultiHeadAttention(sliding_window=window)`; AND it
    with `causal()` (`keras_attention.ops.and_masks`) for the `window`
    most recent keys.
    """
    return SlidingWindow(window)


@register
class Band(Mod):
    """Mask mod: `-left <= kv_idx - q_idx <= right` (`band(left, right)`)."""

    scalars = ("left", "right")

    def __init__(self, left=None, right=None):
        for name, value in (("left", left), ("right", right)):
            bad = value is not None and (
                not isinstance(value, int)
                or isinstance(value, bool)
                or value < 0
            )
            if bad:
                raise ValueError(
                    f"Expected `{name}` to be None or a non-negative integer. "
                    f"Received: {name}={value!r}"
                )
        self.left, self.right = left, right
        # An attribute, not a property: the planner and the kernels read
        # it on every call. It stays the integers given (`with_scalars`
        # turns `left` and `right` into tensors, not the limits).
        self.limits = (left, right)

    def __call__(self, batch, head, q_idx, kv_idx):
        offset = kv_idx - q_idx
        sides = []
        if self.left is not None:
            sides.append(ops.greater_equal(offset, -self.left))
        if self.right is not None:
            sides.append(ops.less_equal(offset, self.right))
        if not sides:
            return ops.greater_equal(offset, offset)
        return sides[0] if len(sides) == 1 else ops.logical_and(*sides)

    def get_config(self):
        return {"left": self.left, "right": self.right}


def band(left=None, right=None):
    """Mask mod of a band: query `i` sees keys `i - left <= j <= i + right`.

    `None` leaves a side open (`keras_attention.ops.band_mask`'s band).
    """
    return Band(left, right)


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
    band,
    query_length,
    key_length,
    query_offset=0,
    key_offset=0,
    key_positions=None,
):
    """A band of positions (`mods.band`, `causal()`, `sliding_window(w)`:
    a mask mod of positions only) evaluated on a `(Tq, Tk)` grid.

    Query `r` of the grid is position `query_offset + r`, key `c` is
    `key_offset + c` (offsets: integers or scalar tensors, for a block of
    a longer sequence), or `key_positions[c] + key_offset` with a table
    of the keys' positions; the band's batch and head are `0`. With one
    query offset per sequence (`(batch_size,)`) or a table per sequence
    (`(batch_size, Tk)`) the grid is per sequence.

    A table is `(key_length,)` or `(batch_size, key_length)`. Other mask
    mods (which may read the batch, or return floats) are evaluated on
    index tensors by `mask_mods.keep`.

    Returns:
        Boolean tensor of shape `(query_length, key_length)`, or
        `(batch_size, query_length, key_length)` per sequence.
    """
    check_band("position_mask", band)
    rows = ops.arange(query_length, dtype="int32")
    if not _is_zero(query_offset):
        query_offset = ops.cast(query_offset, "int32")
        if len(query_offset.shape) == 1:
            rows = query_offset[:, None] + rows[None]
        else:
            rows = rows + query_offset
    if key_positions is None:
        cols = ops.arange(key_length, dtype="int32")
    else:
        cols = ops.cast(key_positions, "int32")
    if not _is_zero(key_offset):
        cols = cols + ops.cast(key_offset, "int32")
    if len(rows.shape) == 2 and len(cols.shape) == 1:
        cols = cols[None]
    return band(0, 0, ops.expand_dims(rows, -1), ops.expand_dims(cols, -2))


def check_band(caller, band):
    """Refuses a `band` that is not a band of positions (a mask mod with
    `limits`), naming `caller`."""
    if not isinstance(getattr(band, "limits", None), tuple):
        raise ValueError(
            f"`{caller}` takes as `band` a band of positions (`mods.band`, "
            "`mods.causal()`, `sliding_window(w)`: a mask mod with "
            "`limits`); other mask mods go in `mask_mods`. Received: "
            f"band={band!r}"
        )


def _is_zero(offset):
    """Whether `offset` is the plain `0` (no op to add it)."""
    return isinstance(offset, int) and offset == 0


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
        if band is not None:
            # `dense` reads the band by its limits only.
            check_band("AttentionMasks", band)
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
    return band(left, right)


def _band(left=None, right=None):
    """`band(left, right)`, one object per pair: a layer's calls
    share their band (nothing of `mods` runs again for it)."""
    try:
        return _interned_band(left, right)
    except TypeError:  # unhashable: refused in the band's own words
        return band(left, right)


def _expand(mask, axis):
    return None if mask is None else ops.expand_dims(mask, axis)


def _as_mod(mask):
    return boolean_mask(mask)


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
        rules.append(Causal.limits)
    if sliding_window is not None:
        rules.append(SlidingWindow(sliding_window).limits)
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
