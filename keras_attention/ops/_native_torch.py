"""PyTorch's fused kernels as kernels of the engine (private module).

- `flex`: `torch.nn.attention.flex_attention` under `torch.compile`, its
  `BlockMask` made by `create_block_mask` (compiled too) of the call's one
  mask mod, or, where that mask is a band (causal, a window), from the
  band's blocks by arithmetic (`band_block_mask`): `create_block_mask`
  evaluates the mod on every pair of positions, in each call. The mods
  are this package's, unchanged: PyTorch calls them on 0-d index
  tensors, which broadcast as the index tensors of `ops/_layout.py` do.
  `ops/_torch_probe.py`'s `lowers` tells the planner beforehand whether
  its compiler can lower them.
- `sdpa`: `torch.nn.functional.scaled_dot_product_attention`: `is_causal`
  for a causal mask from position 0 (its kernel skips the blocks above
  the diagonal), else the call's masks and mods as one dense mask, a
  bias added to it. Where the call needs the log-sum-exp, PyTorch's CPU
  flash kernel, which SDPA runs, is called directly: it returns the lse
  beside the output (`_FlashWithLse`, whose backward pass also takes the
  lse's gradient).

Imported on the first look-up of a PyTorch path in the engine's table
(`ops/_native.py`), where its kernels register.
"""

import functools

import keras
import torch
from keras import ops
from torch.nn.attention import flex_attention as torch_flex

from keras_attention.ops import _call_mods
from keras_attention.ops import _layout
from keras_attention.ops import _native_plan
from keras_attention.ops._mod_base import with_scalars
from keras_attention.ops._registry import Result
from keras_attention.ops._registry import register
from keras_attention.ops._torch_probe import bound
from keras_attention.ops.checks import logits_dtype
from keras_attention.ops.mask_mods import and_masks
from keras_attention.ops.mask_mods import keep

# Queries and keys per block of FlexAttention's block masks (PyTorch's
# default).
FLEX_BLOCK = 128

# Whether FlexAttention and its block masks are compiled (the kernel);
# the tests turn it off to check the rest of the path without compiling.
COMPILE = True


# The compile options of each function: FlexAttention one kernel per
# shape. With PyTorch's default, a second length recompiles it with
# dynamic shapes, which torch 2.13's inductor fails to build on the CPU
# (a C++ error, `cur_kvSplitSize3` undeclared, at N = 2048 then 4096).
# `create_block_mask` keeps the default: compiled for one shape, its
# kernel of a gathering mask mod fails to build on small calls (a
# `VecMask` type error).
_OPTIONS = {"flex_attention": {"dynamic": False}}


@functools.cache
def _compiled(function):
    """`function` compiled, once per process, so that its compilations
    are reused."""
    return torch.compile(function, **_OPTIONS.get(function.__name__, {}))


def _torch_function(function):
    """A function of FlexAttention, compiled unless `COMPILE` is off."""
    return _compiled(function) if COMPILE else function


def _depends(mask_mod, batch, heads, kv_heads):
    """`(batch or None, heads or None)`: the sizes the mask mod depends
    on, read from the shape it broadcasts to on one pair of positions."""
    index = _layout.index_tensors(
        batch, kv_heads, heads // kv_heads, ops.arange(1), ops.arange(1)
    )
    shape = tuple(keep(mask_mod, *index).shape)
    shape = (1,) * (5 - len(shape)) + shape
    by_head = shape[1] * shape[2] > 1
    return (batch if shape[0] > 1 else None), (heads if by_head else None)


def block_mask(call, mask_mod, device):
    """PyTorch's `BlockMask` of the call's mask mod, or `None` for no
    mask: a band's by arithmetic (`band_block_mask`), any other by
    compiled `create_block_mask` (blocks of 128)."""
    if mask_mod is None:
        return None
    batch, q_len, heads, _ = call.query.shape
    k_len, kv_heads = call.key.shape[1], call.key.shape[2]

    def kept(b_, h_, q_, kv_):
        return keep(mask_mod, b_, h_, q_, kv_)

    limits = _call_mods.only_band(call)
    if limits is not None:
        return band_block_mask((q_len, k_len), limits, kept, device)
    b, h = _depends(mask_mod, batch, heads, kv_heads)
    return _torch_function(torch_flex.create_block_mask)(
        kept, b, h, q_len, k_len, device=device
    )


