"""Backend-agnostic attention math written with `keras.ops`.

Layers call these functions; they hold no state and create no variables, so
they can be used on their own, inside a custom layer or in a `keras.ops`
graph on any backend (TensorFlow, JAX, PyTorch).

Masks are boolean with `True` meaning "attend". A row of logits whose keys
are all masked gets all-zero weights (never NaN, never uniform).
"""

from collections.abc import Callable

import keras
from keras import ops

_HALF_DTYPES = ("float16", "bfloat16")


def logits_dtype(dtype) -> str:
    """The dtype softmax is computed in: `float32` for half precision."""
    dtype = keras.backend.standardize_dtype(dtype)
    return "float32" if dtype in _HALF_DTYPES else dtype


def _to_standard_dtype(dtype) -> str:
    return keras.backend.standardize_dtype(dtype)


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
    """
    logits = ops.convert_to_tensor(logits)
    in_dtype = _to_standard_dtype(logits.dtype)
    x = ops.cast(logits, logits_dtype(in_dtype))
    if mask is None:
        return ops.cast(ops.softmax(x, axis=axis), in_dtype)
    mask = ops.cast(mask, "bool")
    mask = ops.broadcast_to(mask, ops.shape(x))
    # The fill value only has to lose to every unmasked logit: masked
    # positions are zeroed again after `exp`, which is what makes an
    # all-masked slice come out as zeros instead of a uniform distribution.
    x = ops.where(mask, x, ops.full_like(x, -1e30))
    x = x - ops.stop_gradient(ops.max(x, axis=axis, keepdims=True))
    e = ops.exp(x) * ops.cast(mask, x.dtype)
    total = ops.sum(e, axis=axis, keepdims=True)
    # Dividing by 1 where the total is 0 keeps fully masked slices at 0 and
    # their gradient finite.
    safe_total = ops.where(total > 0, total, ops.ones_like(total))
    return ops.cast(e / safe_total, in_dtype)


def causal_mask(query_length: int, key_length: int):
    """Lower-triangular boolean mask: query `i` sees keys `j <= i`.

    The same convention as `keras.layers.MultiHeadAttention`.

    Returns:
        Boolean tensor of shape `(query_length, key_length)`.
    """
    rows = ops.expand_dims(ops.arange(query_length), -1)
    cols = ops.expand_dims(ops.arange(key_length), 0)
    return ops.greater_equal(rows, cols)


def combine_masks(
    query_length,
    key_length,
    query_mask=None,
    value_mask=None,
    key_mask=None,
    attention_mask=None,
    use_causal_mask: bool = False,
):
    """Combines the padding, explicit and causal masks into one.

    Args:
        query_length: Number of query positions `Tq`.
        key_length: Number of key positions `Tk`.
        query_mask: Optional `(batch_size, Tq)`; a masked query gets no key.
        value_mask: Optional `(batch_size, Tk)`.
        key_mask: Optional `(batch_size, Tk)`, combined with `value_mask`.
        attention_mask: Optional `(batch_size, Tq, Tk)` or `(Tq, Tk)`, or one
            with extra leading axes (e.g. heads) that broadcasts.
        use_causal_mask: Whether query `i` may only see keys `j <= i`.

    Returns:
        A boolean tensor that broadcasts to `(batch_size, Tq, Tk)`, or `None`
        when no mask applies.
    """
    mask = None

    def _and(a, b):
        b = ops.cast(b, "bool")
        return b if a is None else ops.logical_and(a, b)

    for padding in (value_mask, key_mask):
        if padding is not None:
            mask = _and(mask, ops.expand_dims(padding, -2))
    if query_mask is not None:
        mask = _and(mask, ops.expand_dims(query_mask, -1))
    if attention_mask is not None:
        mask = _and(mask, attention_mask)
    if use_causal_mask:
        mask = _and(mask, causal_mask(query_length, key_length))
    return mask


def attention(
    query,
    key,
    value,
    score_fn: Callable | None = None,
    mask=None,
    dropout_fn: Callable | None = None,
):
    """Soft attention: `context_i = sum_j softmax_j(s(q_i, k_j)) v_j`.

    Args:
        query: `(..., Tq, Dq)`.
        key: `(..., Tk, Dk)`.
        value: `(..., Tk, Dv)`.
        score_fn: Callable mapping `(query, key)` to logits `(..., Tq, Tk)`.
            Defaults to the scaled dot product `q·k / sqrt(Dk)`.
        mask: Optional boolean mask broadcastable to `(..., Tq, Tk)`.
        dropout_fn: Optional callable applied to the weights before they
            multiply the values (the returned weights are pre-dropout).

    Returns:
        Tuple `(context, weights)`: `(..., Tq, Dv)` in the dtype of `value`,
        and `(..., Tq, Tk)` in the dtype of `value`.
    """
    if score_fn is None:
        score_fn = scaled_dot_product
    logits = score_fn(query, key)
    weights = masked_softmax(logits, mask)
    weights = ops.cast(weights, value.dtype)
    applied = dropout_fn(weights) if dropout_fn is not None else weights
    return ops.matmul(applied, value), weights


def dot_product(query, key):
    """Logits `q·k`, computed in `float32` for half-precision inputs."""
    dtype = logits_dtype(_to_standard_dtype(query.dtype))
    query, key = ops.cast(query, dtype), ops.cast(key, dtype)
    return ops.matmul(query, ops.swapaxes(key, -1, -2))


def scaled_dot_product(query, key):
    """Logits `q·k / sqrt(Dk)`, computed in `float32` for half precision."""
    dtype = logits_dtype(_to_standard_dtype(query.dtype))
    depth = ops.cast(ops.shape(key)[-1], dtype)
    # Scaling the query first keeps the product small in float16 too.
    query = ops.cast(query, dtype) / ops.sqrt(depth)
    return dot_product(query, ops.cast(key, dtype))


def frobenius_penalty(weights):
    """Lin et al.'s redundancy penalty `mean_batch ‖AAᵀ − I‖²_F`.

    Args:
        weights: Attention matrix `A` of shape `(batch_size, hops, time)`.

    Returns:
        Scalar: the squared Frobenius norm of `AAᵀ − I`, averaged over the
        batch.
    """
    weights = ops.convert_to_tensor(weights)
    dtype = logits_dtype(_to_standard_dtype(weights.dtype))
    a = ops.cast(weights, dtype)
    gram = ops.matmul(a, ops.swapaxes(a, -1, -2))
    identity = ops.eye(ops.shape(a)[-2], dtype=dtype)
    return ops.mean(ops.sum(ops.square(gram - identity), axis=(-2, -1)))
