"""The attention engine: one call record, planned once, run on its kernel.

An `AttentionCall` is everything one attention call asks, built once: the
heads in one layout, the score, the masks as one `AttentionMasks`, the
mods, what is returned. `plan_call` asks `ops.plan.plan_attention` once
for its kernel; `run` runs that kernel (the table of `ops/_registry.py`,
filled by `ops/_kernels.py`, `ops/_fused.py` and the backends' modules that
`ops/_native.py` names), which returns the
output, the weights where asked, and the log-sum-exp of each row, and
applies what reads the log-sum-exp: attention sinks. The multi-head
layers and `flex_attention` both go through here, so a variant of the
softmax is one correction in `run`, not one in each kernel.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

from keras import ops

from keras_attention.ops import _fused  # noqa: F401 (registers its kernels)
from keras_attention.ops import _kernels  # noqa: F401 (registers its kernels)
from keras_attention.ops import _native  # noqa: F401 (names their modules)
from keras_attention.ops import _native_plan
from keras_attention.ops import _registry
from keras_attention.ops import _thresholds
from keras_attention.ops import plan as plan_lib
from keras_attention.ops._registry import Result
from keras_attention.ops.checks import logits_dtype
from keras_attention.ops.masks import AttentionMasks


class ScaledDot:
    """The score of `flex_attention` and the other ops: `scale · q·k`.

    It has the forms the kernels read of a score layer (`form`,
    `dot_product_form`), so an op's call is a layer's call.
    """

    form = "dot"
    keeps_keys = True
    dense_bytes_per_logit = 4
    casts_to_logits_dtype = False  # the heads as given (half on a GPU)

    def __init__(self, scale):
        self.scale = scale

    def dot_product_form(self, query, key):
        return query, key, self.scale


class Additive:
    """The additive score of `chunked_attention(..., additive_v=v)`:
    `scale · Σ_u v_u tanh(q_iu + k_ju)` of projected inputs."""

    form = "additive"
    casts_to_logits_dtype = False

    def __init__(self, v, scale):
        self.v, self.scale = v, scale

    @property
    def dense_bytes_per_logit(self):
        return 4 * int(self.v.shape[-1])

    def additive_form(self, query, key):
        return query, key, ops.cast(self.v, query.dtype) * self.scale


@dataclasses.dataclass(frozen=True, eq=False)
class AttentionCall:
    """One attention call: what every kernel reads, built once.

    Attributes:
        query: The query heads `(batch, Tq, heads, depth)`.
        key: The key heads `(batch, Tk, kv_heads, depth)`, `kv_heads`
            dividing `heads`.
        value: The value heads `(batch, Tk, kv_heads, Dv)`.
        score: The score (a `keras_attention.scores.Score`, or
            `ScaledDot`): its `form` says which kernels can compute it.
        masks: The call's masks as one `ops.masks.AttentionMasks`; its
            band and mask mods read absolute positions.
        score_mod: A score mod at absolute positions, or `None`.
        bias: An additive bias broadcastable to `(batch, heads, Tq, Tk)`
            (any rank 2-4), at the call's own positions, or `None`.
        query_offset: The absolute position of the first query (a
            cache's `cache_update_index`), or of each sequence's first
            query `(batch,)` (a paged cache's lengths); the band and the
            mods read `q_idx + query_offset`.
        key_positions: The absolute position of each key, `(Tk,)` or
            `(batch, Tk)` integers (a rolling or a paged cache, whose
            slots are not the positions in order), or `None` for key `j`
            at position `j`; the band and the mods read them.
        key_scale: With quantized keys and values (int8 or float8, a
            `QuantizedCache`), the scale of each key `(batch, Tk,
            kv_heads)`: key `j` is `key[:, j] · key_scale[:, j]`; else
            `None`.
        value_scale: The same for the values.
        block_mask: A `BlockMask` of the mask, or `None`.
        dropout: A function applied to the weights, or `None`.
        weights: Whether the weights `(batch, heads, Tq, Tk)` are wanted.
        lse: Whether the log-sum-exp `(batch, heads, Tq)` is wanted.
        sinks: One logit per query head in each row's softmax, taking no
            value (attention sinks), or `None`.
        activation: A function of the logits before the softmax
            (`attention_activation`), or `None`.
        softmax: A layer's `_masked_softmax(logits, mask)` on `(batch,
            heads, Tq, Tk)`, or `None` for `masked_softmax`.
    """

    query: Any
    key: Any
    value: Any
    score: Any
    masks: AttentionMasks = dataclasses.field(default_factory=AttentionMasks)
    score_mod: Callable | None = None
    bias: Any = None
    query_offset: Any = 0
    key_positions: Any = None
    key_scale: Any = None
    value_scale: Any = None
    block_mask: Any = None
    dropout: Callable | None = None
    weights: bool = False
    lse: bool = False
    sinks: Any = None
    activation: Callable | None = None
    softmax: Callable | None = None

    @property
    def shapes(self):
        """`(batch, heads, Tq, Tk)` as the planner reads them."""
        q, k = self.query.shape, self.key.shape
        return (q[0], q[2], q[1], k[1])

    def tensor_mask(self, q_len, k_len):
        """The masks as one tensor `(B | 1, H | 1, Tq, Tk)` (padding,
        explicit, the band at the call's positions; not the mask mods),
        or `None`."""
        return self.masks.dense(
            q_len,
            k_len,
            heads_axis=True,
            query_offset=self.query_offset,
            key_positions=self.key_positions,
        )

    def dot_product_form(self, key=None):
        """The score's `(query', key', scale)` of the query and `key`
        (the call's keys by default)."""
        return self.score.dot_product_form(*self._score_inputs(key))

    def additive_form(self):
        """The score's `(query', key', v)`."""
        return self.score.additive_form(*self._score_inputs())

    def _score_inputs(self, key=None):
        """The query and `key` as the score takes them: a score layer's
        cast to the logits dtype (float32 for half precision), the ops'
        own scores' as they are."""
        key = self.key if key is None else key
        if not self.score.casts_to_logits_dtype:
            return self.query, key
        dtype = logits_dtype(self.query.dtype)
        return ops.cast(self.query, dtype), ops.cast(key, dtype)

    @property
    def has_mods(self):
        """A score mod, a mask mod or a bias."""
        return (
            self.score_mod is not None
            or self.bias is not None
            or bool(self.masks.mask_mods)
        )


def skipped_band(call):
    """`(left, right)` of the band whose outside the blocks skip
    (`AttentionMasks.bounds`), where the call's positions are known
    numbers (a Python query offset, no cache slots' positions); `(None,
    None)` elsewhere."""
    if isinstance(call.query_offset, int) and call.key_positions is None:
        return call.masks.bounds
    return (None, None)


def kept_share(call, block_size=None):
    """The share of the pairs of blocks the call's masks keep, for the
    planner: a band's by arithmetic, a concrete `BlockMask`'s by count,
    `_thresholds.UNKNOWN_SHARE` for a mask that only the blocks would evaluate;
    `None` for all."""
    q_len, k_len = call.shapes[2:]
    if not (isinstance(q_len, int) and isinstance(k_len, int)):
        return None
    size = block_size or (plan_lib.auto_chunk_size(),) * 2
    shares = []
    bounds = skipped_band(call)
    if bounds != (None, None):
        shares.append(
            plan_lib.band_share(bounds, (q_len, k_len), size, call.query_offset)
        )
    if call.block_mask is not None:
        shares.append(_kinds_share(call.block_mask.kinds))
    elif call.masks.mask_mods or call.masks.attention_mask is not None:
        shares.append(_thresholds.UNKNOWN_SHARE)
    return min(shares) if shares else None


def _kinds_share(kinds):
    """The share of non-empty blocks of a `BlockMask`'s kinds, where they
    are concrete; `_thresholds.UNKNOWN_SHARE` where they are traced."""
    try:
        kept = ops.convert_to_numpy(ops.any(kinds > 0, axis=(0, 1)))
    except Exception:  # a traced tensor has no value yet
        return _thresholds.UNKNOWN_SHARE
    return float(kept.mean())


def plan_call(call, chunk_size=None, backward=True, **layer_flags):
    """`ops.plan.plan_attention` for `call`: the one plan of
    one call. `layer_flags` are what a layer adds (`flash`,
    `native_flash`, `logits_hook`, `dropout` as a rate, `weights` for a
    penalty, `cached`, `ring`). The call's `NativeCall` goes with it, so
    that the backend's own kernel runs where the call fits it."""
    score = call.score
    block = (chunk_size, chunk_size) if chunk_size else None
    flags = dict(
        weights=call.weights,
        dropout=call.dropout is not None,
        mods=call.has_mods,
        tensor_mask=call.masks.attention_mask is not None,
        score=type(score).__name__,
        bytes_per_logit=score.dense_bytes_per_logit,
        backward=backward,
        kept=kept_share(call, block),
        limits=skipped_band(call),
        lse=call.lse or call.sinks is not None,
        native=_native_plan.describe(call, backward),
    )
    for name in ("weights", "dropout"):
        flags[name] = flags[name] or bool(layer_flags.pop(name, False))
    flags.update(layer_flags)
    # Looked up on its module at each call, so that it can be observed.
    return plan_lib.plan_attention(score.form, call.shapes, chunk_size, **flags)


def dequantize(call):
    """`call` with its quantized keys and values (`key_scale`) read as
    floating-point numbers, in the query's dtype; `call` itself if they
    are not quantized."""
    if call.key_scale is None:
        return call
    dtype = call.query.dtype

    def read(x, scale):
        x = ops.cast(x, "float32") * ops.cast(scale, "float32")[..., None]
        return ops.cast(x, dtype)

    return dataclasses.replace(
        call,
        key=read(call.key, call.key_scale),
        value=read(call.value, call.value_scale),
        key_scale=None,
        value_scale=None,
    )


def run(call, plan):
    """The `Result` of `call` on the kernel `plan` names; attention sinks
    corrected through the log-sum-exp.

    Quantized keys and values are dequantized block by block in the
    blocks (for a score whose dot-product form leaves the keys as they
    are, `keeps_keys`), else whole before the kernel."""
    blockwise = plan.path == "blocks" and getattr(
        call.score, "keeps_keys", False
    )
    if not blockwise:
        call = dequantize(call)
    result = _registry.KERNELS[plan.path](call, plan)
    if call.sinks is not None:
        result = _with_sinks(result, call.sinks)
    if not call.lse:
        result = result._replace(lse=None)
    return result


def _with_sinks(result, sinks):
    """Each row's softmax with one more logit per head that takes no
    value (gpt-oss's sinks): the output and weights scaled by `σ(lse -
    sink)`, the row's mass on the real keys; the lse gains the sink."""
    sinks = ops.cast(sinks, result.lse.dtype)[None, :, None]
    kept = ops.sigmoid(result.lse - sinks)
    share = ops.transpose(kept, (0, 2, 1))[..., None]
    output = result.output * ops.cast(share, result.output.dtype)
    weights = result.weights
    if weights is not None:
        weights = weights * ops.cast(kept[..., None], weights.dtype)
    return Result(output, weights, ops.logaddexp(result.lse, sinks))
