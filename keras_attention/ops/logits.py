"""What is done to logits: masking, the softmax, argmax, sampling.

One definition each, which the layers, the seq2seq mechanisms, the
kernels and the decoders call: the fill of masked logits
(`MASKED_LOGIT`, `mask_logits`), their softmax (`masked_softmax`) and
log-sum-exp (`masked_lse`, `kept_lse`), the `exp` of log-weights
(`exp_floored`), the one-hot of the arg max
(`one_hot_argmax`, hard attention and `hardmax`) and sampling by
inverting the cumulative distribution (`inverse_cdf_sample`, sampling
decoders and scheduled sampling).
"""

import keras
from keras import ops

from keras_attention.ops import _eager
from keras_attention.ops import checks

#: The logit of a masked position. It only has to lose to every kept
#: logit: its `exp` underflows to exactly 0 in a float32 softmax (and it
#: is `-inf` in float16). Finite, so that `0 * MASKED_LOGIT` is 0.
MASKED_LOGIT = -1e30

# A logit above this was not masked (a margin below any real logit, above
# `MASKED_LOGIT` whatever the rounding).
_KEPT_ABOVE = -1e29


def mask_logits(logits, mask):
    """`logits` where `mask` is `True`, `MASKED_LOGIT` elsewhere.

    Args:
        logits: Float tensor.
        mask: Boolean tensor broadcastable to `logits`, `True` = keep.

    Returns:
        A tensor of the shape (broadcast) and dtype of `logits`.

    Example:

    >>> logits = keras_attention.ops.mask_logits(
    ...     np.array([1.0, 2.0]), np.array([True, False])
    ... )
    >>> (keras.ops.convert_to_numpy(logits) < -1e29).tolist()
    [False, True]
    """
    return ops.where(mask, logits, MASKED_LOGIT)


@_eager.compiled_when_eager
def masked_softmax(logits, mask=None, axis: int = -1):
    """Softmax over `axis` that ignores masked positions.

    Half-precision logits are promoted to `float32` before the softmax and the
    weights are cast back, so large logits under mixed precision neither
    overflow nor lose the winner. Positions where `mask` is `False` get weight
    exactly `0`; a slice whose positions are all masked gets all-zero weights.

    Args:
        logits: Float tensor of any rank.
        mask: Optional boolean tensor broadcastable to `logits`; `True`
            keeps a position.
        axis: Axis to normalise over. Defaults to `-1`.

    Returns:
        Weights with the shape and dtype of `logits`.

    Example:

    >>> logits = np.array([[1.0, 2.0, 3.0]], "float32")
    >>> mask = np.array([[True, True, False]])
    >>> weights = keras_attention.ops.masked_softmax(logits, mask)
    >>> np.asarray(weights, "float64").round(3).tolist()
    [[0.269, 0.731, 0.0]]
    """
    checks.floating("masked_softmax", logits=logits)
    logits = ops.convert_to_tensor(logits)
    checks.broadcasts_to("masked_softmax", mask, logits)
    in_dtype = keras.backend.standardize_dtype(logits.dtype)
    x = ops.cast(logits, checks.logits_dtype(in_dtype))
    if mask is None and x.shape[axis] != 1:
        # Without a mask the backend's softmax is one fused kernel. It is
        # skipped for a single key, where `keras.ops.softmax` warns (one
        # key is a legitimate attention input).
        return ops.cast(ops.softmax(x, axis=axis), in_dtype)
    if x.shape[axis] == 1:
        # One key: weight 1 where it is kept (no softmax kernel, see above).
        weights = ops.ones_like(x)
        if mask is not None:
            weights = weights * ops.cast(mask, x.dtype)
        return ops.cast(weights, in_dtype)
    mask = ops.cast(mask, "bool")
    axis = axis - len(x.shape) if axis >= 0 else axis
    if len(mask.shape) < -axis:
        # A mask without the normalised axis (it broadcasts from the
        # right): reduce over the axis of the logits.
        mask = ops.broadcast_to(mask, ops.shape(x))
    # The fill value only has to lose to every unmasked logit: its `exp`
    # underflows to exactly 0 in the fused softmax kernel. A slice with no
    # kept position would come out uniform: it is multiplied by 0, from the
    # mask as given (before broadcasting, so usually a small tensor). Three
    # passes over the logits instead of eight (measured: a causal
    # self-attention step at N = 4096 took 2.9x the unmasked one in
    # TensorFlow graph mode with the eight).
    x = mask_logits(x, mask)
    weights = ops.softmax(x, axis=axis)
    kept = ops.any(mask, axis=axis, keepdims=True)
    return ops.cast(weights * ops.cast(kept, x.dtype), in_dtype)


#: The floor of `exp_floored`'s argument on PyTorch: `exp(-80)` is
#: 1.8e-35, a normal float32.
EXP_FLOOR = -80.0


