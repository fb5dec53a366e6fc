"""The kernel pieces of `GroupedQueryAttention`: its K/V heads broadcast
over their query heads (never repeated), folded into the fused kernel's
query axis, its tensor mask as a mask mod, and its shape checks."""

import keras
from keras import ops

from keras_attention import ops as ka_ops
from keras_attention.layers import _cache
from keras_attention.layers import _chunking


class Untracked:
    """Hides the score layer from Keras's attribute tracking until
    `build`, so that its weights come after Keras's variables."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class TensorMask:
    """Mask mod of a boolean `(batch_size, Tq, Tk)` tensor (broadcast
    to it first), read at the block's indices so that both the dense and
    the chunked path of `flex_attention` can use it."""

    def __init__(self, mask, batch, q_len, k_len):
        mask = ops.broadcast_to(ops.cast(mask, "bool"), (batch, q_len, k_len))
        self.flat = ops.reshape(mask, (-1,))
        self.q_len, self.k_len = q_len, k_len

    def __call__(self, batch, head, q_idx, kv_idx):
        index = (batch * self.q_len + q_idx) * self.k_len + kv_idx
        return ops.take(self.flat, index)


def grouped_weighted_sum(weights, value):
    """`Σ_k w_{b,h,q,k} v_{b,k,h // groups}`: `(B, Tq, H, Dv)`, the K/V
    heads broadcast over their query heads, never repeated."""
    batch, heads, q_len, k_len = ops.shape(weights)
    kv_heads = ops.shape(value)[2]
    grouped = ops.reshape(
        weights, (batch, kv_heads, heads // kv_heads, q_len, k_len)
    )
    out = ops.einsum("bhgqk,bkhd->bqhgd", grouped, value)
    return ops.reshape(out, (batch, q_len, heads, ops.shape(value)[-1]))


def folded_attention(query, key, value, mask, scale):
    """Grouped attention through the fused kernel, K/V heads not repeated.

    The `groups` query heads of a K/V head are folded into its query axis,
    `(B, Tq, Hkv·G, D)` -> `(B, Tq·G, Hkv, D)`, so that
    `keras_attention.ops.dot_product_attention` (FlashAttention's backward)
    attends each K/V head once with `G` times the queries; the mask
    `(B, Tq, Tk)` is repeated over the groups (booleans), the keys and
    values are not. Query head `h` uses K/V head `h // G`, as in Keras.
    """
    batch, q_len, heads, depth = ops.shape(query)
    kv_heads = ops.shape(key)[2]
    groups = heads // kv_heads
    q = ops.reshape(query, (batch, q_len, kv_heads, groups, depth))
    q = ops.reshape(
        ops.swapaxes(q, 2, 3), (batch, q_len * groups, kv_heads, depth)
    )
    if mask is not None:
        mask = ops.broadcast_to(
            ops.expand_dims(ops.expand_dims(mask, -2), 1),
            (batch, 1, q_len, groups, ops.shape(key)[1]),
        )
        mask = ops.reshape(mask, (batch, 1, q_len * groups, ops.shape(key)[1]))
    out = ka_ops.dot_product_attention(q, key, value, mask, scale=scale)
    out = ops.reshape(out, (batch, q_len, groups, kv_heads, -1))
    return ops.reshape(ops.swapaxes(out, 2, 3), (batch, q_len, heads, -1))


def score_weights(score, query, key, mask):
    """The weights `(B, H, Tq, Tk)` of a score with no dot-product form.

    The `G` query heads of each K/V head are folded into its query axis,
    so that the score sees `(B, Hkv, G·Tq, D)` queries against the
    `(B, Hkv, Tk, D)` keys (never repeated); query head `h` scores with
    K/V head `h // G`. `mask` is a boolean `(B, Tq, Tk)` (or broadcastable)
    or `None`; a query with no kept key gets zero weights.
    """
    batch, q_len = ops.shape(query)[0], ops.shape(query)[1]
    heads, depth = query.shape[2], query.shape[3]
    kv_heads = key.shape[2]
    k_len = ops.shape(key)[1]
    q = ops.reshape(query, (batch, q_len, kv_heads, heads // kv_heads, depth))
    q = ops.reshape(
        ops.transpose(q, (0, 2, 3, 1, 4)), (batch, kv_heads, -1, depth)
    )
    logits = score(q, ops.transpose(key, (0, 2, 1, 3)))
    logits = ops.reshape(logits, (batch, heads, q_len, k_len))
    if mask is not None:
        mask = ops.cast(mask, "bool")
        if len(mask.shape) < 4:
            mask = ops.expand_dims(mask, -3)
        mask = ops.broadcast_to(mask, ops.shape(logits))
    return ka_ops.masked_softmax(logits, mask)


def check_score(score, mods):
    """What a score with no dot-product form refuses on the layer."""
    if score.is_dot_product or not any(mod is not None for mod in mods):
        return
    name = getattr(score, "name", type(score).__name__)
    raise ValueError(
        "GroupedQueryAttention: `score_mod` and `mask_mod` need a "
        "dot-product score ('dot', 'scaled_dot', 'cosine' or "
        f"'bilinear'). Received: score={name!r}, score_mod={mods[0]!r}, "
        f"mask_mod={mods[1]!r}"
    )


def score_block(layer, shapes, attention_mask, return_weights, training):
    """`(queries, keys)` per block for a score with no dot-product form
    (additive, concat) on a plain call, `(0, 0)` for dense.

    A positive `chunk_size` chunks unless the weights are asked for (then
    dense, as the dot-product scores of the layer do); it refuses an
    explicit `attention_mask`, which the blocks cannot read. `None`
    chunks where the dense path's `(B, H, Tq, Tk, units)` values would
    pass `_chunking.AUTO_CHUNK_MIN_BYTES`, as `MultiHeadAttention` does.
    """
    dense = (0, 0)
    if layer.chunk_size == 0 or not layer.score.can_chunk or return_weights:
        return dense
    if layer.chunk_size:
        if attention_mask is not None:
            raise ValueError(
                "GroupedQueryAttention with a score that is not a dot "
                "product attends in blocks that take padding masks, causal "
                "masking and `sliding_window` only, not `attention_mask`: "
                "pass chunk_size=0 or None to use it. Received: "
                f"chunk_size={layer.chunk_size}, score={layer.score.name!r}"
            )
        return layer.chunk_size, layer.chunk_size
    if attention_mask is not None or (layer.dropout > 0 and training):
        return dense
    batch, q_len, k_len = shapes
    if not all(isinstance(n, int) for n in (q_len, k_len)):
        return dense
    units = int(layer.score.v.shape[0])
    size = 4 * (batch or 1) * layer.num_query_heads * q_len * k_len * units
    if size < _chunking.AUTO_CHUNK_MIN_BYTES:
        return dense
    return _chunking.AUTO_CHUNK_SIZE, _chunking.AUTO_KEY_CHUNK_SIZE


def cached_score_block(layer, query, key, cache, attention_mask, training):
    """`score_block` for a call with or without a cache: always `(0, 0)`
    with a cache (a positive `chunk_size` there is a `ValueError`, as on
    `MultiHeadAttention`) and for a dot-product score."""
    if layer.score.is_dot_product:
        return (0, 0)
    if cache is None:
        shapes = (query.shape[0], query.shape[1], key.shape[1])
        return score_block(
            layer,
            shapes,
            attention_mask,
            layer._return_attention_scores,
            training,
        )
    if layer.chunk_size:
        raise ValueError(
            "GroupedQueryAttention: a cached call with a positive "
            "`chunk_size` attends in the blocks of `flex_attention`, "
            "which need a dot-product score; pass chunk_size=None or "
            f"0. Received: chunk_size={layer.chunk_size}, "
            f"score={layer.score.name!r}"
        )
    return (0, 0)


def padding_masks(layer, query_mask, value_mask, key_mask, causal):
    """The flags the blocks take, as one `ops.masks.AttentionMasks`."""
    return ka_ops.masks.attention_masks(
        query_mask=query_mask,
        value_mask=value_mask,
        key_mask=key_mask,
        use_causal_mask=causal,
        sliding_window=layer.sliding_window,
    )


def chunked_score_attention(score, query, key, value, masks, block):
    """Grouped attention of an additive or concat score, in blocks.

    `query` `(B, Tq, H, D)`, `key` / `value` `(B, Tk, Hkv, D)`, `masks` a
    `keras_attention.ops.masks.AttentionMasks` of padding masks and a
    band. The query heads are taken one group position at a time: heads
    `g, G + g, ...` pair with K/V heads `0, 1, ...`, so each of the `G`
    calls of `keras_attention.ops.chunked_attention` (memory linear in
    the length) reads the same K/V tensors, never repeated; their
    gradients add up. Returns `(B, Tq, H, Dv)`.
    """
    batch, q_len = ops.shape(query)[0], ops.shape(query)[1]
    heads, depth = query.shape[2], query.shape[3]
    kv_heads = key.shape[2]
    groups = heads // kv_heads
    grouped = ops.reshape(query, (batch, q_len, kv_heads, groups, depth))
    contexts = [
        _chunking.chunked_heads_attention(
            score,
            grouped[:, :, :, g, :],
            key,
            value,
            masks.query_mask,
            (masks.key_mask,),
            False,
            block,
            band=masks.limits,
        )
        for g in range(groups)
    ]
    context = ops.stack(contexts, axis=3)
    return ops.reshape(context, (batch, q_len, heads, ops.shape(value)[-1]))


# Above this many bytes of folded weights, the grouped path is taken.
FOLDED_MAX_BYTES = 2**31


def check_shapes(query_shape, value_shape, key_shape):
    if query_shape[-1] != value_shape[-1]:
        raise ValueError(
            "The last dimension of `query_shape` and `value_shape` must be "
            f"equal, but are {query_shape[-1]}, {value_shape[-1]}. Received: "
            f"query_shape={tuple(query_shape)}, "
            f"value_shape={tuple(value_shape)}"
        )
    if tuple(value_shape[1:-1]) != tuple(key_shape[1:-1]):
        raise ValueError(
            "All dimensions of `value` and `key`, except the last one, must "
            f"be equal. Received: value_shape={tuple(value_shape)} and "
            f"key_shape={tuple(key_shape)}"
        )
    if len(query_shape) != 3 or len(value_shape) != 3:
        raise ValueError(
            "GroupedQueryAttention expects `query`, `value` and `key` of "
            "shape `(batch_size, time, dim)`. Received: "
            f"query.shape={tuple(query_shape)}, value.shape="
            f"{tuple(value_shape)}, key.shape={tuple(key_shape)}"
        )


def output_spec(layer, query, value, key, cache, return_attention_scores):
    """`compute_output_spec`'s result: the output, then the scores
    `(B, num_query_heads, Tq, Tk or max_length)`, then the cache."""
    shape = layer.compute_output_shape(
        query.shape, value.shape, None if key is None else key.shape
    )
    dtype = layer.compute_dtype
    output = keras.KerasTensor(shape, dtype=dtype)
    k_len = (value if key is None else key).shape[1]
    cache_spec = None
    if cache is not None:
        k_len = cache.shape[2]
        cache_spec = keras.KerasTensor(cache.shape, dtype=dtype)
    scores = keras.KerasTensor(
        (query.shape[0], layer.num_query_heads, query.shape[1], k_len),
        dtype=dtype,
    )
    return _cache.outputs(output, scores, cache_spec, return_attention_scores)


def folds(layer, query, key):
    """Whether the fused kernel runs: dense (`chunk_size` 0, or `None`
    with weights under 2 GiB) and the lengths known."""
    if layer.chunk_size:
        return False
    q_len, k_len = query.shape[1], key.shape[1]
    if q_len is None or k_len is None:
        return False
    if layer.chunk_size == 0:
        return True
    batch = query.shape[0] or 1
    size = 4 * batch * layer.num_query_heads * q_len * k_len
    return size <= FOLDED_MAX_BYTES
