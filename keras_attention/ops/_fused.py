"""The fused kernels of a dot product (private module): the engine's
`"fused"` and `"keras_fused"` paths, and `dot_product_attention`'s.

- `fused_attention`: this package's contractions in the projections'
  layout, FlashAttention's backward pass, the log-sum-exp where asked;
  a decoding step's few query rows contracted with the cache as stored.
- `keras_fused_attention`: `keras.ops.dot_product_attention` (on PyTorch
  its fused kernel; no log-sum-exp).

Grouped query heads are folded into the query axis (`ops/_layout.py`),
so each key/value head is read once. Each kernel registers itself in
`ops/_registry.py`, the table `engine.run` reads.
"""

import keras
from keras import ops

from keras_attention.ops import _eager
from keras_attention.ops import _layout
from keras_attention.ops._registry import Result
from keras_attention.ops._registry import register
from keras_attention.ops.checks import logits_dtype
from keras_attention.ops.logits import kept_lse
from keras_attention.ops.logits import masked_lse
from keras_attention.ops.logits import masked_softmax


@register("fused")
def fused(call, plan):
    """This package's fused kernel of the transformed query and key
    (grouped heads folded by the kernel), the log-sum-exp where asked."""
    q, k, scale = call.dot_product_form()
    mask = call.tensor_mask(ops.shape(q)[1], ops.shape(k)[1])
    want_lse = call.lse or call.sinks is not None
    out = fused_attention(q, k, call.value, mask, scale, return_lse=want_lse)
    return Result(out[0], None, out[1]) if want_lse else Result(out)


@register("keras_fused")
def keras_fused(call, plan):
    """Keras's `dot_product_attention` of the transformed query and key
    (grouped heads folded); the planner never gives it a call that needs
    the log-sum-exp."""
    q, k, scale = call.dot_product_form()
    mask = call.tensor_mask(ops.shape(q)[1], ops.shape(k)[1])
    return Result(keras_fused_attention(q, k, call.value, mask, scale))


@_eager.compiled_when_eager
def fused_attention(query, key, value, mask=None, scale=None, return_lse=False):
    """The engine's `"fused"` kernel: `dot_product_attention` by this
    package's contractions and FlashAttention's backward pass, the
    log-sum-exp beside the output where asked."""
    out_dtype = keras.backend.standardize_dtype(value.dtype)
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
    out_dtype = keras.backend.standardize_dtype(value.dtype)
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
