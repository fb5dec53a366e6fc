"""Score and mask mods for `keras_attention.ops.flex_attention`.

A mask mod, `mask_mod(batch, head, q_idx, kv_idx) -> bool`, says which
pairs a query sees; a score mod, `score_mod(score, batch, head, q_idx,
kv_idx) -> score`, rewrites the scaled logits. Both are `keras.ops`
functions of integer index tensors that broadcast against a block of
logits. Each mod here is an object with `get_config`, so that a layer
holding one saves and loads; a score mod that reads tensors (a learned
table) lists them in `tensors` and rebinds with `with_tensors`, which lets
the chunked path give them their gradients.
"""

import math

import keras
from keras import ops

from keras_attention.ops.flex import MaskCombination


def _register(cls):
    return keras.saving.register_keras_serializable(package="keras_attention")(
        cls
    )


def _positive_int(value, name):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(
            f"Expected `{name}` to be a positive integer. Received: "
            f"{name}={value!r}"
        )
    return value


class Mod:
    """Base of the mods: a config of plain values, no tensors.

    `limits` is `(left, right)` for a mask mod that is a band of positions
    (query `i` sees keys `i - left <= j <= i + right`, `None` for an open
    side), which the chunked paths read to skip whole blocks; `None` for
    any other mod.
    """

    tensors = ()
    limits = None
    holds_tensors = False

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __eq__(self, other):
        return type(self) is type(other) and (
            self.get_config() == other.get_config()
        )

    def __hash__(self):
        return hash(type(self))

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


@_register
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


@_register
class SlidingWindow(Mod):
    """Mask mod: `|q_idx - kv_idx| < window` (`sliding_window(window)`)."""

    def __init__(self, window):
        self.window = _positive_int(window, "window")

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


@_register
class PrefixLM(Mod):
    """Mask mod: the prefix is seen by all, the rest causally."""

    def __init__(self, prefix_length):
        if (
            not isinstance(prefix_length, int)
            or isinstance(prefix_length, bool)
            or prefix_length < 0
        ):
            raise ValueError(
                "Expected `prefix_length` to be a non-negative integer. "
                f"Received: prefix_length={prefix_length!r}"
            )
        self.prefix_length = prefix_length

    def __call__(self, batch, head, q_idx, kv_idx):
        return ops.logical_or(
            ops.less(kv_idx, self.prefix_length),
            ops.greater_equal(q_idx, kv_idx),
        )

    def get_config(self):
        return {"prefix_length": self.prefix_length}


def prefix_lm(prefix_length: int):
    """Mask mod of a prefix LM (Raffel et al. 2020): `kv_idx <
    prefix_length` or `q_idx >= kv_idx`."""
    return PrefixLM(prefix_length)


def _gather_rows(table, batch, position):
    """`table[batch, position]` of a `(B, T)` tensor, by broadcasting."""
    length = ops.shape(table)[1]
    flat = ops.reshape(table, (-1,))
    return ops.take(flat, ops.cast(batch, "int32") * length + position)


class _TensorMod(Mod):
    """A mod of per-call tensors: usable in calls, not saved in configs."""

    holds_tensors = True

    def get_config(self):
        raise TypeError(
            f"`{type(self).__name__}` holds tensors of one call and has no "
            "config: pass it to the layer's call, not its constructor"
        )

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"{type(self).__name__}(...)"


class Document(_TensorMod):
    """Mask mod: a query sees the keys of its own segment."""

    def __init__(self, segment_ids, kv_segment_ids=None):
        self.segment_ids = ops.convert_to_tensor(segment_ids)
        self.kv_segment_ids = (
            self.segment_ids
            if kv_segment_ids is None
            else ops.convert_to_tensor(kv_segment_ids)
        )

    def __call__(self, batch, head, q_idx, kv_idx):
        return ops.equal(
            _gather_rows(self.segment_ids, batch, q_idx),
            _gather_rows(self.kv_segment_ids, batch, kv_idx),
        )


def document(segment_ids, kv_segment_ids=None):
    """Mask mod of packed sequences: `segment_ids[b, q] == ids[b, kv]`.

    Args:
        segment_ids: Integer `(batch_size, Tq)`, the document of each query.
        kv_segment_ids: Optional `(batch_size, Tk)`, those of the keys.
            Defaults to `segment_ids` (self-attention).
    """
    return Document(segment_ids, kv_segment_ids)


class Padding(_TensorMod):
    """Mask mod: `kv_idx < lengths[batch]`."""

    def __init__(self, lengths):
        self.lengths = ops.cast(ops.convert_to_tensor(lengths), "int32")

    def __call__(self, batch, head, q_idx, kv_idx):
        return ops.less(kv_idx, ops.take(self.lengths, batch))


def padding(lengths):
    """Mask mod of right-padded keys: `kv_idx < lengths[batch]`.

    Args:
        lengths: Integer `(batch_size,)`, the number of real keys.
    """
    return Padding(lengths)


