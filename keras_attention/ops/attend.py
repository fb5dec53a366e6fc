"""The attend step: logits → mask → float32 softmax → dropout → weighted sum.

Every attention layer and seq2seq mechanism normalises its logits with
`masked_softmax` and combines the values with `attend` (or, for multi-head
dot-product scores, the fused `dot_product_attention`), so the masking,
precision and fully-masked-row rules hold the same way everywhere.
"""

from collections.abc import Callable

import keras
from keras import ops

from keras_attention.ops import _eager
from keras_attention.ops import _layout
from keras_attention.ops import checks
from keras_attention.ops.checks import logits_dtype
from keras_attention.ops.logits import kept_lse
from keras_attention.ops.logits import mask_logits
from keras_attention.ops.logits import masked_lse
from keras_attention.ops.plan import fused_path


def _to_standard_dtype(dtype) -> str:
    return keras.backend.standardize_dtype(dtype)


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
    in_dtype = _to_standard_dtype(logits.dtype)
    x = ops.cast(logits, logits_dtype(in_dtype))
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


@_eager.compiled_when_eager
def fused_attention(query, key, value, mask=None, scale=None, return_lse=False):
    """The engine's `"fused"` kernel: `dot_product_attention` by this
    package's contractions and FlashAttention's backward pass, the
    log-sum-exp beside the output where asked."""
    out_dtype = _to_standard_dtype(value.dtype)
    dtype = logits_dtype(out_dtype)
    query, key = ops.cast(query, dtype), ops.cast(key, dtype)
    if scale is not None:
        query = query * scale
    if return_lse:
        # The output is formed in the logits dtype, beside the lse.
        value = ops.cast(value, dtype)
    kv_heads = key.shape[2]
    groups = query.shape[2] // kv_heads
    if mask is not None:
        mask = _layout.folded_mask(mask, kv_heads, groups, ops.shape(query)[1])
    out, lse = _fused_attention(
        _layout.fold(query, kv_heads), key, value, mask, return_lse
    )
    out = ops.cast(_layout.unfold(out, groups), out_dtype)
    if not return_lse:
        return out
    return out, kept_lse(_layout.unfold_rows(lse, groups))


@_eager.compiled_when_eager
def keras_fused_attention(query, key, value, mask=None, scale=None):
    """The engine's `"keras_fused"` kernel: `keras.ops.dot_product_attention`
    (on PyTorch its fused `scaled_dot_product_attention`, forward and
    backward), which gives no log-sum-exp.

    A Python `scale` goes to the kernel, as Keras's layer passes it (a
    multiplication of the queries and its gradient fewer); a tensor one
    scales the queries. Grouped query heads are folded into the query
    axis (`_layout.fold`), so the kernel reads each K/V head once.

    Measured on CPU (B=8, N=512, D=256, 8 heads, fwd+bwd, BENCHMARKS.md):
    about 1.8x faster than `fused_attention`'s einsums there. A query
    with no kept key attends to every key instead (some PyTorch kernels
    give NaN there; 2.13's CPU kernel gives zeros) and its output is set
    to zero, the package's rule, so its gradients are zero too.
    """
    out_dtype = _to_standard_dtype(value.dtype)
    dtype = logits_dtype(out_dtype)
    query, key = ops.cast(query, dtype), ops.cast(key, dtype)
    kv_heads = key.shape[2]
    groups = query.shape[2] // kv_heads
    kept = None
    if mask is not None:
        mask = _layout.folded_mask(mask, kv_heads, groups, ops.shape(query)[1])
        kept, mask = _kept_rows(mask)
    q, scale = _scaled(_layout.fold(query, kv_heads), scale)
    out = ops.dot_product_attention(
        q, key, ops.cast(value, dtype), mask=mask, scale=scale
    )
    if kept is not None:
        out = ops.where(ops.transpose(kept, (0, 2, 1, 3)), out, 0.0)
    return ops.cast(_layout.unfold(out, groups), out_dtype)