def exp_floored(x):
    """`exp(x)` of log-weights (logits less their row's log-sum-exp or
    maximum), the argument floored at `EXP_FLOOR` on PyTorch.

    PyTorch's CPU `exp` takes a slow path for an argument below about
    -87 (a masked logit, or a result below float32's smallest normal
    number): on a 2-core AVX-512 EPYC, `(8, 512, 512)` logits took 2.0
    ms, 10-12 ms with half of them at `-1e9` or float32's lowest and 40
    ms with all of them near -95 (BENCHMARKS.md); TensorFlow's and
    XLA's do not. A weight below `exp(-80)` becomes `exp(-80)`, 1.8e-35
    at most more against a row's largest weight of 1: a caller masks
    the weights of masked positions afterwards, or sums them with that
    weight of 1.

    Example:

    >>> w = keras_attention.ops.logits.exp_floored(np.array([0.0, -1.0]))
    >>> np.round(keras.ops.convert_to_numpy(w), 4).tolist()
    [1.0, 0.3679]
    """
    if keras.backend.backend() == "torch":
        x = ops.maximum(x, EXP_FLOOR)
    return ops.exp(x)


def masked_lse(logits, mask=None):
    """The log-sum-exp over the last axis of `logits` where `mask` keeps
    them, `(..., 1)`; about `MASKED_LOGIT` for a row with no kept logit
    (`kept_lse` makes that `-inf`), `-inf` for a row of `-inf` logits.

    Example:

    >>> lse = keras_attention.ops.logits.masked_lse(
    ...     np.array([[0.0, 0.0, 5.0]], "float32"),
    ...     np.array([[True, True, False]]),
    ... )
    >>> np.round(keras.ops.convert_to_numpy(lse).astype("float64"), 4)
    array([[0.6931]])
    """
    x = ops.convert_to_tensor(logits)
    x = x if mask is None else mask_logits(x, mask)
    top = ops.max(x, axis=-1, keepdims=True)
    finite = ops.isfinite(top)
    shift = ops.stop_gradient(ops.where(finite, top, 0.0))
    total = ops.sum(exp_floored(x - shift), axis=-1, keepdims=True)
    # A row whose largest logit is not finite (all `-inf`: a score mod's,
    # or float16's masked fill) has that logit as its log-sum-exp.
    return ops.where(finite, shift + ops.log(total), top)


def kept_lse(lse):
    """A log-sum-exp of masked logits, `-inf` where no logit was kept.

    A row whose keys are all masked sums `exp(MASKED_LOGIT)`; its
    log-sum-exp is returned as `-inf`, as PyTorch's FlexAttention returns
    it, so that `exp(lse)` is exactly `0`.

    Example:

    >>> lse = keras_attention.ops.logits.kept_lse(np.array([0.5, -1e30]))
    >>> keras.ops.convert_to_numpy(lse).tolist()
    [0.5, -inf]
    """
    return ops.where(lse > _KEPT_ABOVE, lse, -float("inf"))


def one_hot_argmax(logits, axis: int = -1):
    """The one-hot of the arg max of `logits` over `axis` (ties: the first).

    Its gradient is zero (it is a constant of the logits).

    Args:
        logits: Float tensor.
        axis: Axis of the choice. Defaults to `-1`.

    Returns:
        A tensor of the shape and dtype of `logits`, `1` at the arg max.

    Example:

    >>> hot = keras_attention.ops.one_hot_argmax(np.array([[1.0, 3.0, 3.0]]))
    >>> keras.ops.convert_to_numpy(hot).tolist()
    [[0.0, 1.0, 0.0]]
    """
    logits = ops.convert_to_tensor(logits)
    last = axis in (-1, len(logits.shape) - 1)
    moved = logits if last else ops.moveaxis(logits, axis, -1)
    choice = ops.argmax(moved, axis=-1)
    positions = ops.arange(ops.shape(moved)[-1], dtype=choice.dtype)
    hot = ops.cast(
        ops.equal(ops.expand_dims(choice, -1), positions), logits.dtype
    )
    return hot if last else ops.moveaxis(hot, -1, axis)


def inverse_cdf_sample(logits, uniform):
    """One sample of `softmax(logits)` per row, at the uniform numbers.

    The first index whose cumulative probability exceeds `uniform` times
    the total (which rounding keeps near 1): a draw of the distribution
    when `uniform` is uniform in `[0, 1)`. Never a masked position after
    the last kept one (`MASKED_LOGIT`), whatever the rounding.

    Args:
        logits: `(batch_size, num_classes)` float logits.
        uniform: `(batch_size,)` numbers in `[0, 1)`.

    Returns:
        `int32` `(batch_size,)` indices.

    Example:

    >>> logits = np.log(np.array([[0.25, 0.75], [0.25, 0.75]]))
    >>> index = keras_attention.ops.inverse_cdf_sample(
    ...     logits, np.array([0.2, 0.3])
    ... )
    >>> keras.ops.convert_to_numpy(index).tolist()
    [0, 1]
    """
    cumulative = ops.cumsum(ops.softmax(logits, axis=-1), axis=-1)
    u = ops.cast(uniform, cumulative.dtype)[:, None] * cumulative[:, -1:]
    index = ops.sum(ops.cast(cumulative <= u, "int32"), axis=-1)
    last = ops.argmax(
        ops.cast(logits > _KEPT_ABOVE, "int32") * ops.arange(logits.shape[-1]),
        axis=-1,
    )
    return ops.minimum(index, ops.cast(last, "int32"))