def alibi_slopes(num_heads: int):
    """ALiBi's slopes `m_h = 2^(-8 (h + 1) / H)` (Press et al. 2022)."""
    return [2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)]


@_register
class ALiBi(Mod):
    """Score mod: `score - m_h · |q_idx - kv_idx|` (`alibi(num_heads)`)."""

    def __init__(self, num_heads):
        self.num_heads = _positive_int(num_heads, "num_heads")

    def __call__(self, score, batch, head, q_idx, kv_idx):
        slopes = ops.convert_to_tensor(
            alibi_slopes(self.num_heads), dtype=score.dtype
        )
        distance = ops.cast(ops.abs(q_idx - kv_idx), score.dtype)
        return score - ops.take(slopes, head) * distance

    def get_config(self):
        return {"num_heads": self.num_heads}


def alibi(num_heads: int):
    """Score mod of ALiBi (Press et al. 2022): a linear distance penalty.

    `score - m_h · |q_idx - kv_idx|` with the paper's slopes
    `m_h = 2^(-8 (h + 1) / num_heads)` (`alibi_slopes`).
    """
    return ALiBi(num_heads)


@_register
class SoftCap(Mod):
    """Score mod: `cap · tanh(score / cap)` (`soft_cap(cap)`)."""

    def __init__(self, cap):
        number = isinstance(cap, (int, float)) and not isinstance(cap, bool)
        if not number or not math.isfinite(cap) or cap <= 0:
            raise ValueError(
                f"Expected `cap` to be a positive number. Received: cap={cap!r}"
            )
        self.cap = float(cap)

    def __call__(self, score, batch, head, q_idx, kv_idx):
        return self.cap * ops.tanh(score / self.cap)

    def get_config(self):
        return {"cap": self.cap}


def soft_cap(cap: float):
    """Score mod of logit soft-capping (Gemma 2): `cap · tanh(score /
    cap)`, on the scaled score."""
    return SoftCap(cap)


def relative_position_buckets(
    relative_position, num_buckets: int, max_distance: int, bidirectional: bool
):
    """T5's bucket of each `relative_position = kv_idx - q_idx`.

    Half the buckets (per direction, with `bidirectional`) hold the exact
    distances below `num_buckets // 2`, the rest distances up to
    `max_distance` on a log scale; farther ones share the last bucket
    (Raffel et al. 2020, section 2.1).
    """
    n = -ops.cast(relative_position, "int32")
    bucket = ops.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + ops.cast(ops.less(n, 0), "int32") * num_buckets
        n = ops.abs(n)
    else:
        n = ops.maximum(n, 0)
    exact = num_buckets // 2
    scaled = ops.log(ops.maximum(ops.cast(n, "float32"), 1.0) / exact) / (
        math.log(max_distance / exact)
    )
    large = exact + ops.cast(scaled * (num_buckets - exact), "int32")
    large = ops.minimum(large, num_buckets - 1)
    return bucket + ops.where(ops.less(n, exact), n, large)


class RelativePositionBias(Mod):
    """Score mod: `score + table[bucket(kv_idx - q_idx), head]` (T5)."""

    def __init__(self, table, num_buckets, max_distance, bidirectional):
        self.table = table
        self.num_buckets = _positive_int(num_buckets, "num_buckets")
        self.max_distance = _positive_int(max_distance, "max_distance")
        self.bidirectional = bool(bidirectional)
        shape = tuple(table.shape)
        if len(shape) != 2 or shape[0] != num_buckets:
            raise ValueError(
                "Expected `table` of shape `(num_buckets, num_heads)`. "
                f"Received: table.shape={shape}, num_buckets={num_buckets}"
            )

    @property
    def tensors(self):
        return (self.table,)

    def with_tensors(self, tensors):
        (table,) = tensors
        return RelativePositionBias(
            table, self.num_buckets, self.max_distance, self.bidirectional
        )

    def __call__(self, score, batch, head, q_idx, kv_idx):
        bucket = relative_position_buckets(
            kv_idx - q_idx,
            self.num_buckets,
            self.max_distance,
            self.bidirectional,
        )
        heads = ops.shape(self.table)[1]
        flat = ops.reshape(ops.cast(self.table, score.dtype), (-1,))
        return score + ops.take(flat, bucket * heads + head)

    get_config = _TensorMod.get_config
    __eq__ = _TensorMod.__eq__
    __hash__ = _TensorMod.__hash__
    __repr__ = _TensorMod.__repr__


def relative_position_bias(
    table, num_buckets: int = 32, max_distance: int = 128, bidirectional=True
):
    """Score mod of T5's learned relative-position bias.

    Args:
        table: `(num_buckets, num_heads)` bias of each bucket and head (a
            variable to train it: `keras_attention.RelativePositionBias`).
        num_buckets: Number of buckets. Defaults to `32`.
        max_distance: Distance from which all share the last bucket.
            Defaults to `128`.
        bidirectional: Whether keys before and after the query have their
            own buckets. Defaults to `True`.
    """
    return RelativePositionBias(table, num_buckets, max_distance, bidirectional)


