"""The kernels of the engine, one per path of the planner (private module).

Each takes an `engine.AttentionCall` and its `Plan` and gives an
`engine.Result`: the output `(B, Tq, H, Dv)`, the weights where asked and
the log-sum-exp of each row. They work in the one layout of grouped heads
(`ops/_layout.py`); the band and the mods read absolute positions (the
call's `query_offset` added), the explicit mask and the bias the call's
own.

- `dense`: every logit at once, through the score; the weights can be
  returned, dropped out, activated, or normalised by a layer's softmax.
- `fused` and `keras_fused`: the fused kernels of a dot product, in
  `ops/_fused.py`.
- `flash`: `keras.ops.dot_product_attention(..., flash_attention=True)`.
- `blocks`: the block kernel (`ops/_kernel.py`), memory linear in the
  length, the blocks a band or a `BlockMask` empties skipped.
- `ring`: `keras_attention.ops.ring_attention` over the devices of the
  active `ContextParallel`.

Each registers itself in `ops/_registry.py`, the table `engine.run`
reads; the backends' own fused kernels (`torch_flex`, `sdpa`, `cudnn`,
`pallas`) by `ops/_native_torch.py` and `ops/_native_jax.py`, imported
on the first look-up of one of their paths (`ops/_native.py`).
"""

from keras import ops

from keras_attention.ops import _eager
from keras_attention.ops import _kernel
from keras_attention.ops import _layout
from keras_attention.ops._call_mods import at_positions
from keras_attention.ops._call_mods import block_mods
from keras_attention.ops._registry import Result
from keras_attention.ops._registry import register
from keras_attention.ops.checks import logits_dtype
from keras_attention.ops.logits import kept_lse
from keras_attention.ops.logits import masked_lse
from keras_attention.ops.logits import masked_softmax
from keras_attention.ops.mask_mods import PARTIAL
from keras_attention.ops.mask_mods import and_masks
from keras_attention.ops.mask_mods import create_block_mask
from keras_attention.ops.ring import ring_attention


def _dense_mask(call, q_len, k_len):
    """The tensor masks of the call in the grouped layout, or `None`."""
    mask = call.tensor_mask(q_len, k_len)
    return None if mask is None else _layout.grouped(mask, call.key.shape[2])


def _logits(call, dtype):
    """The logits `(B, Hkv, G, Tq, Tk)` of the score."""
    query, key = call.query, call.key
    kv_heads = key.shape[2]
    if call.score.form == "dot":
        q, k, scale = call.dot_product_form()
        q, k = _layout.group(ops.cast(q, dtype), kv_heads), ops.cast(k, dtype)
        if scale is not None:
            q = q * ops.cast(scale, dtype)
        k = ops.transpose(k, (0, 2, 3, 1))[:, :, None]
        return ops.matmul(q, k)
    batch, q_len = ops.shape(query)[0], ops.shape(query)[1]
    k_len, depth = ops.shape(key)[1], query.shape[-1]
    q = ops.reshape(
        _layout.group(query, kv_heads), (batch, kv_heads, -1, depth)
    )
    s = call.score(q, ops.transpose(key, (0, 2, 1, 3)))
    return ops.reshape(ops.cast(s, dtype), (batch, kv_heads, -1, q_len, k_len))


@register("dense")
def dense(call, plan):
    """Every logit at once: logits → activation → mods → masks → softmax
    → dropout → the weighted sum of the grouped values."""
    dtype = logits_dtype(call.value.dtype)
    logits = _logits(call, dtype)
    if call.activation is not None:
        logits = ops.cast(call.activation(logits), dtype)
    batch, kv_heads, groups, q_len, k_len = ops.shape(logits)
    idx = _layout.index_tensors(
        batch, kv_heads, groups, ops.arange(q_len), ops.arange(k_len)
    )
    score_mod = at_positions(call, call.score_mod)
    if score_mod is not None:
        logits = ops.cast(score_mod(logits, *idx), dtype)
    if call.bias is not None:
        bias = _layout.grouped(ops.cast(call.bias, dtype), kv_heads)
        logits = logits + bias
    mask = _dense_mask(call, q_len, k_len)
    if call.masks.mask_mods:
        # The band is in the tensor mask already; the mods are evaluated.
        mods = [at_positions(call, m) for m in call.masks.mask_mods]
        kept = ops.cast(and_masks(*mods)(*idx), "bool")
        mask = kept if mask is None else ops.logical_and(mask, kept)
    weights = _softmax(call, logits, mask)
    lse = None
    if call.lse or call.sinks is not None:
        lse = kept_lse(_layout.rows(masked_lse(logits, mask)))
    weights = ops.cast(weights, call.value.dtype)
    used = weights if call.dropout is None else call.dropout(weights)
    v = _layout.key_value(ops.cast(call.value, weights.dtype))
    output = _layout.ungroup(ops.matmul(used, v))
    return Result(output, _layout.heads(weights) if call.weights else None, lse)


def _softmax(call, logits, mask):
    """The masked softmax of the logits, or a layer's own on `(B, H, Tq,
    Tk)` (Keras's `_masked_softmax` hook)."""
    if call.softmax is None:
        return masked_softmax(logits, mask)
    shape = ops.shape(logits)
    logits_4d = _layout.heads(logits)
    if mask is not None:
        mask = _layout.heads(ops.broadcast_to(mask, shape))
    weights = call.softmax(logits_4d, mask)
    return ops.reshape(weights, shape)


