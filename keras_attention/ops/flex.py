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

from keras import ops

from keras_attention.ops import checks
from keras_attention.ops import engine
from keras_attention.ops import ring
from keras_attention.ops._layout import index_tensors
from keras_attention.ops.explain import explain_call
from keras_attention.ops.mask_mods import BlockMask
from keras_attention.ops.mask_mods import keep
from keras_attention.ops.masks import AttentionMasks


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
    return_lse=False,
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

    The call is planned once (`keras_attention.ops.plan_attention`): the
    blocks (`chunk_size` positive, or chosen where the dense step would be
    large or where a band or a block mask leaves few blocks) keep memory
    linear in the length, skip the blocks `block_mask` empties and give
    the dense path's gradients, also those of the tensors a score mod
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
        chunk_size: `None` (automatic, `plan_attention`: blocks of 512,
            256 on JAX, or the block mask's, where the dense step would
            pass 1 GiB on a CPU, a quarter of a GPU's or TPU's memory, or
            where the mask leaves few blocks), `0` (dense) or the queries
            and keys per block. Defaults to `None`.
        return_attention_scores: Whether to also return the weights
            `(batch_size, heads, Tq, Tk)` (dense path). Defaults to `False`.
        return_lse: Whether to also return the log-sum-exp of each row of
            scaled, modded, masked logits, `(batch_size, heads, Tq)` in
            `float32` (`-inf` for a query with no kept key), with
            gradients through it (PyTorch's `AuxRequest(lse=True)`).
            Defaults to `False`.

    Returns:
        The output `(batch_size, Tq, heads, Dv)` in the dtype of `value`,
        then the weights with `return_attention_scores=True`, then the
        log-sum-exp with `return_lse=True`.

    Example:

    >>> from keras_attention.ops import mods
    >>> q = keras.random.normal((2, 6, 4, 8))
    >>> kv = keras.random.normal((2, 6, 2, 8))
    >>> out, lse = keras_attention.ops.flex_attention(
    ...     q, kv, kv, mask_mod=mods.causal(), return_lse=True
    ... )
    >>> tuple(out.shape), tuple(lse.shape)
    ((2, 6, 4, 8), (2, 4, 6))
    """
    call, flags = _flex_call(
        "flex_attention",
        query,
        key,
        value,
        score_mod,
        mask_mod,
        block_mask,
        scale,
        return_attention_scores,
        return_lse,
    )
    plan = engine.plan_call(call, chunk_size, **flags)
    result = engine.run(call, plan)
    outputs = (result.output,)
    if return_attention_scores:
        outputs += (result.weights,)
    if return_lse:
        outputs += (result.lse,)
    return outputs[0] if len(outputs) == 1 else outputs


def explain_attention(
    query,
    key,
    value,
    score_mod=None,
    mask_mod=None,
    block_mask=None,
    scale=None,
    chunk_size=None,
    return_attention_scores=False,
    return_lse=False,
    training=True,
):
    """Which kernel `flex_attention` runs for exactly this call, and why.

    The arguments are `flex_attention`'s; the call is planned as
    `flex_attention` plans it (the same record, the same `plan_attention`)
    and not run. `training` says whether the step is differentiated (its
    backward pass counts in the estimate; on PyTorch, autograd's answer
    counts instead).

    Returns:
        A `keras_attention.ops.explain.Explanation`: `.path` (the kernel,
        `Plan.path`), `.reason`, `.block_size`, the bytes of the dense
        step it counted (`.step_bytes`, against `.threshold`), and
        `.alternatives`, what another `chunk_size` would choose.

    Example:

    >>> from keras_attention.ops import mods
    >>> q = np.zeros((1, 8, 2, 4), "float32")
    >>> explained = keras_attention.ops.explain_attention(
    ...     q, q, q, mask_mod=mods.causal(), chunk_size=4
    ... )
    >>> explained.path, explained.block_size, explained.alternatives[0]
    ('blocks', (4, 4), 'dense')
    """
    call, flags = _flex_call(
        "explain_attention",
        query,
        key,
        value,
        score_mod,
        mask_mod,
        block_mask,
        scale,
        return_attention_scores,
        return_lse,
    )
    backward = bool(training)
    plan = engine.plan_call(call, chunk_size, backward, **flags)
    return explain_call(call, plan, chunk_size, backward, **flags)


def _flex_call(
    name,
    query,
    key,
    value,
    score_mod,
    mask_mod,
    block_mask,
    scale,
    return_attention_scores,
    return_lse,
):
    """`(AttentionCall, flags)` of a `flex_attention` call: its record
    and what `engine.plan_call` is told beside it."""
    # Before the conversion, which on JAX refuses NumPy text in its words.
    checks.floating(name, query=query, key=key, value=value)
    query, key, value = (ops.convert_to_tensor(t) for t in (query, key, value))
    checks.grouped_heads(name, query, key, value)
    checks.mod("score_mod", score_mod)
    checks.mod("mask_mod", mask_mod)
    block_size = None
    if block_mask is not None:
        _check_block_mask(block_mask, query.shape[1], key.shape[1])
        mask_mod = mask_mod if mask_mod is not None else block_mask.mask_mod
        block_size = block_mask.block_size
    if scale is None:
        scale = 1.0 / float(query.shape[-1]) ** 0.5
    call = engine.AttentionCall(
        query,
        key,
        value,
        engine.ScaledDot(scale),
        masks=AttentionMasks(mask_mods=(mask_mod,)),
        score_mod=score_mod,
        block_mask=block_mask,
        weights=bool(return_attention_scores),
        lse=bool(return_lse),
    )
    flags = dict(ring=bool(ring.ACTIVE), block_size=block_size)
    return call, flags


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
        mask = keep(mask_mod, *idx)
    return logits, mask