def band_block_mask(lengths, limits, mask_mod, device, size=FLEX_BLOCK):
    """The `BlockMask` of the band of `limits` (query `q` keeps keys `q -
    left ..= q + right`, `None` an open side) over `lengths` `(Tq, Tk)`,
    as `create_block_mask` makes it: a pair of blocks is full where every
    pair of positions in it is kept (a block cut by the end of a sequence
    is not), partial where some are (`mask_mod` then decides), else
    skipped."""
    (q_len, k_len), (left, right) = lengths, limits
    low, high = None if left is None else -left, right
    first_q = torch.arange(0, q_len, size, device=device)[:, None]
    first_k = torch.arange(0, k_len, size, device=device)[None]
    last_q = torch.clamp(first_q + size - 1, max=q_len - 1)
    last_k = torch.clamp(first_k + size - 1, max=k_len - 1)
    whole = (first_q + size <= q_len) & (first_k + size <= k_len)
    some, every = torch.ones_like(whole), whole
    if low is not None:
        some = some & (last_k - first_q >= low)
        every = every & (first_k - last_q >= low)
    if high is not None:
        some = some & (first_k - last_q <= high)
        every = every & (last_k - first_q <= high)
    return torch_flex.BlockMask.from_kv_blocks(
        *_ordered(some & ~every),
        *_ordered(every),
        BLOCK_SIZE=size,
        mask_mod=mask_mod,
        seq_lengths=(q_len, k_len),
    )


def _ordered(blocks):
    """`(count (1, 1, nq), indices (1, 1, nq, nk))` of the blocks of each
    row, as `create_block_mask` orders them: the row's blocks first, in
    order, then the others."""
    columns = torch.arange(blocks.shape[-1], device=blocks.device)
    order = torch.argsort(torch.where(blocks, columns, columns + len(columns)))
    count = blocks.sum(-1, dtype=torch.int32)
    return count[None, None], order.to(torch.int32)[None, None]


def _heads_first(x, dtype, contiguous=True):
    """`(B, T, H, D)` → `(B, H, T, D)` in `dtype`, contiguous or a view."""
    x = ops.cast(x, dtype).transpose(1, 2)
    return x.contiguous() if contiguous else x


def _inputs(call, cpu, contiguous=True):
    """The query, key and value `(B, H, T, D)`, and the scale: in the
    logits dtype on the CPU (whose kernel may not widen half precision),
    the heads' dtype on a GPU (its kernels compute in float32). SDPA
    reads strided views (`contiguous=False`; on the CPU at N = 1024 a
    quarter faster than copying them first)."""
    q, k, scale = call.dot_product_form()
    dtype = call.value.dtype
    if cpu:
        dtype = logits_dtype(keras.backend.standardize_dtype(dtype))
    if scale is None:
        scale = 1.0
    elif not isinstance(scale, (int, float)):
        q, scale = q * scale, 1.0
    tensors = [_heads_first(t, dtype, contiguous) for t in (q, k, call.value)]
    return tensors, float(scale)


@register(_native_plan.TORCH_FLEX)
def flex(call, plan):
    """PyTorch's compiled FlexAttention with the call's mods and masks; a
    row with no kept key gives zeros (and `-inf` as its lse)."""
    device = ops.convert_to_tensor(call.query).device
    score_mod, mask_mod = (
        with_scalars(mod, lambda number: torch.tensor(number, device=device))
        for mod in _call_mods.call_mods(call)
    )
    (q, k, v), scale = _inputs(call, device.type == "cpu")
    score = None
    if score_mod is not None:
        bound_mod = bound(score_mod)

        def score(s, b, h, q_idx, kv_idx):
            return bound_mod(s, b, h, q_idx, kv_idx)

    kwargs = dict(
        score_mod=score,
        block_mask=block_mask(call, mask_mod, device),
        scale=scale,
        enable_gqa=k.shape[1] != q.shape[1],
    )
    lse = None
    if call.lse or call.sinks is not None:
        request = torch_flex.AuxRequest(lse=True)
        out, aux = _torch_function(torch_flex.flex_attention)(
            q, k, v, return_aux=request, **kwargs
        )
        lse = aux.lse.float()
    else:
        out = _torch_function(torch_flex.flex_attention)(q, k, v, **kwargs)
    output = ops.cast(out.transpose(1, 2), call.value.dtype)
    return Result(output, None, lse)


def _boolean_mask(call):
    """The call's masks and mask mods as one boolean `(B | 1, H | 1, Tq,
    Tk)` at its positions, or `None`: the tensor masks and the band as
    `AttentionMasks.dense` gives them, the mask mods evaluated."""
    batch, q_len, heads, _ = call.query.shape
    k_len = call.key.shape[1]
    mask = call.masks.dense(
        q_len,
        k_len,
        heads_axis=True,
        query_offset=call.query_offset,
        key_positions=call.key_positions,
    )
    if call.masks.mask_mods:
        mods = [_call_mods.at_positions(call, m) for m in call.masks.mask_mods]
        index = _layout.index_tensors(
            batch, heads, 1, ops.arange(q_len), ops.arange(k_len)
        )
        kept = keep(and_masks(*mods), *index)[:, :, 0]
        mask = kept if mask is None else ops.logical_and(mask, kept)
    return mask


