"""Score and mask mods for `keras_attention.ops.flex_attention`.

A mask mod, `mask_mod(batch, head, q_idx, kv_idx) -> bool`, says which
pairs a query sees; a score mod, `score_mod(score, batch, head, q_idx,
kv_idx) -> score`, rewrites the scaled logits. Both are `keras.ops`
functions of integer index tensors that broadcast against a block of
logits. Each mod here is an object with `get_config`, so that a layer
holding one saves and loads; a score mod that reads tensors (a learned
table) lists them in `tensors` and rebinds with `with_tensors`, which lets
the chunked path give them their gradients.

The bands (`causal`, `sliding_window`, `band`) are `ops/masks.py`'s, the
masks' one rule of positions, re-exported here with the other mods.
"""

import math

import keras
from keras import ops

from keras_attention.ops._mod_base import Mod
from keras_attention.ops._mod_base import TensorMod
from keras_attention.ops._mod_base import positive_integer
from keras_attention.ops._mod_base import register
from keras_attention.ops._mod_base import with_scalars
from keras_attention.ops._tensor_mods import Bias as Bias
from keras_attention.ops._tensor_mods import BooleanMask as BooleanMask
from keras_attention.ops._tensor_mods import Document as Document
from keras_attention.ops._tensor_mods import Padding as Padding
from keras_attention.ops._tensor_mods import (
    RelativePositionBias as RelativePositionBias,
)
from keras_attention.ops._tensor_mods import bias as bias
from keras_attention.ops._tensor_mods import boolean_mask as boolean_mask
from keras_attention.ops._tensor_mods import document as document
from keras_attention.ops._tensor_mods import padding as padding
from keras_attention.ops._tensor_mods import (
    relative_position_bias as relative_position_bias,
)
from keras_attention.ops._tensor_mods import (
    relative_position_buckets as relative_position_buckets,
)
from keras_attention.ops.mask_mods import MaskCombination
from keras_attention.ops.masks import Band as Band
from keras_attention.ops.masks import Causal as Causal
from keras_attention.ops.masks import SlidingWindow as SlidingWindow
from keras_attention.ops.masks import band as band
from keras_attention.ops.masks import causal as causal
from keras_attention.ops.masks import sliding_window as sliding_window


@register
class PrefixLM(Mod):
    """Mask mod: the prefix is seen by all, the rest causally."""

    scalars = ("prefix_length",)

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


def alibi_slopes(num_heads: int):
    """ALiBi's slopes `m_h = 2^(-8 (h + 1) / H)` (Press et al. 2022)."""
    return [2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)]


@register
class ALiBi(Mod):
    """Score mod: `score - m_h · |q_idx - kv_idx|` (`alibi(num_heads)`)."""

    def __init__(self, num_heads):
        self.num_heads = positive_integer(num_heads, "num_heads")

    def __call__(self, score, batch, head, q_idx, kv_idx):
        # The slope from the head index, not gathered from a tensor made
        # here: a pointwise function of the indices, which PyTorch's
        # compiled FlexAttention can lower (it cannot lower a constant
        # tensor made inside a mod).
        slope = 2.0 ** (
            ops.cast(head + 1, score.dtype) * (-8.0 / self.num_heads)
        )
        distance = ops.cast(ops.abs(q_idx - kv_idx), score.dtype)
        return score - slope * distance

    def get_config(self):
        return {"num_heads": self.num_heads}


def alibi(num_heads: int):
    """Score mod of ALiBi (Press et al. 2022): a linear distance penalty.

    `score - m_h · |q_idx - kv_idx|` with the paper's slopes
    `m_h = 2^(-8 (h + 1) / num_heads)` (`alibi_slopes`).
    """
    return ALiBi(num_heads)


@register
class SoftCap(Mod):
    """Score mod: `cap · tanh(score / cap)` (`soft_cap(cap)`)."""

    scalars = ("cap",)

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


@register
class Streaming(Mod):
    """Mask mod: `kv_idx < num_sink_tokens` or `q_idx - kv_idx < window`
    (`streaming(window, num_sink_tokens)`)."""

    scalars = ("window",)

    def __init__(self, window, num_sink_tokens=0):
        self.window = positive_integer(window, "window")
        bad = (
            not isinstance(num_sink_tokens, int)
            or isinstance(num_sink_tokens, bool)
            or num_sink_tokens < 0
        )
        if bad:
            raise ValueError(
                "Expected `num_sink_tokens` to be a non-negative integer. "
                f"Received: num_sink_tokens={num_sink_tokens!r}"
            )
        self.num_sink_tokens = num_sink_tokens

    @property
    def limits(self):
        # Without sink tokens it is a band; the sinks keep the left open.
        if self.num_sink_tokens:
            return None
        return (self.window - 1, None)

    def __call__(self, batch, head, q_idx, kv_idx):
        recent = ops.less(q_idx - kv_idx, self.window)
        if not self.num_sink_tokens:
            return recent
        return ops.logical_or(recent, ops.less(kv_idx, self.num_sink_tokens))

    def get_config(self):
        return {"window": self.window, "num_sink_tokens": self.num_sink_tokens}