def _kept_rows(mask):
    """`(kept, mask)`: which rows `(..., Tq, 1)` of a boolean mask keep a
    key, and the mask with the others kept whole (their output is set to
    zero afterwards)."""
    kept = ops.any(mask, axis=-1, keepdims=True)
    return kept, ops.logical_or(mask, ops.logical_not(kept))


def _scaled(query, scale):
    """`(query, scale)` for the kernel: a Python scale goes to it, a
    tensor one scales the queries."""
    if scale is None:
        return query, 1.0
    if isinstance(scale, (int, float)):
        return query, scale
    return query * scale, 1.0


def _fused_attention(query, key, value, mask, return_lse):
    """`(output, lse)` of the query `(B, Tq', Hkv, D)` (its groups folded
    in, `_layout.fold`; scaled, in the logits dtype) against the key and
    value `(B, Tk, Hkv, D)`, a mask broadcastable to the logits `(B, Hkv,
    Tq', Tk)`: the output `(B, Tq', Hkv, Dv)`, the lse `(B, Hkv, Tq', 1)`
    or `None`.

    The inputs keep the layout of the projections; the `(Tq, Tk)` tensors
    are the right-hand operand of the contractions over the query axis:
    under XLA the swapped order measured about 1.4x slower (see
    BENCHMARKS.md). A query of few rows (a decoding step) is contracted
    with every head of each key slot (`_few_rows_logits`).
    """

    @ops.custom_gradient
    def fused(query, key, value):
        logits = _query_key(query, key)
        weights = masked_softmax(logits, mask)
        cast_weights = ops.cast(weights, value.dtype)
        output = _weighted_values(cast_weights, value)
        packed = output
        if return_lse:
            lse = masked_lse(logits, mask)
            packed = ops.concatenate(
                [output, ops.transpose(lse, (0, 2, 1, 3))], axis=-1
            )

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            d_lse = None
            if return_lse:
                upstream, d_lse = upstream[..., :-1], upstream[..., -1:]
            # The contractions over the query axis produce `(b, n, d, k)`
            # and transpose that small result: TensorFlow's einsum would
            # otherwise transpose a `(Tq, Tk)` operand (graph mode about 5%
            # faster over the whole kernel; XLA the same; BENCHMARKS.md).
            d_value = _keys_last(upstream, cast_weights)
            # The row term of the softmax gradient, `d_weights - row`, comes
            # out of one matmul: `[dout, -row] · [v, 1]` (one pass less over
            # the `(Tq, Tk)` tensors; graph mode about 4% faster). Both are
            # formed in the logits dtype: where the weights are one-hot the
            # two nearly cancel, and rounding either one to float16 leaves a
            # spurious gradient that can overflow float16 (where autodiff
            # gives 0). The log-sum-exp's gradient joins the row term.
            dtype = weights.dtype
            upstream_wide = ops.cast(upstream, dtype)
            value_wide = ops.cast(value, dtype)
            row = ops.sum(
                upstream_wide * ops.cast(output, dtype), axis=-1, keepdims=True
            )
            if d_lse is not None:
                row = row - ops.cast(d_lse, dtype)
            d_weights_less_row = ops.einsum(
                "bqnd,bknd->bnqk",
                ops.concatenate([upstream_wide, -row], axis=-1),
                ops.concatenate(
                    [value_wide, ops.ones_like(value_wide[..., :1])], axis=-1
                ),
            )
            d_logits = weights * d_weights_less_row
            d_query = ops.einsum("bnqk,bknd->bqnd", d_logits, key)
            d_key = _keys_last(query, d_logits)
            return d_query, d_key, d_value

        return packed, grad

    packed = fused(query, key, value)
    if not return_lse:
        return packed, None
    return packed[..., :-1], ops.transpose(packed[..., -1:], (0, 2, 1, 3))


#: The most query rows per key/value head (`Tq · G`) that
#: `_few_rows_logits` and `_few_rows_output` contract.
FEW_ROWS = 4


