"""Programmable attention: score and mask functions, with block sparsity.

`flex_attention` is attention whose logits pass through a `score_mod` and
whose mask is a `mask_mod`, both plain `keras.ops` functions of integer
index tensors (PyTorch's FlexAttention, Dong et al. 2024, for Keras). It
runs dense (every logit at once, the weights can be returned) or in blocks
(the block kernel of `chunked_attention`: memory linear in the length, a
recomputing backward pass), where a `BlockMask` from `create_block_mask`
skips the blocks its mask empties and does not evaluate it where it keeps
a whole block.
"""

import keras
from keras import ops

from keras_attention.ops import _kernel
from keras_attention.ops import checks
from keras_attention.ops import plan
from keras_attention.ops._kernel import index_tensors
from keras_attention.ops.attend import logits_dtype
from keras_attention.ops.attend import masked_softmax

# Block kinds of a `BlockMask`.
EMPTY, PARTIAL, FULL = 0, 1, 2


def and_masks(*mask_mods):
    """A mask mod that keeps a pair where every one of `mask_mods` does.

    Args:
        *mask_mods: Mask mods, `mask_mod(batch, head, q_idx, kv_idx)`.

    Returns:
        A mask mod; with no argument, one that keeps every pair.

    Example:

    >>> from keras_attention.ops import mods
    >>> window = keras_attention.ops.and_masks(
    ...     mods.causal(), mods.sliding_window(2)
    ... )
    >>> q, kv = keras.ops.arange(3)[:, None], keras.ops.arange(3)[None]
    >>> keras.ops.convert_to_numpy(window(0, 0, q, kv)).astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [0, 1, 1]])
    """
    return MaskCombination("and", mask_mods)


def or_masks(*mask_mods):
    """A mask mod that keeps a pair where any one of `mask_mods` does.

    Args:
        *mask_mods: Mask mods, `mask_mod(batch, head, q_idx, kv_idx)`.

    Returns:
        A mask mod; with no argument, one that keeps no pair.

    Example:

    >>> from keras_attention.ops import mods, or_masks
    >>> q_idx, kv_idx = keras.ops.arange(3)[:, None], keras.ops.arange(3)[None]
    >>> mask_mod = or_masks(mods.causal(), mods.band(left=0, right=1))
    >>> np.asarray(mask_mod(0, 0, q_idx, kv_idx)).astype(int).tolist()
    [[1, 1, 0], [1, 1, 1], [1, 1, 1]]
    """
    return MaskCombination("or", mask_mods)


@keras.saving.register_keras_serializable(package="keras_attention")
class MaskCombination:
    """The AND (`and_masks`) or OR (`or_masks`) of mask mods.

    Args:
        op: `"and"` or `"or"`.
        mask_mods: The mask mods combined.

    Example:

    >>> from keras_attention.ops import and_masks, mods
    >>> recent = and_masks(mods.causal(), mods.sliding_window(2))
    >>> type(recent).__name__, recent.op
    ('MaskCombination', 'and')
    """

    def __init__(self, op, mask_mods):
        if op not in ("and", "or"):
            raise ValueError(
                f"Expected `op` to be 'and' or 'or'. Received: op={op!r}"
            )
        for mod in mask_mods:
            if not callable(mod):
                raise TypeError(
                    "Expected every mask mod to be callable, "
                    f"`mask_mod(batch, head, q_idx, kv_idx)`. Received: {mod!r}"
                )
        self.op = op
        self.mask_mods = tuple(mask_mods)

    def __call__(self, batch, head, q_idx, kv_idx):
        combine = ops.logical_and if self.op == "and" else ops.logical_or
        result = ops.greater_equal(q_idx, q_idx)
        if self.op == "or":
            result = ops.logical_not(result)
        for mod in self.mask_mods:
            keep = ops.cast(mod(batch, head, q_idx, kv_idx), "bool")
            result = combine(result, keep)
        return result

    def get_config(self):
        serialize = keras.saving.serialize_keras_object
        return {
            "op": self.op,
            "mask_mods": [serialize(mod) for mod in self.mask_mods],
        }

    @classmethod
    def from_config(cls, config):
        mods = [
            keras.saving.deserialize_keras_object(mod)
            for mod in config["mask_mods"]
        ]
        return cls(config["op"], mods)


