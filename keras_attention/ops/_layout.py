"""The kernels' layout of grouped heads, and masks in it (private module).

Heads come as `(batch, T, heads, depth)`, the layout of
`keras.ops.dot_product_attention`, with `Hkv` key/value heads dividing the
`H` query heads. Every kernel works in one layout: the query
`(B, Hkv, G, Tq, D)` (the `G = H // Hkv` query heads of a key/value head
side by side, query head `h = kv_head · G + g`, as in Keras's
`GroupQueryAttention`) and the key and value `(B, Hkv, 1, Tk, D)`, which
broadcast against the groups and are never repeated. Logits, weights and
masks are `(B, Hkv, G, Tq, Tk)`; a mask of fewer axes is first given the
4-D form `(B, H, Tq, Tk)` by Keras's rule (a 3-D mask is `(B, Tq, Tk)`, a
2-D one `(Tq, Tk)`). This module is the only place either is written.
"""

from keras import ops


def group(query, kv_heads: int):
    """`(B, Tq, H, D)` → `(B, Hkv, G, Tq, D)`."""
    _, q_len, heads, depth = ops.shape(query)
    q = ops.reshape(query, (-1, q_len, kv_heads, heads // kv_heads, depth))
    return ops.transpose(q, (0, 2, 3, 1, 4))


def ungroup(x):
    """`(B, Hkv, G, Tq, D)` → `(B, Tq, H, D)`."""
    _, kv_heads, groups, q_len, depth = ops.shape(x)
    x = ops.transpose(x, (0, 3, 1, 2, 4))
    return ops.reshape(x, (-1, q_len, kv_heads * groups, depth))


def key_value(x):
    """`(B, Tk, Hkv, D)` → `(B, Hkv, 1, Tk, D)`."""
    return ops.transpose(x, (0, 2, 1, 3))[:, :, None]


def to_layout(query, key, value):
    """`(B, T, H, D)` query, key and value in the kernels' layout."""
    kv_heads = ops.shape(key)[2]
    return group(query, kv_heads), key_value(key), key_value(value)


def heads(x):
    """`(B, Hkv, G, Tq, Tk)` → `(B, H, Tq, Tk)` (weights, a free reshape)."""
    batch, kv_heads, groups, q_len, k_len = ops.shape(x)
    return ops.reshape(x, (batch, kv_heads * groups, q_len, k_len))


def rows(lse):
    """Per-query values `(B, Hkv, G, Tq, 1)` → `(B, H, Tq)`."""
    batch, kv_heads, groups, q_len, _ = ops.shape(lse)
    return ops.reshape(lse, (batch, kv_heads * groups, q_len))


def four_d(x):
    """A mask or bias of rank 2 `(Tq, Tk)`, 3 `(B, Tq, Tk)` or 4 `(B, H,
    Tq, Tk)` with Keras's axes: a batch axis, then a heads axis, of size 1
    where missing."""
    x = ops.convert_to_tensor(x)
    while len(x.shape) < 4:
        x = ops.expand_dims(x, 0 if len(x.shape) < 3 else 1)
    return x


def grouped(x, kv_heads: int):
    """A mask or bias broadcastable to `(B, H, Tq, Tk)` (any rank 2-4) →
    `(B | 1, Hkv | 1, G | 1, Tq, Tk)`, broadcastable to the logits."""
    x = four_d(x)
    heads_axis = x.shape[1]
    if heads_axis in (None, 1):
        return ops.expand_dims(x, 2)
    batch, _, q_len, k_len = ops.shape(x)
    return ops.reshape(
        x, (batch, kv_heads, heads_axis // kv_heads, q_len, k_len)
    )


def fold(query, kv_heads: int):
    """`(B, Tq, H, D)` → `(B, Tq · G, Hkv, D)`, query `q · G + g`: the
    fused kernel's layout, each K/V head attended once by all the queries
    of its group (a 4-D product: under `jax.jit` the 5-D one with a
    groups' axis ran GroupedQueryAttention's step 1.7x slower)."""
    batch, q_len, heads, depth = ops.shape(query)
    groups = heads // kv_heads
    if groups == 1:
        return query
    q = ops.reshape(query, (batch, q_len, kv_heads, groups, depth))
    q = ops.swapaxes(q, 2, 3)
    return ops.reshape(q, (batch, q_len * groups, kv_heads, depth))


def unfold(x, groups: int):
    """Inverse of `fold` for the output: `(B, Tq · G, Hkv, D)` → `(B, Tq,
    H, D)`."""
    if groups == 1:
        return x
    batch, rows, kv_heads, depth = ops.shape(x)
    x = ops.reshape(x, (batch, rows // groups, groups, kv_heads, depth))
    x = ops.swapaxes(x, 2, 3)
    return ops.reshape(x, (batch, rows // groups, kv_heads * groups, depth))


def fold_mask(mask):
    """A grouped mask `(B | 1, Hkv | 1, G | 1, Tq, Tk)` in `fold`'s layout,
    `(B | 1, Hkv | 1, Tq · G, Tk)`."""
    lead, groups = tuple(ops.shape(mask)[:2]), mask.shape[2]
    q_len, k_len = ops.shape(mask)[3], ops.shape(mask)[4]
    mask = ops.swapaxes(mask, 2, 3)
    return ops.reshape(mask, lead + (q_len * groups, k_len))


def folded_mask(mask, kv_heads: int, groups: int, q_len):
    """A boolean mask broadcastable to `(B, H, Tq, Tk)` (any rank 2-4) in
    `fold`'s layout for `groups` query heads per K/V head, `(B | 1, Hkv |
    1, Tq · G | 1, Tk)`: the fused kernels' one grouped mask."""
    mask = ops.cast(mask, "bool")
    if groups == 1:
        return four_d(mask)
    mask = grouped(mask, kv_heads)
    if mask.shape[2] == 1 and mask.shape[3] == 1:
        return ops.squeeze(mask, 2)  # the same for every folded query
    full = (groups, q_len, ops.shape(mask)[-1])
    mask = ops.broadcast_to(mask, tuple(ops.shape(mask)[:2]) + full)
    return fold_mask(mask)


def unfold_rows(lse, groups: int):
    """The fused kernel's per-query values `(B, Hkv, Tq · G, 1)` → `(B,
    H, Tq)`."""
    batch, kv_heads, rows, _ = ops.shape(lse)
    lse = ops.reshape(lse, (batch, kv_heads, rows // groups, groups))
    lse = ops.swapaxes(lse, 2, 3)
    return ops.reshape(lse, (batch, kv_heads * groups, rows // groups))


def index_tensors(batch, kv_heads, groups, q_pos, kv_pos):
    """`(batch, head, q_idx, kv_idx)` broadcasting to `(B, Hkv, G, Tq, Tk)`:
    the index tensors a mod reads; `head` is the query head."""
    b = ops.reshape(ops.arange(batch, dtype="int32"), (-1, 1, 1, 1, 1))
    h = ops.arange(kv_heads * groups, dtype="int32")
    h = ops.reshape(h, (1, kv_heads, groups, 1, 1))
    q = ops.reshape(ops.cast(q_pos, "int32"), (1, 1, 1, -1, 1))
    kv = ops.reshape(ops.cast(kv_pos, "int32"), (1, 1, 1, 1, -1))
    return b, h, q, kv
