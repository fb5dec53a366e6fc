"""The kernel pieces of `GroupedQueryAttention`: its K/V heads broadcast
over their query heads (never repeated), folded into the fused kernel's
query axis, its tensor mask as a mask mod, and its shape checks."""

from keras import ops

from keras_attention import ops as ka_ops


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