def _pair(received, name):
    value = received
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    ok = isinstance(value, (tuple, list)) and len(value) == 2
    ok = ok and all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
    )
    if not ok:
        raise ValueError(
            f"Expected `{name}` to be a positive integer or a pair of "
            f"positive integers. Received: {name}={received!r}"
        )
    return tuple(value)


class BlockMask:
    """Which blocks of the `(Tq, Tk)` pairs a mask empties or keeps whole.

    Made by `create_block_mask`. `kinds` is an integer tensor
    `(batch, heads, num_query_blocks, num_key_blocks)` (size 1 on an axis
    the mask does not depend on) of `EMPTY` (0, skipped), `PARTIAL` (1, the
    mask is evaluated) and `FULL` (2, no mask is evaluated).

    Attributes:
        mask_mod: The mask mod it was made from.
        kinds: The kind of each block.
        block_size: `(queries, keys)` per block.
        shape: `(batch, heads, q_len, kv_len)` it was made for.

    Example:

    >>> from keras_attention.ops import create_block_mask, mods
    >>> block_mask = create_block_mask(mods.causal(), None, None, 256, 256)
    >>> np.asarray(block_mask.kinds)[0, 0].tolist()  # 0 empty, 2 full
    [[1, 0], [2, 1]]
    """

    def __init__(self, mask_mod, kinds, block_size, shape):
        self.mask_mod = mask_mod
        self.kinds = kinds
        self.block_size = block_size
        self.shape = shape

    def sparsity(self) -> float:
        """The fraction of blocks that are empty (skipped)."""
        empty = ops.cast(ops.equal(self.kinds, EMPTY), "float32")
        return float(ops.convert_to_numpy(ops.mean(empty)))

    def __repr__(self):
        return (
            f"BlockMask(shape={self.shape}, block_size={self.block_size}, "
            f"sparsity={self.sparsity():.2f})"
        )