@register("flash")
def flash(call, plan):
    """`keras.ops.dot_product_attention` with `flash_attention=True`."""
    q, k, scale = call.dot_product_form()
    mask = call.tensor_mask(ops.shape(q)[1], ops.shape(k)[1])
    if mask is not None:
        mask = _layout.four_d(ops.cast(mask, "bool"))
    dtype = call.value.dtype
    out = ops.dot_product_attention(
        ops.cast(q, dtype),
        ops.cast(k, dtype),
        call.value,
        mask=mask,
        scale=1.0 if scale is None else scale,
        flash_attention=True,
    )
    return Result(out)


def _forms(call, dtype):
    """The kernel's first tensors and `(scale, additive)`: the score's dot
    product or additive form, in the grouped layout. Quantized keys and
    values stay quantized (the blocks dequantize them; `engine.run` asks
    this only of a score whose form keeps the keys)."""
    if call.key_scale is not None:
        q, _, scale = call.dot_product_form(call.key[:, :0])
        q = ops.cast(q, dtype)
        return list(_layout.to_layout(q, call.key, call.value)), (
            1.0 if scale is None else scale
        )
    if call.score.form == "dot":
        q, k, scale = call.dot_product_form()
        extra, scale = [], 1.0 if scale is None else scale
    else:
        q, k, additive_v = call.additive_form()
        extra, scale = [additive_v], 1.0
    q, k, v = (ops.cast(t, dtype) for t in (q, k, call.value))
    tensors = list(_layout.to_layout(q, k, v))
    return tensors + [ops.cast(t, dtype) for t in extra], scale


def _scales(call, dtype):
    """`(key_scale, value_scale)` of quantized keys and values in the
    layout of the keys, `(B, Hkv, 1, Tk, 1)`, or `(None, None)`."""
    if call.key_scale is None:
        return None, None
    return tuple(
        _layout.key_value(ops.cast(s, dtype)[..., None])
        for s in (call.key_scale, call.value_scale)
    )


@register("blocks")
def blocks(call, plan):
    """The block kernel: an online softmax over blocks, the pairs that
    the band or the block mask empties skipped."""
    quantized = call.key_scale is not None
    out_dtype = call.query.dtype if quantized else call.value.dtype
    dtype = logits_dtype(out_dtype)
    tensors, scale = _forms(call, dtype)
    score_mod, mask_mod, limits = block_mods(call)
    mod_tensors = list(getattr(score_mod, "tensors", ()) or ())
    bind = score_mod.with_tensors if mod_tensors else (lambda _: score_mod)
    kinds = _kinds(call, mask_mod, plan.block_size)
    spec = _kernel.Spec(
        scale=scale,
        sizes=plan.block_size,
        additive=call.score.form != "dot",
        score_mod=score_mod,
        bind=bind,
        mask_mod=mask_mod,
        query_mask=call.masks.query_mask,
        key_mask=call.masks.key_mask,
        limits=limits,
        kinds=kinds,
        scales=_scales(call, dtype),
        band_only=not call.masks.mask_mods
        and call.masks.attention_mask is None,
    )
    tensors += [ops.cast(t, dtype) for t in mod_tensors]
    out, lse = _kernel.attend(tensors, spec)
    output = ops.cast(_layout.ungroup(out), out_dtype)
    return Result(output, None, kept_lse(_layout.rows(lse)))


def _kinds(call, mask_mod, block_size):
    """The kinds of the blocks: the call's `BlockMask`, or one made of a
    mask mod other than a band where the lengths are static (so that the
    blocks it empties are skipped and those it keeps whole not masked).
    With padding masks, which the mask mod does not hold, a block the mod
    keeps whole is still masked (partial)."""
    if call.block_mask is not None:
        kinds = call.block_mask.kinds
    else:
        q_len, k_len = call.shapes[2:]
        others = call.masks.mask_mods or call.masks.attention_mask is not None
        static = isinstance(q_len, int) and isinstance(k_len, int)
        if mask_mod is None or not others or not static:
            return None
        sizes = (min(block_size[0], q_len), min(block_size[1], k_len))
        batch = ops.shape(call.query)[0]
        heads = call.query.shape[2]
        kinds = _block_kinds(mask_mod, batch, heads, q_len, k_len, sizes)
    padded = (
        call.masks.query_mask is not None or call.masks.key_mask is not None
    )
    if padded:
        kinds = ops.minimum(kinds, PARTIAL)
    return kinds


@_eager.compiled_when_eager
def _block_kinds(mask_mod, batch, heads, q_len, k_len, sizes):
    """The kinds of `create_block_mask(mask_mod, ...)` (eager JAX: one
    program for a mod of this package's, not one per operation)."""
    return create_block_mask(mask_mod, batch, heads, q_len, k_len, sizes).kinds


@register("ring")
def ring(call, plan):
    """`keras_attention.ops.ring_attention`: the blocks on every device
    of the active `ContextParallel`, the key/value blocks passed round."""
    q, k, scale = call.dot_product_form()
    score_mod, mask_mod, _ = block_mods(call)
    out, lse = ring_attention(
        q,
        k,
        call.value,
        mask_mod=mask_mod,
        score_mod=score_mod,
        query_mask=call.masks.query_mask,
        key_mask=call.masks.key_mask,
        scale=1.0 if scale is None else scale,
        chunk_size=plan.block_size[0],
        return_lse=True,
    )
    return Result(out, None, lse)
