"""The kernels of projected heads, one per path of `ops.plan_attention`.

Queries are `(B, Tq, H, D)`, keys and values `(B, Tk, Hkv, D)` with `Hkv`
dividing `H`: query head `h` attends with key/value head `h // (H //
Hkv)`, as in Keras's `GroupQueryAttention`, and the key/value heads are
broadcast, never repeated in memory. With `Hkv == H` these are the
multi-head kernels (private module).
"""

from keras import ops

from keras_attention import ops as ka_ops


def groups_of(query, key):
    """Query heads per key/value head."""
    return query.shape[2] // key.shape[2]


def _fold_mask(mask, batch, heads, groups, q_len, k_len):
    """A mask broadcastable to `(B, H, Tq, Tk)` as the fused kernel's
    folded `(B, Hkv | 1, Tq·G, Tk)`, query `q·G + g` of head `g`."""
    mask = ops.cast(mask, "bool")
    while len(mask.shape) < 4:
        mask = ops.expand_dims(mask, 0 if len(mask.shape) < 3 else 1)
    per_head = mask.shape[1] not in (None, 1)
    lead = (batch, heads if per_head else 1)
    mask = ops.broadcast_to(mask, lead + (q_len, k_len))
    if not per_head:
        mask = ops.broadcast_to(
            ops.expand_dims(mask, -2), (batch, 1, q_len, groups, k_len)
        )
        return ops.reshape(mask, (batch, 1, q_len * groups, k_len))
    mask = ops.reshape(mask, (batch, heads // groups, groups, q_len, k_len))
    mask = ops.transpose(mask, (0, 1, 3, 2, 4))
    return ops.reshape(mask, (batch, heads // groups, q_len * groups, k_len))


def fused(query, key, value, mask, scale):
    """`keras_attention.ops.dot_product_attention` (FlashAttention's
    backward) on grouped heads: the `G` query heads of a K/V head are
    folded into its query axis, `(B, Tq, Hkv·G, D)` → `(B, Tq·G, Hkv, D)`,
    so each K/V head is attended once with `G` times the queries."""
    groups = groups_of(query, key)
    if groups == 1:
        return ka_ops.dot_product_attention(query, key, value, mask, scale)
    batch, q_len, heads, depth = ops.shape(query)
    kv_heads, k_len = key.shape[2], ops.shape(key)[1]
    q = ops.reshape(query, (batch, q_len, kv_heads, groups, depth))
    q = ops.reshape(
        ops.swapaxes(q, 2, 3), (batch, q_len * groups, kv_heads, depth)
    )
    if mask is not None:
        mask = _fold_mask(mask, batch, heads, groups, q_len, k_len)
    out = ka_ops.dot_product_attention(q, key, value, mask, scale=scale)
    out = ops.reshape(out, (batch, q_len, groups, kv_heads, -1))
    return ops.reshape(ops.swapaxes(out, 2, 3), (batch, q_len, heads, -1))


def flash(query, key, value, mask, scale):
    """`keras.ops.dot_product_attention` with `flash_attention=True`."""
    if mask is not None:
        mask = ops.cast(mask, "bool")
        while len(mask.shape) < 4:
            mask = ops.expand_dims(mask, 0 if len(mask.shape) < 3 else 1)
    dtype = value.dtype
    return ops.dot_product_attention(
        ops.cast(query, dtype),
        ops.cast(key, dtype),
        value,
        mask=mask,
        scale=1.0 if scale is None else scale,
        flash_attention=True,
    )


def logits(score, query, key):
    """The score's logits `(B, H, Tq, Tk)` of grouped heads.

    The `G` query heads of each K/V head are folded into its query axis,
    so that the score sees `(B, Hkv, G·Tq, D)` queries against the
    `(B, Hkv, Tk, D)` keys (never repeated).
    """
    batch, q_len = ops.shape(query)[0], ops.shape(query)[1]
    heads, depth = query.shape[2], query.shape[3]
    kv_heads, k_len = key.shape[2], ops.shape(key)[1]
    q = ops.reshape(query, (batch, q_len, kv_heads, heads // kv_heads, depth))
    q = ops.reshape(
        ops.transpose(q, (0, 2, 3, 1, 4)), (batch, kv_heads, -1, depth)
    )
    s = score(q, ops.transpose(key, (0, 2, 1, 3)))
    return ops.reshape(s, (batch, heads, q_len, k_len))


def dense(logits, value, mask, softmax=None, dropout_fn=None):
    """`(context, weights)` from the logits `(B, H, Tq, Tk)`: masked
    softmax (`softmax(logits, mask)`, e.g. a layer's `_masked_softmax`,
    or `ops.masked_softmax`), dropout, the weighted sum of grouped
    values. The weights (before dropout) in the dtype of `value`."""
    mask = heads_mask(mask, ops.shape(logits))
    weights = (softmax or ka_ops.masked_softmax)(logits, mask)
    weights = ops.cast(weights, value.dtype)
    used = weights if dropout_fn is None else dropout_fn(weights)
    return weighted_sum(used, value), weights


def heads_mask(mask, logits_shape):
    """A mask broadcastable to `(B, H, Tq, Tk)`, with its heads axis."""
    if mask is None:
        return None
    mask = ops.cast(mask, "bool")
    if len(mask.shape) < 4:
        mask = ops.expand_dims(mask, -3)
    return ops.broadcast_to(mask, logits_shape)


def weighted_sum(weights, value):
    """`Σ_k w_{b,h,q,k} v_{b,k,h // G}`: `(B, Tq, H, Dv)`."""
    batch, heads, q_len, k_len = ops.shape(weights)
    kv_heads = value.shape[2]
    value = ops.cast(value, weights.dtype)
    if heads == kv_heads:
        return ops.einsum("bhqk,bkhd->bqhd", weights, value)
    grouped = ops.reshape(
        weights, (batch, kv_heads, heads // kv_heads, q_len, k_len)
    )
    out = ops.einsum("bhgqk,bkhd->bqhgd", grouped, value)
    return ops.reshape(out, (batch, q_len, heads, value.shape[-1]))


def blocks(score, query, key, value, masks, block):
    """`keras_attention.ops.chunked_attention` of grouped heads.

    `masks` is an `ops.masks.AttentionMasks` of padding masks and a band.
    The query heads are taken one group position at a time: heads `g,
    G + g, ...` pair with K/V heads `0, 1, ...`, so each of the `G` calls
    reads the same K/V tensors, never repeated; their gradients add up.
    A dot-product score runs its `dot_product_form`, an additive one its
    `additive_form`.
    """
    batch, q_len = ops.shape(query)[0], ops.shape(query)[1]
    heads, depth = query.shape[2], query.shape[3]
    groups = groups_of(query, key)
    grouped = ops.reshape(query, (batch, q_len, heads // groups, groups, depth))
    first = (0, 2, 1, 3)
    contexts = []
    for g in range(groups):
        q, k = grouped[:, :, :, g, :], key
        additive_v, scale = None, None
        if score.is_dot_product:
            q, k, scale = score.dot_product_form(q, k)
        else:
            q, k, additive_v = score.additive_form(q, k)
        context = ka_ops.chunked_attention(
            ops.transpose(q, first),
            ops.transpose(k, first),
            ops.transpose(value, first),
            scale=1.0 if scale is None else scale,
            query_mask=masks.query_mask,
            key_mask=masks.key_mask,
            query_chunk_size=block[0],
            key_chunk_size=block[1],
            band=masks.limits,
            additive_v=additive_v,
        )
        contexts.append(ops.transpose(context, first))
    if groups == 1:
        return contexts[0]
    context = ops.stack(contexts, axis=3)
    return ops.reshape(context, (batch, q_len, heads, ops.shape(value)[-1]))


def flex(heads, scale, score_mod, mask_mod, options):
    """`(context, weights)` of `(q, k, v)` by `ops.flex_attention`.

    `options` is `(chunk_size, dropout_fn, return_weights)`. With dropout
    or weights to return, the dense weights are formed (and the dropout
    applied to them); otherwise `chunk_size` chooses the path.
    """
    q, k, v = heads
    chunk_size, dropout_fn, return_weights = options
    if dropout_fn is None and not return_weights:
        context = ka_ops.flex_attention(
            q, k, v, score_mod, mask_mod, scale=scale, chunk_size=chunk_size
        )
        return context, None
    _, weights = ka_ops.flex_attention(
        q,
        k,
        v,
        score_mod,
        mask_mod,
        scale=scale,
        chunk_size=0,
        return_attention_scores=True,
    )
    used = weights if dropout_fn is None else dropout_fn(weights)
    return weighted_sum(ops.cast(used, v.dtype), v), weights


def ring(heads, scale, score_mod, masks, chunk_size):
    """`keras_attention.ops.ring_attention` of `(q, k, v)` with the call's
    `ops.masks.AttentionMasks`: its padding masks as the ring's, its band
    and mask mods ANDed (the band's empty device blocks are skipped)."""
    mask_mods = [m for m in (masks.band, *masks.mask_mods) if m is not None]
    mask_mod = None
    if mask_mods:
        mask_mod = (
            mask_mods[0]
            if len(mask_mods) == 1
            else ka_ops.and_masks(*mask_mods)
        )
    return ka_ops.ring_attention(
        *heads,
        mask_mod=mask_mod,
        score_mod=score_mod,
        query_mask=masks.query_mask,
        key_mask=masks.key_mask,
        scale=scale,
        chunk_size=chunk_size,
    )
