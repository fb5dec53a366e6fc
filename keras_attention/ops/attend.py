"""The attend step: logits → mask → float32 softmax → dropout → weighted sum.

Every attention layer and seq2seq mechanism normalises its logits with
`masked_softmax` (`ops/logits.py`) and combines the values with `attend`
(or, for multi-head dot-product scores, the fused `dot_product_attention`,
whose kernels are `ops/_fused.py`'s), so the masking, precision and
fully-masked-row rules hold the same way everywhere.
"""

from collections.abc import Callable

import keras
from keras import ops

from keras_attention.ops import checks
from keras_attention.ops._fused import fused_attention
from keras_attention.ops._fused import keras_fused_attention
from keras_attention.ops.checks import logits_dtype
from keras_attention.ops.logits import masked_softmax
from keras_attention.ops.plan import fused_path


def _to_standard_dtype(dtype) -> str:
    return keras.backend.standardize_dtype(dtype)


def attend(logits, value, mask=None, dropout_fn: Callable | None = None):
    """The attend step: `context = softmax(logits, masked) · value`.

    The logits are normalised by `masked_softmax` (in `float32` for half
    precision), cast to the dtype of `value`, passed through `dropout_fn`
    and used to weight the values.

    Args:
        logits: `(..., Tq, Tk)`.
        value: `(..., Tk, Dv)`, with the same leading axes as `logits`.
        mask: Optional boolean mask broadcastable to `(..., Tq, Tk)`, e.g.
            from `combine_masks`.
        dropout_fn: Optional callable applied to the weights before they
            multiply the values (the returned weights are pre-dropout).

    Returns:
        Tuple `(context, weights)`: `(..., Tq, Dv)` and `(..., Tq, Tk)`,
        both in the dtype of `value`.

    Example:

    >>> logits = np.zeros((1, 1, 3), "float32")
    >>> value = np.array([[[1.0], [3.0], [5.0]]], "float32")
    >>> mask = np.array([True, True, False])
    >>> context, weights = keras_attention.ops.attend(logits, value, mask)
    >>> np.asarray(weights).tolist(), np.asarray(context).tolist()
    ([[[0.5, 0.5, 0.0]]], [[[2.0]]])
    """
    checks.floating("attend", logits=logits, value=value)
    checks.weights_fit_values(logits, value)
    weights = ops.cast(masked_softmax(logits, mask), value.dtype)
    applied = dropout_fn(weights) if dropout_fn is not None else weights
    return ops.matmul(applied, value), weights


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
        score_fn: Callable mapping `(query, key)` to logits `(..., Tq, Tk)`,
            such as a `keras_attention.scores` layer. Defaults to the scaled
            dot product `q·k / sqrt(Dk)`.
        mask: Optional boolean mask broadcastable to `(..., Tq, Tk)`.
        dropout_fn: Optional callable applied to the weights before they
            multiply the values (the returned weights are pre-dropout).

    Returns:
        Tuple `(context, weights)`: `(..., Tq, Dv)` in the dtype of `value`,
        and `(..., Tq, Tk)` in the dtype of `value`.

    Example:

    >>> q = np.ones((2, 3, 4), "float32")
    >>> k = v = np.ones((2, 5, 4), "float32")
    >>> context, weights = keras_attention.ops.attention(q, k, v)
    >>> tuple(context.shape), tuple(weights.shape)
    ((2, 3, 4), (2, 3, 5))
    """
    checks.floating("attention", query=query, key=key, value=value)
    checks.attention_shapes(query, key, value, same_depth=score_fn is None)
    if score_fn is None:
        score_fn = scaled_dot_product
    return attend(score_fn(query, key), value, mask, dropout_fn)


def dot_product(query, key, scale=None):
    """Logits `scale · q·k`, computed in `float32` for half-precision inputs.

    Args:
        query: `(..., Tq, D)`.
        key: `(..., Tk, D)`.
        scale: Optional factor on the logits, applied to the query (which
            costs `Tq·D` products instead of `Tq·Tk`). Defaults to `None`,
            no scaling.

    Returns:
        Logits `(..., Tq, Tk)`.

    Example:

    >>> q = np.array([[[1.0, 2.0]]], "float32")
    >>> k = np.array([[[3.0, 4.0], [1.0, 0.0]]], "float32")
    >>> np.asarray(keras_attention.ops.dot_product(q, k, scale=0.5)).tolist()
    [[[5.5, 0.5]]]
    """
    checks.floating("dot_product", query=query, key=key)
    checks.attention_shapes(query, key, key, same_depth=True)
    dtype = logits_dtype(_to_standard_dtype(query.dtype))
    query, key = ops.cast(query, dtype), ops.cast(key, dtype)
    if scale is not None:
        query = query * scale
    return ops.matmul(query, ops.swapaxes(key, -1, -2))


def scaled_dot_product(query, key):
    """Logits `q·k / sqrt(Dk)`, computed in `float32` for half precision.

    Example:

    >>> q = np.ones((1, 1, 4), "float32")
    >>> k = np.array([[[1.0] * 4, [0.0] * 4]], "float32")
    >>> np.asarray(keras_attention.ops.scaled_dot_product(q, k)).tolist()
    [[[2.0, 0.0]]]
    """
    checks.floating("scaled_dot_product", query=query, key=key)
    dtype = logits_dtype(_to_standard_dtype(query.dtype))
    depth = ops.cast(ops.shape(key)[-1], dtype)
    return dot_product(query, key, scale=1.0 / ops.sqrt(depth))


def dot_product_attention(
    query, key, value, mask=None, scale=None, return_lse: bool = False
):
    """`softmax(scale · q·k, masked) v` on `(batch, T, heads, depth)` tensors.

    The layout is that of `keras.ops.dot_product_attention` and of the
    projections of `keras.layers.MultiHeadAttention`; the weights are never
    returned, which lets the backward pass be the one of FlashAttention
    (Dao et al. 2022): the row term of the softmax gradient,
    `Σ_k w_qk dw_qk`, equals `dout_q · out_q`, a sum over `depth` instead of
    over `Tk`, which saves two passes over the `(Tq, Tk)` weights. The key
    and value may have fewer heads than the query (grouped-query
    attention): query head `h` attends with key/value head `h // (heads //
    kv_heads)`, broadcast, never repeated.

    Args:
        query: `(batch_size, Tq, heads, depth)`.
        key: `(batch_size, Tk, kv_heads, depth)`, `heads % kv_heads == 0`.
        value: `(batch_size, Tk, kv_heads, Dv)`.
        mask: Optional boolean mask broadcastable to
            `(batch_size, heads, Tq, Tk)` (`combine_masks(...,
            heads_axis=True)`); of rank 3 it is `(batch_size, Tq, Tk)`.
        scale: Factor on the logits. Defaults to `None`, no scaling.
        return_lse: Whether to also return the log-sum-exp of each row of
            scaled, masked logits, `(batch_size, heads, Tq)` in `float32`
            (`-inf` for a query with no kept key), with gradients through
            it. Defaults to `False`.

    Returns:
        The context `(batch_size, Tq, heads, Dv)` in the dtype of `value`,
        and the log-sum-exp with `return_lse=True`. Logits and softmax are
        in `float32` for half-precision inputs.

    Example:

    >>> q = np.random.rand(2, 5, 4, 8).astype("float32")  # (B, Tq, heads, D)
    >>> kv = np.random.rand(2, 7, 4, 8).astype("float32")
    >>> out = keras_attention.ops.dot_product_attention(q, kv, kv, scale=0.35)
    >>> tuple(out.shape)
    (2, 5, 4, 8)
    """
    checks.grouped_heads("dot_product_attention", query, key, value)
    if fused_path(return_lse) == "keras_fused":
        return keras_fused_attention(query, key, value, mask, scale)
    return fused_attention(query, key, value, mask, scale, return_lse)


def frobenius_penalty(weights):
    """Lin et al.'s redundancy penalty `mean_batch ‖AAᵀ − I‖²_F`.

    Args:
        weights: Attention matrix `A` of shape `(batch_size, hops, time)`.

    Returns:
        Scalar: the squared Frobenius norm of `AAᵀ − I`, averaged over the
        batch.

    Example:

    >>> disjoint = np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], "float32")
    >>> same = np.array([[[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]], "float32")
    >>> penalty = keras_attention.ops.frobenius_penalty
    >>> [float(penalty(a)) for a in (disjoint, same)]
    [0.0, 2.0]
    """
    checks.floating("frobenius_penalty", weights=weights)
    weights = ops.convert_to_tensor(weights)
    dtype = logits_dtype(_to_standard_dtype(weights.dtype))
    a = ops.cast(weights, dtype)
    gram = ops.matmul(a, ops.swapaxes(a, -1, -2))
    identity = ops.eye(ops.shape(a)[-2], dtype=dtype)
    return ops.mean(ops.sum(ops.square(gram - identity), axis=(-2, -1)))