def create_block_mask(
    mask_mod, batch, heads, q_len: int, kv_len: int, block_size=128
):
    """The `BlockMask` of `mask_mod`: each block empty, partial or full.

    The mask is evaluated once here, on every pair (one row of query
    blocks at a time); `flex_attention` then skips the empty blocks and
    evaluates it only in the partial ones. `flex_attention` makes one
    itself for a `mask_mod` on its chunked path.

    Args:
        mask_mod: `mask_mod(batch, head, q_idx, kv_idx) -> bool`.
        batch: Batch size, or `None` for a mask the same in every example.
        heads: Number of query heads, or `None` for a mask the same in
            every head.
        q_len: Number of queries.
        kv_len: Number of keys.
        block_size: Queries and keys per block, an integer or a pair
            `(queries, keys)`. Defaults to `128`.

    Returns:
        A `BlockMask`.

    Example:

    >>> from keras_attention.ops import mods
    >>> block_mask = keras_attention.ops.create_block_mask(
    ...     mods.causal(), None, None, 8, 8, block_size=4
    ... )
    >>> keras.ops.convert_to_numpy(block_mask.kinds)[0, 0]
    array([[1, 0],
           [2, 1]], dtype=int32)
    """
    if not callable(mask_mod):
        raise TypeError(
            "Expected `mask_mod` to be callable, `mask_mod(batch, head, "
            f"q_idx, kv_idx)`. Received: mask_mod={mask_mod!r}"
        )
    sizes = (("q_len", q_len), ("kv_len", kv_len))
    sizes += tuple(
        (n, v) for n, v in (("batch", batch), ("heads", heads)) if v is not None
    )
    for name, value in sizes:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(
                f"Expected `{name}` to be a positive integer"
                + (" or None" if name in ("batch", "heads") else "")
                + f". Received: {name}={value!r}"
            )
    qb, kb = _pair(block_size, "block_size")
    rows = [
        _block_row(mask_mod, batch, heads, (q_len, kv_len), (qb, kb), r)
        for r in range(-(-q_len // qb))
    ]
    kinds = ops.concatenate(rows, axis=2) if len(rows) > 1 else rows[0]
    shape = (batch, heads, q_len, kv_len)
    return BlockMask(mask_mod, ops.cast(kinds, "int32"), (qb, kb), shape)


def _block_row(mask_mod, batch, heads, lengths, sizes, row):
    """The kinds of query block `row`, `(b, h, 1, num_key_blocks)`.

    One row at a time: the mask of `(b, h, qb, kv_len)` pairs is all that
    is held, with `b` and `h` of size 1 where the mask does not depend on
    them.
    """
    (q_len, kv_len), (qb, kb) = lengths, sizes
    nk = -(-kv_len // kb)
    q_pos = row * qb + ops.arange(qb)
    kv_pos = ops.arange(nk * kb)
    b, h, q, kv = index_tensors(
        1 if batch is None else batch,
        1 if heads is None else heads,
        1,
        q_pos,
        kv_pos,
    )
    b, h, q, kv = (ops.squeeze(t, 2) for t in (b, h, q, kv))
    keep = mask_mod(
        b, h, ops.minimum(q, q_len - 1), ops.minimum(kv, kv_len - 1)
    )
    inside = ops.logical_and(ops.less(q, q_len), ops.less(kv, kv_len))
    keep = ops.logical_and(ops.cast(keep, "bool"), inside)
    while len(keep.shape) < 4:
        keep = ops.expand_dims(keep, 0)
    lead = tuple(ops.shape(keep)[:2])
    keep = ops.broadcast_to(keep, lead + (qb, nk * kb))
    keep = ops.reshape(keep, lead + (1, qb, nk, kb))
    some = ops.any(keep, axis=(3, 5))
    every = ops.all(keep, axis=(3, 5))
    return ops.where(every, FULL, ops.where(some, PARTIAL, EMPTY))


def _check_mod(mod, name):
    if mod is not None and not callable(mod):
        raise TypeError(
            f"Expected `{name}` to be None or callable. Received: "
            f"{name}={mod!r}"
        )


def _block_sizes(chunk_size, block_mask, shapes, return_scores):
    """`(queries, keys)` per block, or `None` for the dense path."""
    valid = chunk_size is None or (
        isinstance(chunk_size, int)
        and not isinstance(chunk_size, bool)
        and chunk_size >= 0
    )
    if not valid:
        raise ValueError(
            "Expected `chunk_size` to be None (automatic), 0 (dense) or a "
            f"positive integer. Received: chunk_size={chunk_size!r}"
        )
    batch, q_len, heads, k_len = shapes
    chosen = plan.plan_attention(
        "dot",
        (batch, heads, q_len, k_len),
        chunk_size,
        mods=True,
        weights=return_scores,
    )
    if return_scores or chunk_size == 0:
        return None
    if block_mask is not None:
        sizes = tuple(block_mask.block_size)
        if chunk_size and sizes != (chunk_size, chunk_size):
            raise ValueError(
                "A positive `chunk_size` must match the block size of "
                f"`block_mask`. Received: chunk_size={chunk_size}, "
                f"block_mask.block_size={sizes}"
            )
        return sizes
    return chosen.block_size


def _check_block_mask(block_mask, q_len, k_len):
    if not isinstance(block_mask, BlockMask):
        raise TypeError(
            "Expected `block_mask` to be None or a `BlockMask` from "
            f"`create_block_mask`. Received: block_mask={block_mask!r}"
        )
    if tuple(block_mask.shape[2:]) != (q_len, k_len):
        raise ValueError(
            "Expected a `block_mask` made for the query and key lengths. "
            f"Received: block_mask.shape={block_mask.shape} for q_len="
            f"{q_len}, kv_len={k_len}"
        )


def _dense(query, key, value, score_mod, mask_mod, scale):
    """Every logit at once: `(output, weights (B, H, Tq, Tk))`."""
    _, q_len, heads, depth = ops.shape(query)
    k_len, kv_heads = ops.shape(key)[1], ops.shape(key)[2]
    groups = heads // kv_heads
    q = ops.reshape(query, (-1, q_len, kv_heads, groups, depth))
    s = ops.einsum("bqhgd,bkhd->bhgqk", q, key) * ops.cast(scale, q.dtype)
    batch = ops.shape(s)[0]
    idx = index_tensors(
        batch, kv_heads, groups, ops.arange(q_len), ops.arange(k_len)
    )
    if score_mod is not None:
        s = ops.cast(score_mod(s, *idx), s.dtype)
    mask = None if mask_mod is None else ops.cast(mask_mod(*idx), "bool")
    weights = masked_softmax(s, mask)
    out = ops.einsum("bhgqk,bkhd->bqhgd", weights, value)
    out = ops.reshape(out, (-1, q_len, heads, ops.shape(value)[-1]))
    return out, ops.reshape(weights, (-1, heads, q_len, k_len))


def _bind_of(score_mod):
    """`(tensors, bind)`: the float tensors a score mod reads, and how to
    make the mod read others (`with_tensors`) in the blocks."""
    tensors = list(getattr(score_mod, "tensors", ()) or ())
    if not tensors:
        return [], lambda _: score_mod
    return tensors, score_mod.with_tensors


def _chunked(tensors, mods, scale, sizes, kinds):
    """The block kernel on `(B, T, H, D)` tensors, in its `(B, Hkv, G, T,
    D)` layout: the query heads grouped by their key/value head."""
    q, k, v = _kernel.to_layout(*tensors[:3])
    score_mod, bind, mask_mod = mods
    spec = _kernel.Spec(
        scale=scale,
        sizes=sizes,
        score_mod=score_mod,
        bind=bind,
        mask_mod=mask_mod,
        kinds=kinds,
    )
    return _kernel.from_layout(_kernel.attend([q, k, v, *tensors[3:]], spec))


def _active_ring():
    """The active `ContextParallel`, or `None` (imported here: the ring's
    module reads this one's mods)."""
    from keras_attention.ops import ring

    return ring.current()


def _ring(tensors, mods, scale, chunk_size, return_scores):
    """`flex_attention` inside a `ContextParallel`: the ring's blocks on
    every device (the planner refuses the weights)."""
    query, key, _ = tensors
    plan.plan_attention(
        "dot",
        (query.shape[0], query.shape[2], query.shape[1], key.shape[1]),
        chunk_size,
        mods=True,
        weights=return_scores,
        ring=True,
    )
    from keras_attention.ops import ring

    return ring.ring_attention(
        *tensors,
        mask_mod=mods[1],
        score_mod=mods[0],
        scale=scale,
        chunk_size=chunk_size or plan.AUTO_CHUNK_SIZE,
    )


def flex_attention(
    query,
    key,
    value,
    score_mod=None,
    mask_mod=None,
    block_mask=None,
    scale=None,
    chunk_size=None,
    return_attention_scores=False,
):
    """Attention with a programmable score and mask (FlexAttention).

    `softmax(score_mod(scale · q·k) masked by mask_mod) · v`, in the layout
    of `keras.ops.dot_product_attention`. `score_mod(score, batch, head,
    q_idx, kv_idx)` returns the new logits and `mask_mod(batch, head,
    q_idx, kv_idx)` whether a pair is kept: `keras.ops` functions of
    integer index tensors that broadcast against a block of logits
    `(batch, kv_heads, groups, Tq, Tk)` (`head` is the query head). A
    query with no kept key gets zero weights and a zero output.
    `keras_attention.ops.mods` holds the usual ones.

    The blocks (`chunk_size` positive, or chosen for long sequences) keep
    memory linear in the length, skip the blocks `block_mask` empties and
    give the dense path's gradients, also those of the tensors a score mod
    declares (`score_mod.tensors`, with `score_mod.with_tensors(new)` to
    read others; the mods of `keras_attention.ops.mods` do). The dense
    path differentiates any score mod.

    Called inside a `keras_attention.distribution.ContextParallel` (JAX),
    it runs `ring_attention`: the sequence split over the devices of the
    mesh axis, the blocks of `chunk_size` (512 by default) on each.

    Args:
        query: `(batch_size, Tq, heads, depth)`.
        key: `(batch_size, Tk, kv_heads, depth)`, `heads % kv_heads == 0`:
            grouped query heads share a key head (broadcast, not copied).
        value: `(batch_size, Tk, kv_heads, Dv)`.
        score_mod: Optional `score_mod(score, batch, head, q_idx, kv_idx)`.
        mask_mod: Optional `mask_mod(batch, head, q_idx, kv_idx)`.
            Defaults to the mask of `block_mask`, if any.
        block_mask: Optional `BlockMask` (`create_block_mask`), whose
            empty blocks the chunked path skips.
        scale: Factor on the logits. Defaults to `1 / sqrt(depth)`.
        chunk_size: `None` (blocks of 512 where the dense weights would
            exceed 2 GiB, a quarter of a GPU's or TPU's memory, or the
            block mask's blocks), `0` (dense) or the
            queries and keys per block. Defaults to `None`.
        return_attention_scores: Whether to also return the weights
            `(batch_size, heads, Tq, Tk)` (dense path). Defaults to `False`.

    Returns:
        The output `(batch_size, Tq, heads, Dv)` in the dtype of `value`,
        and the weights with `return_attention_scores=True`.

    Example:

    >>> from keras_attention.ops import mods
    >>> q = keras.random.normal((2, 6, 4, 8))
    >>> kv = keras.random.normal((2, 6, 2, 8))
    >>> out = keras_attention.ops.flex_attention(
    ...     q, kv, kv, mask_mod=mods.causal()
    ... )
    >>> tuple(out.shape)
    (2, 6, 4, 8)
    """
    query, key, value = (ops.convert_to_tensor(t) for t in (query, key, value))
    checks.grouped_heads("flex_attention", query, key, value)
    _check_mod(score_mod, "score_mod")
    _check_mod(mask_mod, "mask_mod")
    q_len, k_len = query.shape[1], key.shape[1]
    if block_mask is not None:
        _check_block_mask(block_mask, q_len, k_len)
        mask_mod = mask_mod if mask_mod is not None else block_mask.mask_mod
    if _active_ring() is not None:
        return _ring(
            (query, key, value),
            (score_mod, mask_mod),
            scale,
            chunk_size,
            return_attention_scores,
        )
    shapes = (query.shape[0], q_len, query.shape[2], k_len)
    sizes = _block_sizes(
        chunk_size, block_mask, shapes, return_attention_scores
    )
    out_dtype = keras.backend.standardize_dtype(value.dtype)
    dtype = logits_dtype(out_dtype)
    query, key, value = (ops.cast(t, dtype) for t in (query, key, value))
    if scale is None:
        scale = 1.0 / float(query.shape[-1]) ** 0.5
    if sizes is None:
        out, weights = _dense(query, key, value, score_mod, mask_mod, scale)
        out = ops.cast(out, out_dtype)
        if return_attention_scores:
            return out, ops.cast(weights, out_dtype)
        return out
    mod_tensors, bind = _bind_of(score_mod)
    mod_tensors = [ops.cast(t, dtype) for t in mod_tensors]
    kinds = None if block_mask is None else block_mask.kinds
    static = isinstance(q_len, int) and isinstance(k_len, int)
    if kinds is None and mask_mod is not None and static:
        # The blocks the mask empties are skipped, the full ones trusted.
        # Blocks no longer than the lengths, as the kernel cuts them: a
        # cached decoding step (one query) evaluates one row of the mask.
        batch = ops.shape(query)[0]
        plan_sizes = (min(sizes[0], q_len), min(sizes[1], k_len))
        kinds = create_block_mask(
            mask_mod, batch, shapes[2], q_len, k_len, plan_sizes
        ).kinds
    mods = (score_mod, bind, mask_mod)
    tensors = [query, key, value, *mod_tensors]
    out = _chunked(tensors, mods, scale, sizes, kinds)
    return ops.cast(out, out_dtype)


def apply_mods(logits, score_mod=None, mask_mod=None):
    """A score mod and a mask mod on dense logits `(B, [H,] Tq, Tk)`.

    What a layer that forms its logits itself (a single-head `Attention`)
    does with the mods of `flex_attention`; the head index is `0` without
    a heads axis.

    Args:
        logits: `(batch_size, heads, Tq, Tk)` or `(batch_size, Tq, Tk)`.
        score_mod: Optional `score_mod(score, batch, head, q_idx, kv_idx)`.
        mask_mod: Optional `mask_mod(batch, head, q_idx, kv_idx)`.

    Returns:
        `(logits, mask)`: the modded logits and the boolean mask that
        broadcasts against them (`None` without `mask_mod`).

    Example:

    >>> from keras_attention.ops import apply_mods, mods
    >>> logits = np.zeros((1, 3, 3), "float32")
    >>> logits, mask = apply_mods(logits, mods.soft_cap(5.0), mods.causal())
    >>> np.asarray(mask).reshape(3, 3).astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    rank = len(logits.shape)
    shape = ops.shape(logits)
    heads = shape[1] if rank == 4 else 1
    idx = index_tensors(
        shape[0], heads, 1, ops.arange(shape[-2]), ops.arange(shape[-1])
    )
    # `(B, Hkv, 1, Tq, Tk)` index tensors → the logits' rank.
    idx = [ops.squeeze(t, 2) for t in idx]
    if rank == 3:
        idx = [ops.squeeze(t, 1) for t in idx]
    mask = None
    if score_mod is not None:
        logits = ops.cast(score_mod(logits, *idx), logits.dtype)
    if mask_mod is not None:
        mask = ops.cast(mask_mod(*idx), "bool")
    return logits, mask