def streaming(window: int, num_sink_tokens: int = 0):
    """Mask mod of StreamingLLM (Xiao et al. 2024): the `window` most
    recent positions and the first `num_sink_tokens`, the attention sinks.

    `q_idx - kv_idx < window` or `kv_idx < num_sink_tokens`; AND it with
    `causal()`. What a `keras_attention.RollingCache` keeps: decoding with
    one equals the full causal pass with this mod.

    Example:

    >>> mod = keras_attention.ops.mods.streaming(2, num_sink_tokens=1)
    >>> q, kv = keras.ops.arange(4)[:, None], keras.ops.arange(4)[None]
    >>> keras.ops.convert_to_numpy(mod(0, 0, q, kv)).astype(int).tolist()
    [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 1]]
    """
    return Streaming(window, num_sink_tokens)


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

    def with_scalars(self, convert):
        return ScoreChain([with_scalars(m, convert) for m in self.score_mods])

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


ScoreChain = register(ScoreChain)


def chain(*score_mods):
    """One score mod applying `score_mods` in order (e.g. `alibi`, then
    `soft_cap`)."""
    return ScoreChain(score_mods)


class Shifted(Mod):
    """A mod read at shifted positions (`shifted(mod, ...)`)."""

    scalars = ("query_offset", "key_offset")

    def __init__(self, mod, query_offset=0, key_offset=0, key_positions=None):
        self.mod = mod
        self.query_offset, self.key_offset = query_offset, key_offset
        self.key_positions = key_positions

    @property
    def limits(self):
        limits = getattr(self.mod, "limits", None)
        offsets = (self.query_offset, self.key_offset)
        if (
            limits is None
            or self.key_positions is not None
            or not all(isinstance(o, int) for o in offsets)
        ):
            return None
        shift = self.query_offset - self.key_offset
        left, right = limits
        return (
            None if left is None else left - shift,
            None if right is None else right + shift,
        )

    @property
    def tensors(self):
        return tuple(getattr(self.mod, "tensors", ()) or ())

    def with_tensors(self, tensors):
        mod = self.mod.with_tensors(tensors)
        return Shifted(
            mod, self.query_offset, self.key_offset, self.key_positions
        )

    def with_scalars(self, convert):
        offsets = Mod.with_scalars(self, convert)
        return Shifted(
            with_scalars(self.mod, convert),
            offsets.query_offset,
            offsets.key_offset,
            self.key_positions,
        )

    def __call__(self, *args):
        *lead, q_idx, kv_idx = args
        batch = lead[-2]  # a score mod's arguments begin with the score
        q_idx = ops.cast(q_idx, "int32") + _per_sequence(
            self.query_offset, batch
        )
        kv_idx = ops.cast(kv_idx, "int32")
        if self.key_positions is not None:
            kv_idx = _look_up(self.key_positions, batch, kv_idx)
        kv_idx = kv_idx + ops.cast(self.key_offset, "int32")
        return self.mod(*lead, q_idx, kv_idx)

    get_config = TensorMod.get_config
    __eq__ = TensorMod.__eq__
    __hash__ = TensorMod.__hash__
    __repr__ = TensorMod.__repr__


def _per_sequence(offset, batch):
    """`offset` (a scalar, or one per sequence `(batch_size,)`) at the
    sequences `batch` (an index tensor, or `0`)."""
    offset = ops.cast(offset, "int32")
    if len(offset.shape) == 0:
        return offset
    return ops.take(offset, ops.cast(batch, "int32"))


def _look_up(positions, batch, kv_idx):
    """`positions[kv_idx]` (a `(Tk,)` table) or `positions[batch,
    kv_idx]` (`(batch_size, Tk)`), broadcasting like the index tensors."""
    positions = ops.cast(positions, "int32")
    if len(positions.shape) == 1:
        return ops.take(positions, kv_idx)
    length = ops.shape(positions)[1]
    flat = ops.reshape(positions, (-1,))
    return ops.take(flat, ops.cast(batch, "int32") * length + kv_idx)


def shifted(mod, query_offset=0, key_offset=0, key_positions=None):
    """`mod` read at positions `q_idx + query_offset`, `kv_idx +
    key_offset`: a block of a longer sequence (the ring's), or the
    queries of a cached call, which begin at `cache_update_index`.

    Args:
        mod: A score or mask mod, or `None` (returned as is).
        query_offset: Position of the first query (an integer or a scalar
            tensor), or of each sequence's first query, `(batch_size,)`.
            Defaults to `0`.
        key_offset: Position of the first key. Defaults to `0`.
        key_positions: Optional table of the keys' positions, `(Tk,)` or
            per sequence `(batch_size, Tk)`: key `kv_idx` is then at
            `key_positions[kv_idx] + key_offset` (a cache whose slots are
            not in order, a rolling or a paged cache). Defaults to `None`.

    Returns:
        The shifted mod (`mod` itself when both offsets are `0` and there
        is no table; an AND or OR of mask mods, the AND or OR of each
        shifted). A band's `limits` shift with it when the offsets are
        integers (and there is no table).

    Example:

    >>> from keras_attention.ops import mods
    >>> late = mods.shifted(mods.causal(), query_offset=2)
    >>> q, kv = keras.ops.arange(2)[:, None], keras.ops.arange(4)[None]
    >>> keras.ops.convert_to_numpy(late(0, 0, q, kv)).astype(int).tolist()
    [[1, 1, 1, 0], [1, 1, 1, 1]]
    """
    zero = all(
        isinstance(o, int) and o == 0 for o in (query_offset, key_offset)
    )
    if mod is None or (zero and key_positions is None):
        return mod
    if isinstance(mod, MaskCombination):
        # Each mod shifted, so that an AND of bands keeps its limits.
        parts = [
            shifted(m, query_offset, key_offset, key_positions)
            for m in mod.mask_mods
        ]
        return MaskCombination(mod.op, parts)
    return Shifted(mod, query_offset, key_offset, key_positions)


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
    "shifted",
    "sliding_window",
    "soft_cap",
    "streaming",
]
