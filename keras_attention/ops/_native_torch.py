"""PyTorch's fused kernels as kernels of the engine (private module).

- `flex`: `torch.nn.attention.flex_attention` under `torch.compile`, its
  `BlockMask` made by `create_block_mask` (compiled too) of the call's one
  mask mod. The mods are this package's, unchanged: PyTorch calls them on
  0-d index tensors, which broadcast as the index tensors of
  `ops/_layout.py` do. `ops/_torch_probe.py`'s `lowers` tells the
  planner beforehand whether its compiler can lower them.
- `sdpa`: `torch.nn.functional.scaled_dot_product_attention`, no mask or
  causal.

Imported by `ops/_native.py` on the first call of a PyTorch kernel.
"""

import functools

import keras
import torch
from keras import ops
from torch.nn.attention import flex_attention as torch_flex

from keras_attention.ops import _call_mods
from keras_attention.ops import _layout
from keras_attention.ops._registry import Result
from keras_attention.ops._torch_probe import bound
from keras_attention.ops.attend import logits_dtype
from keras_attention.ops.mask_mods import keep

# Whether FlexAttention and its block masks are compiled (the kernel);
# the tests turn it off to check the rest of the path without compiling.
COMPILE = True


@functools.cache
def _compiled(function):
    """`function` compiled, once per process, so that its compilations
    are reused."""
    return torch.compile(function)


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
    """PyTorch's `BlockMask` of the call's mask mod (compiled
    `create_block_mask`, blocks of 128), or `None` for no mask."""
    if mask_mod is None:
        return None
    batch, q_len, heads, _ = call.query.shape
    k_len, kv_heads = call.key.shape[1], call.key.shape[2]
    b, h = _depends(mask_mod, batch, heads, kv_heads)
    return _torch_function(torch_flex.create_block_mask)(
        lambda b_, h_, q_, kv_: keep(mask_mod, b_, h_, q_, kv_),
        b,
        h,
        q_len,
        k_len,
        device=device,
    )


def _heads_first(x, dtype):
    """`(B, T, H, D)` → `(B, H, T, D)` in `dtype`, contiguous."""
    return ops.cast(x, dtype).transpose(1, 2).contiguous()


def _inputs(call, cpu):
    """The query, key and value `(B, H, T, D)`, and the scale: in the
    logits dtype on the CPU (whose kernel may not widen half precision),
    the heads' dtype on a GPU (its kernels compute in float32)."""
    q, k, scale = call.score.dot_product_form(call.query, call.key)
    dtype = call.value.dtype
    if cpu:
        dtype = logits_dtype(keras.backend.standardize_dtype(dtype))
    if scale is None:
        scale = 1.0
    elif not isinstance(scale, (int, float)):
        q, scale = q * scale, 1.0
    tensors = [_heads_first(t, dtype) for t in (q, k, call.value)]
    return tensors, float(scale)


def flex(call, plan):
    """PyTorch's compiled FlexAttention with the call's mods and masks; a
    row with no kept key gives zeros (and `-inf` as its lse)."""
    score_mod, mask_mod = _call_mods.call_mods(call)
    device = ops.convert_to_tensor(call.query).device
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


def sdpa(call, plan):
    """`scaled_dot_product_attention` of the call, causal or not."""
    (q, k, v), scale = _inputs(call, cpu=False)
    causal, _ = _call_mods.causal_window(call)
    out = torch.nn.functional.scaled_dot_product_attention(
        q,
        k,
        v,
        is_causal=causal,
        scale=scale,
        enable_gqa=k.shape[1] != q.shape[1],
    )
    return Result(ops.cast(out.transpose(1, 2), call.value.dtype))