def _gather(tensor, batch, head, q_idx, kv_idx):
    """`tensor[batch, head, q_idx, kv_idx]` of a tensor broadcastable to
    `(B, H, Tq, Tk)`, by a row-major flat index (an axis of size 1
    broadcasts: index 0). Only the batch axis may be dynamic."""
    static, dynamic = tuple(tensor.shape), ops.shape(tensor)
    index, stride = 0, 1
    for axis in range(3, -1, -1):
        position = (batch, head, q_idx, kv_idx)[axis]
        if static[axis] != 1:
            index = index + ops.cast(position, "int32") * stride
        stride = stride * dynamic[axis]
    return ops.take(ops.reshape(tensor, (-1,)), index)


def _check_rank4(tensor, name):
    shape = tuple(tensor.shape)
    if len(shape) != 4 or None in shape[1:]:
        raise ValueError(
            f"Expected `{name}` broadcastable to `(batch_size, heads, Tq, "
            "Tk)`, of rank 4 with static shape but for the batch. "
            f"Received: {name}.shape={shape}"
        )


class Bias(_TensorMod):
    """Score mod: `score + tensor[batch, head, q_idx, kv_idx]`."""

    def __init__(self, tensor):
        self.tensor = tensor
        _check_rank4(tensor, "tensor")

    @property
    def tensors(self):
        return (self.tensor,)

    def with_tensors(self, tensors):
        return Bias(tensors[0])

    def __call__(self, score, batch, head, q_idx, kv_idx):
        tensor = ops.cast(self.tensor, score.dtype)
        return score + _gather(tensor, batch, head, q_idx, kv_idx)


class BooleanMask(_TensorMod):
    """Mask mod: `mask[batch, head, q_idx, kv_idx]` (`boolean_mask`)."""

    def __init__(self, mask):
        self.mask = ops.cast(mask, "bool")
        _check_rank4(self.mask, "mask")

    def __call__(self, batch, head, q_idx, kv_idx):
        return _gather(self.mask, batch, head, q_idx, kv_idx)


def boolean_mask(mask):
    """Mask mod of an explicit boolean mask (`True` = keep).

    Args:
        mask: Boolean tensor broadcastable to `(batch_size, heads, Tq, Tk)`,
            of rank 4 (size 1 on an axis to share it): a padding mask
            `(B, Tk)` is `mask[:, None, None, :]`.
    """
    return BooleanMask(mask)


@_register
class Band(Mod):
    """Mask mod: `-left <= kv_idx - q_idx <= right` (`band(left, right)`)."""

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

    @property
    def limits(self):
        return (self.left, self.right)

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


def bias(tensor):
    """Score mod adding a bias `tensor[batch, head, q_idx, kv_idx]`.

    Args:
        tensor: Float tensor of static shape broadcastable to
            `(batch_size, heads, Tq, Tk)` (size 1 on an axis to share it).
    """
    return Bias(tensor)


class ScoreChain(Mod):
    """Score mods applied one after another (`chain(*score_mods)`)."""

    def __init__(self, score_mods):
        self.score_mods = tuple(score_mods)

    @property
    def tensors(self):
        return tuple(
            t for mod in self.score_mods for t in getattr(mod, "tensors", ())
        )

    def with_tensors(self, tensors):
        tensors, mods = list(tensors), []
        for mod in self.score_mods:
            count = len(getattr(mod, "tensors", ()))
            if count:
                mod = mod.with_tensors(tensors[:count])
            tensors, mods = tensors[count:], mods + [mod]
        return ScoreChain(mods)

    def __call__(self, score, batch, head, q_idx, kv_idx):
        for mod in self.score_mods:
            score = mod(score, batch, head, q_idx, kv_idx)
        return score

    def get_config(self):
        serialize = keras.saving.serialize_keras_object
        return {"score_mods": [serialize(mod) for mod in self.score_mods]}

    @classmethod
    def from_config(cls, config):
        deserialize = keras.saving.deserialize_keras_object
        return cls([deserialize(mod) for mod in config["score_mods"]])


ScoreChain = _register(ScoreChain)


def chain(*score_mods):
    """One score mod applying `score_mods` in order (e.g. `alibi`, then
    `soft_cap`)."""
    return ScoreChain(score_mods)


__all__ = [
    "MaskCombination",
    "alibi",
    "alibi_slopes",
    "band",
    "bias",
    "boolean_mask",
    "causal",
    "chain",
    "document",
    "padding",
    "prefix_lm",
    "relative_position_bias",
    "relative_position_buckets",
    "sliding_window",
    "soft_cap",
]
