"""The backends' fused kernels as kernels of the engine (private module).

`describe` tells the planner what the native kernels need to know of a
call (`_native_plan.NativeCall`); `call_mods` writes every mask and mod of
the call as one score mod and one mask mod, which PyTorch's FlexAttention
takes; `KERNELS` are the kernels the planner's native paths name, each
`(AttentionCall, Plan) -> Result` as those of `ops/_kernels.py`. The
backends' modules, `ops/_native_torch.py` and `ops/_native_jax.py`, are
imported on the first call of their kernels, so that no backend imports
another's framework.
"""

import keras
from keras import ops

from keras_attention.ops import _layout
from keras_attention.ops import _native_plan
from keras_attention.ops import mods as mods_lib
from keras_attention.ops.mask_mods import MaskCombination
from keras_attention.ops.mask_mods import and_masks
from keras_attention.ops.masks import merge_limits


def band_limits(mod):
    """`(left, right)` of a mask mod that is a band of positions (an AND
    of bands included), else `None`."""
    if isinstance(mod, MaskCombination):
        if mod.op != "and" or not mod.mask_mods:
            return None
        limits = [band_limits(m) for m in mod.mask_mods]
        return None if None in limits else merge_limits(*limits)
    return getattr(mod, "limits", None)


def _band_kind(limits):
    left, right = limits
    if right == 0:
        return "causal" if left is None else "causal_window"
    return None if left is None and right is None else "band"


def _mod_kind(mod):
    limits = band_limits(mod)
    if limits is not None:
        return _band_kind(limits)
    if isinstance(mod, mods_lib.Padding):
        return "lengths"
    if isinstance(mod, mods_lib.Document) and (
        mod.kv_segment_ids is mod.segment_ids
    ):
        return "document"
    return "mask_mod"


_TENSOR_MASKS = {
    "query_mask": "query_padding",
    "key_mask": "key_padding",
    "attention_mask": "attention_mask",
}


def mask_kinds(call):
    """The kinds of mask of `call` (`NativeCall.masks`), sorted."""
    masks = call.masks
    kinds = {_band_kind(masks.band.limits)} if masks.band else set()
    kinds |= {_mod_kind(m) for m in masks.mask_mods}
    for name, kind in _TENSOR_MASKS.items():
        if getattr(masks, name) is not None:
            kinds.add(kind)
    return tuple(sorted(kinds - {None}))


def mask_mod_of_kind(call, kind):
    """The first mask mod of `call` of `kind` (`"lengths"`, `"document"`,
    a band kind), or `None`."""
    parts = [call.masks.band, *call.masks.mask_mods]
    return next((m for m in parts if m and _mod_kind(m) == kind), None)


def causal_window(call):
    """`(causal, left)`: whether the call is causal, and the window's
    left reach (`None`: no window)."""
    kinds = mask_kinds(call)
    window = mask_mod_of_kind(call, "causal_window")
    left = None if window is None else band_limits(window)[0]
    return "causal" in kinds or window is not None, left


def describe(call, backward=True):
    """The `NativeCall` of `call`: its kinds of mask, mods, dtype and
    heads, and whether it is differentiated (`backward`, and on PyTorch
    whether autograd records it)."""
    offset = call.query_offset
    backend, device = _native_plan.platform()
    lowers = None
    if backend == "torch":
        torch_native = _torch()
        backward = backward and torch_native.records_gradients(call)
        # Probing runs the mods: skipped on the CPU where FlexAttention
        # is refused anyway (training, or a short call: a decoding step).
        long = _native_plan.cpu_flex_length(
            (call.query.shape[1], call.key.shape[1])
        )
        if device != "cpu" or (long and not backward):
            lowers = torch_native.lowers(*call_mods(call))
    return _native_plan.NativeCall(
        masks=mask_kinds(call),
        score_mod=call.score_mod is not None,
        bias=call.bias is not None,
        offset=not (isinstance(offset, int) and offset == 0),
        lowers=lowers,
        dtype=keras.backend.standardize_dtype(call.query.dtype),
        head_dim=call.key.shape[-1],
        value_dim=call.value.shape[-1],
        grouped=call.key.shape[2] != call.query.shape[2],
        backward=bool(backward),
    )


def call_mods(call):
    """`(score_mod, mask_mod)` of every mod and mask of `call`, at its
    positions: the blocks' mods (`_kernels.block_mods`: the score mod and
    the bias; the band, the mask mods and the explicit mask) and the
    padding masks as mask mods. Either may be `None`."""
    from keras_attention.ops import _kernels

    score_mod, mask_mod, _ = _kernels.block_mods(call)
    parts = [mask_mod]
    masks = call.masks
    if masks.key_mask is not None:
        key_mask = ops.cast(masks.key_mask, "bool")[:, None, None, :]
        parts.append(mods_lib.boolean_mask(key_mask))
    if masks.query_mask is not None:
        query_mask = ops.cast(masks.query_mask, "bool")[:, None, :, None]
        parts.append(mods_lib.boolean_mask(query_mask))
    parts = [p for p in parts if p is not None]
    if len(parts) > 1:
        return score_mod, and_masks(*parts)
    return score_mod, parts[0] if parts else None


def four_d_bias(call, dtype):
    """The call's bias `(B | 1, H | 1, Tq, Tk)` in `dtype`, or `None`."""
    if call.bias is None:
        return None
    return ops.cast(_layout.four_d(call.bias), dtype)


def _torch():
    from keras_attention.ops import _native_torch

    return _native_torch


def _jax():
    from keras_attention.ops import _native_jax

    return _native_jax


KERNELS = {
    _native_plan.TORCH_FLEX: lambda call, plan: _torch().flex(call, plan),
    _native_plan.SDPA: lambda call, plan: _torch().sdpa(call, plan),
    _native_plan.CUDNN: lambda call, plan: _jax().cudnn(call, plan),
    _native_plan.PALLAS: lambda call, plan: _jax().pallas(call, plan),
}