def _plain_causal(call):
    """Whether the call's only mask is causal from position 0 (SDPA's
    `is_causal`, top-left aligned)."""
    offset = call.query_offset
    return (
        _call_mods.mask_kinds(call) == ("causal",)
        and isinstance(offset, int)
        and offset == 0
        and call.key_positions is None
        and call.bias is None
    )


def sdpa_mask(call, dtype):
    """`(mask, kept)`: SDPA's `attn_mask` of the call, boolean, or
    additive in `dtype` with a bias, or `None`; and which rows keep a key
    `(B | 1, H | 1, Tq, 1)`, or `None` for all. A row with no kept key
    attends to every key instead (PyTorch's kernels differ there) and is
    set to zero afterwards, the package's rule."""
    mask = _boolean_mask(call)
    kept = None
    if mask is not None:
        kept = ops.any(mask, axis=-1, keepdims=True)
        # Eager: no row to bridge, no copy. Compiled, the value is not
        # known: the bridge, which changes nothing where every row keeps.
        if not torch.compiler.is_compiling() and bool(ops.all(kept)):
            kept = None
        else:
            mask = ops.logical_or(mask, ops.logical_not(kept))
    bias = _call_mods.four_d_bias(call, dtype)
    if bias is None:
        return mask, kept
    if mask is None:
        return bias, None
    return ops.where(mask, bias, float("-inf")), kept


def _additive(mask, dtype):
    """A boolean mask as the additive one the flash kernel takes."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))


# ATen's CPU flash kernel, which SDPA runs on the CPU (not a public API:
# `_torch_probe.cpu_flash_lse` tells the planner whether it is there).
_CPU_FLASH = "_scaled_dot_product_flash_attention_for_cpu"


def _aten(name):
    return getattr(torch.ops.aten, name)


class _FlashWithLse(torch.autograd.Function):
    """PyTorch's CPU flash kernel, the one SDPA runs there, with its
    log-sum-exp. Its backward pass reads the lse's gradient `g` as
    `dS = P ∘ (dP − D + g)`: the kernel forms `D = rowsum(dO ∘ O)`, so
    one more head feature, zero in the query, key and value, carries `1`
    in `dO` and `−g` in `O`, leaving `dP` as it is and `D` less `g`."""

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, scale):
        out, lse = _aten(_CPU_FLASH)(
            q, k, v, 0.0, causal, attn_mask=mask, scale=scale
        )
        ctx.save_for_backward(q, k, v, out, lse, mask)
        ctx.causal, ctx.scale = causal, scale
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse, mask = ctx.saved_tensors
        if d_out is None:
            d_out = torch.zeros_like(out)
        if d_lse is not None:
            q, k, v = (_one_more(t, 0.0) for t in (q, k, v))
            d_out = _one_more(d_out, 1.0)
            out = torch.cat([out, -d_lse[..., None].to(out.dtype)], -1)
        grads = _aten(_CPU_FLASH + "_backward")(
            d_out.contiguous(),
            *(q, k, v, out, lse),
            0.0,
            ctx.causal,
            attn_mask=mask,
            scale=ctx.scale,
        )
        if d_lse is not None:
            grads = [g[..., :-1] for g in grads]
        return (*grads, None, None, None)


def _one_more(x, value):
    """`x` with one more feature of `value`."""
    return torch.cat([x, torch.full_like(x[..., :1], value)], -1)


@register(_native_plan.SDPA)
def sdpa(call, plan):
    """`scaled_dot_product_attention` of the call (`is_causal`, or its
    masks and mods as one mask), the lse where asked; a row with no kept
    key gives zeros (and `-inf` as its lse)."""
    device = ops.convert_to_tensor(call.query).device
    want_lse = call.lse or call.sinks is not None
    (q, k, v), scale = _inputs(call, device.type == "cpu", want_lse)
    causal = _plain_causal(call)
    mask, kept = (None, None) if causal else sdpa_mask(call, q.dtype)
    gqa = k.shape[1] != q.shape[1]
    lse = None
    if want_lse:
        if gqa:
            groups = q.shape[1] // k.shape[1]
            k, v = (t.repeat_interleave(groups, 1) for t in (k, v))
        out, lse = _FlashWithLse.apply(
            q, k, v, _additive(mask, q.dtype), causal, scale
        )
        lse = lse.float()
    else:
        out = torch.nn.functional.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=causal,
            scale=scale,
            enable_gqa=gqa,
        )
    if kept is not None:
        out = torch.where(kept, out, 0.0)
        if lse is not None:
            lse = torch.where(kept[..., 0], lse, float("-inf"))
    output = ops.cast(out.transpose(1, 2), call.value.dtype)
    return Result(output, None, lse)
