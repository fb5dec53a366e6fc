"""Normalisers of attention logits: softmax, hardmax, sparsemax, callables.

A seq2seq mechanism turns its logits into alignments with a probability
function (tfa's `probability_fn`). Masked source positions get weight
exactly `0` whatever the function: their logits are replaced by a large
negative number before it runs and its output is multiplied by the mask
after.
"""

import keras
from keras import ops

from keras_attention import ops as ka_ops

PROBABILITY_FNS = ("softmax", "hardmax", "sparsemax")


def hardmax(logits, axis=-1):
    """One-hot of the arg max over `axis` (tfa's `hardmax`).

    Ties go to the first position. Its gradient is zero: use it at
    inference, or with a model trained with `softmax`.

    Args:
        logits: Float tensor.
        axis: Axis to normalise over. Defaults to `-1`.

    Returns:
        A tensor of the shape and dtype of `logits`.

    Example:

    >>> weights = keras_attention.seq2seq.hardmax(np.array([[1.0, 3.0, 3.0]]))
    >>> np.asarray(weights).tolist()  # ties go to the first
    [[0.0, 1.0, 0.0]]
    """
    ka_ops.checks.probability_logits(logits, axis)
    return ka_ops.one_hot_argmax(logits, axis)


def sparsemax(logits, axis=-1):
    """Sparsemax (Martins & Astudillo, 2016): the projection on the simplex.

    `sparsemax(z) = argmin_{p ∈ Δ} ‖p − z‖²  = max(z − τ(z), 0)`, where
    `τ(z) = (Σ_{j ≤ k(z)} z_(j) − 1) / k(z)`, `z_(1) ≥ z_(2) ≥ ...` the
    sorted logits and `k(z) = max{k : 1 + k z_(k) > Σ_{j ≤ k} z_(j)}`.
    Unlike softmax it gives exact zeros; the weights sum to 1. Computed in
    `float32` for half-precision logits; differentiable (the gradient is
    that of the paper: `Jᵀ g = s ⊙ (g − mean_{s}(g))` over the support).

    Args:
        logits: Float tensor.
        axis: Axis to normalise over. Defaults to `-1`.

    Returns:
        A tensor of the shape and dtype of `logits`.

    Example:

    >>> logits = np.array([[0.8, 0.6, -1.0]], "float32")
    >>> weights = keras_attention.seq2seq.sparsemax(logits)
    >>> np.asarray(weights, "float64").round(4).tolist()
    [[0.6, 0.4, 0.0]]

    References:
        - [Martins & Astudillo, 2016](https://arxiv.org/abs/1602.02068)
    """
    ka_ops.checks.probability_logits(logits, axis)
    logits = ops.convert_to_tensor(logits)
    in_dtype = keras.backend.standardize_dtype(logits.dtype)
    z = ops.moveaxis(ops.cast(logits, ka_ops.logits_dtype(in_dtype)), axis, -1)
    ordered = ops.flip(ops.sort(z, axis=-1), axis=-1)
    cumulative = ops.cumsum(ordered, axis=-1)
    ranks = ops.cast(ops.arange(1, ops.shape(z)[-1] + 1), z.dtype)
    support = ops.cast(1.0 + ranks * ordered > cumulative, z.dtype)
    # The largest logit is always in the support; saying so keeps a row of
    # masked (-1e30) logits, where float32 loses the `1 +`, from 0 / 0.
    size = ops.maximum(ops.sum(support, axis=-1, keepdims=True), 1.0)
    total = ops.sum(support * ordered, axis=-1, keepdims=True)
    threshold = (total - 1.0) / size
    weights = ops.maximum(z - threshold, 0.0)
    return ops.cast(ops.moveaxis(weights, -1, axis), in_dtype)


def check(probability_fn):
    """`probability_fn` if it is a name of `PROBABILITY_FNS` or a callable."""
    if callable(probability_fn) or probability_fn in PROBABILITY_FNS:
        return probability_fn
    raise ValueError(
        "Received an invalid value for argument `probability_fn`, expected "
        f"one of {list(PROBABILITY_FNS)} or a callable mapping logits to "
        f"weights. Received: probability_fn={probability_fn!r}"
    )


def normalize(logits, mask, probability_fn):
    """Weights from `logits` `(..., Tk)`, exactly 0 where `mask` is False.

    `mask` is `None` or a boolean tensor broadcastable to `logits`.
    """
    if probability_fn == "softmax":
        return ka_ops.masked_softmax(logits, mask)
    function = {"hardmax": hardmax, "sparsemax": sparsemax}.get(
        probability_fn, probability_fn
    )
    if mask is None:
        return ops.cast(function(logits), logits.dtype)
    mask = ops.broadcast_to(ops.cast(mask, "bool"), ops.shape(logits))
    filled = ka_ops.mask_logits(logits, mask)
    weights = ops.cast(function(filled), logits.dtype)
    return weights * ops.cast(mask, logits.dtype)


def serialize(probability_fn):
    """The config value of `probability_fn`: its name, or a registered fn."""
    if isinstance(probability_fn, str):
        return probability_fn
    return serialize_callable("probability_fn", probability_fn)


def serialize_callable(argument, function):
    """`{"registered_name": ...}` for a registered function.

    A callable is saved by its registered name
    (`keras.saving.register_keras_serializable`); any other callable (a
    lambda, a local function) could not be loaded back and is refused.
    """
    name = keras.saving.get_registered_name(function)
    if keras.saving.get_registered_object(name) is not function:
        raise ValueError(
            f"A `{argument}` callable must be registered with "
            "`@keras.saving.register_keras_serializable()` for its layer "
            f"to be saved. Received: {argument}={function!r}"
        )
    return {"registered_name": name}


def deserialize(config):
    """Inverse of `serialize`."""
    if isinstance(config, dict):
        return keras.saving.get_registered_object(config["registered_name"])
    return config