def _few_rows(rows, heads):
    """Whether `rows` query rows per key/value head (`Tq'`) are at most
    `FEW_ROWS`, against keys or values `heads` `(B, Tk, Hkv, ·)` of a
    known length: a decoding step, which `_few_rows_logits` and
    `_few_rows_output` contract."""
    static = (rows, *heads.shape[1:])
    known = all(isinstance(size, int) for size in static)
    return known and rows <= FEW_ROWS


def _query_key(query, key):
    """`einsum("bqnd,bknd->bnqk")`: the logits of the folded query, by
    `_few_rows_logits` for a decoding step's few rows."""
    if _few_rows(query.shape[1], key):
        return _few_rows_logits(query, key)
    return ops.einsum("bqnd,bknd->bnqk", query, key)


def _weighted_values(weights, value):
    """`einsum("bnqk,bknd->bqnd")`: the output of the weights, by
    `_few_rows_output` for a decoding step's few rows."""
    if _few_rows(weights.shape[2], value):
        return _few_rows_output(weights, value)
    return ops.einsum("bnqk,bknd->bqnd", weights, value)


def _same_head(products, first, second):
    """`products` with its two heads' axes `first < second` (each of size
    `Hkv`: the query's, the key's or value's) reduced to their diagonal,
    at `first`: each query head's products with its own key/value
    head."""
    taken = []
    for head in range(products.shape[first]):
        index = [slice(None)] * len(products.shape)
        index[first], index[second] = head, head
        taken.append(products[tuple(index)])
    return ops.stack(taken, axis=first)


def _few_rows_logits(query, key):
    """`einsum("bqnd,bknd->bnqk")` of a query of few rows (`_few_rows`)
    `(B, Tq', Hkv, D)`, with the key in its own layout.

    A product with the heads as a batch axis reads the key `(B, Tk, Hkv,
    D)` heads first: XLA copies the whole key, transposed, at every
    step, and in a decoding loop that copy of the cache cost more than
    the attention (a 4-layer Llama of width 256, 264 cache slots, 2 of
    its 4 heads for keys and values, batch 1, on a 2-core AVX-512 EPYC:
    27 us of the step's 60 us per layer, a copy each for the keys and
    the values). So each key slot's every head `(B, Tk · Hkv, D)` is
    multiplied by every query row of every head `(B, D, Hkv · Tq')`, one
    plain product of the key as stored, and each query head keeps its
    own key head's products: `Hkv` times the multiplications, of few
    rows. Each logit is the same sum over `D`."""
    _, length, kv_heads, depth = key.shape
    rows = query.shape[1]
    keys = ops.reshape(key, (-1, length * kv_heads, depth))
    queries = ops.transpose(query, (0, 3, 2, 1))
    queries = ops.reshape(queries, (-1, depth, kv_heads * rows))
    products = ops.matmul(keys, queries)
    products = ops.reshape(products, (-1, length, kv_heads, kv_heads, rows))
    return ops.transpose(_same_head(products, 2, 3), (0, 2, 3, 1))


def _few_rows_output(weights, value):
    """`einsum("bnqk,bknd->bqnd")` of the weights of a query of few rows
    (`_few_rows`) with the value `(B, Tk, Hkv, Dv)` in its own layout:
    every query row of every head `(B, Hkv · Tq', Tk)` times each key
    slot's every value head `(B, Tk, Hkv · Dv)`, each query head's
    products with its own value head kept (`_few_rows_logits`)."""
    _, length, kv_heads, depth = value.shape
    rows = weights.shape[2]
    weights = ops.reshape(weights, (-1, kv_heads * rows, length))
    values = ops.reshape(value, (-1, length, kv_heads * depth))
    products = ops.matmul(weights, values)
    products = ops.reshape(products, (-1, kv_heads, rows, kv_heads, depth))
    return ops.transpose(_same_head(products, 1, 3), (0, 2, 1, 3))


def _keys_last(per_query, weights):
    """`einsum("bqnd,bnqk->bknd")`, contracted as `(b, n, d, k)` first."""
    product = ops.einsum("bqnd,bnqk->bndk", per_query, weights)
    return ops.transpose(product, (0, 3, 1, 2))


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
