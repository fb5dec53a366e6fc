"""What a call's masks and mods are, read off its record (private
module).

The planner and the kernels both read here, and nothing here runs a
kernel: the mods at the call's absolute positions (`at_positions`), the
blocks' one score mod and one mask mod (`block_mods`), every mask and mod
of the call as one pair (`call_mods`, which PyTorch's FlexAttention
takes), and the kinds of mask a call has (`mask_kinds`, which the native
kernels' planner reads).
"""

from keras import ops

from keras_attention.ops import _layout
from keras_attention.ops import mods as mods_lib
from keras_attention.ops.mask_mods import and_masks
from keras_attention.ops.masks import band_limits


def at_positions(call, mod):
    """`mod` read at the call's absolute positions: the queries from
    `query_offset`, the keys at `key_positions`."""
    return mods_lib.shifted(
        mod, call.query_offset, key_positions=call.key_positions
    )


def positional(call):
    """The band and the mask mods at absolute positions, one mask mod."""
    parts = [call.masks.band, *call.masks.mask_mods]
    parts = [at_positions(call, p) for p in parts if p]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else and_masks(*parts)


def _one(combine, parts):
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else combine(*parts)


def block_mods(call):
    """`(score_mod, mask_mod, limits)` of the blocks: the positional ones
    shifted to absolute positions, the bias and the explicit mask read at
    the call's own."""
    score_mods = [at_positions(call, call.score_mod)]
    if call.bias is not None:
        score_mods.append(mods_lib.bias(_layout.four_d(call.bias)))
    mask_mods = [positional(call)]
    explicit = call.masks.attention_mask
    if explicit is not None:
        mask_mods.append(mods_lib.boolean_mask(_layout.four_d(explicit)))
    limits = (None, None)
    band = at_positions(call, call.masks.band)
    if band is not None and band.limits is not None:
        limits = band.limits
    return (
        _one(mods_lib.chain, score_mods),
        _one(and_masks, mask_mods),
        limits,
    )


def call_mods(call):
    """`(score_mod, mask_mod)` of every mod and mask of `call`, at its
    positions: the blocks' mods (the score mod and the bias; the band,
    the mask mods and the explicit mask) and the padding masks as mask
    mods. Either may be `None`."""
    score_mod, mask_mod, _ = block_mods(call)
    parts = [mask_mod]
    masks = call.masks
    if masks.key_mask is not None:
        key_mask = ops.cast(masks.key_mask, "bool")[:, None, None, :]
        parts.append(mods_lib.boolean_mask(key_mask))
    if masks.query_mask is not None:
        query_mask = ops.cast(masks.query_mask, "bool")[:, None, :, None]
        parts.append(mods_lib.boolean_mask(query_mask))
    return score_mod, _one(and_masks, parts)


def only_band(call):
    """`(left, right)` of the band that is the call's one mask, at its
    positions (query `q` keeps keys `q - left ..= q + right`, `None` an
    open side); `None` where the call has no mask, a mask that is not a
    band, or positions that are tensors."""
    masks = call.masks
    tensors = (masks.key_mask, masks.query_mask, masks.attention_mask)
    if any(t is not None for t in tensors):
        return None
    mask_mod = positional(call)
    return None if mask_mod is None else band_limits(mask_mod)


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


def four_d_bias(call, dtype):
    """The call's bias `(B | 1, H | 1, Tq, Tk)` in `dtype`, or `None`."""
    if call.bias is None:
        return None
    return ops.cast(_layout.four_d(call.bias), dtype)
