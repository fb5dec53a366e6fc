"""Score and mask mods on the layers (private module).

The layers take `score_mod=` / `mask_mod=` in the constructor (saved in
their config) and in the call (one call's mods, `document(segment_ids)`
say), and an `attention_bias` call argument. With any of them the heads
attend through `keras_attention.ops.flex_attention`, and the layer's own
masks (padding masks, `attention_mask`, causal masking, windows) become
mask mods through `keras_attention.ops.masks.attention_masks`, the one
mask vocabulary of the dense, fused and chunked paths.
"""

import inspect

import keras
from keras import ops

from keras_attention import ops as ka_ops
from keras_attention.ops import mods as mods_lib


def check(name, mod):
    """`mod` if it is `None` or callable, else a `TypeError`."""
    if mod is not None and not callable(mod):
        raise TypeError(
            f"Expected `{name}` to be None or callable ("
            + (
                "`score_mod(score, batch, head, q_idx, kv_idx)`"
                if name == "score_mod"
                else "`mask_mod(batch, head, q_idx, kv_idx)`"
            )
            + f"). Received: {name}={mod!r}"
        )
    return mod


def checked(score_mod, mask_mod):
    """The constructor's `(score_mod, mask_mod)`, from configs if saved."""
    return (
        check("score_mod", deserialize(score_mod)),
        check("mask_mod", deserialize(mask_mod)),
    )


def _savable(mod):
    if isinstance(mod, keras.layers.Layer) or hasattr(mod, "get_config"):
        return True
    if getattr(mod, "__name__", "") == "<lambda>" or not inspect.isfunction(
        mod
    ):
        return False
    name = keras.saving.get_registered_name(mod)
    return keras.saving.get_registered_object(name) is mod


def serialize(name, mod):
    """The config of a constructor mod; a clear error where there is none."""
    if mod is None:
        return None
    if not _savable(mod):
        raise ValueError(
            f"Cannot save `{name}`: it must be a mod of "
            "`keras_attention.ops.mods`, an object with `get_config`, or a "
            "function registered with `keras.saving."
            "register_keras_serializable()` (a lambda or an unregistered "
            f"function has no config). Received: {name}={mod!r}"
        )
    return keras.saving.serialize_keras_object(mod)


def deserialize(config):
    if config is None or callable(config):
        return config
    return keras.saving.deserialize_keras_object(config)


def score_mod_of(own, call, attention_bias):
    """The constructor's score mod, then the call's, then the bias."""
    parts = [m for m in (own, call) if m is not None]
    if attention_bias is not None:
        bias = ops.convert_to_tensor(attention_bias)
        while len(bias.shape) < 4:
            bias = ops.expand_dims(bias, 0 if len(bias.shape) < 3 else 1)
        parts.append(mods_lib.bias(bias))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else mods_lib.chain(*parts)


def apply_to_logits(logits, mask, own, call):
    """A single-head layer's logits `(B, Tq, Tk)` and mask with its mods.

    `own` is the constructor's `(score_mod, mask_mod)`, `call` the call's
    `(score_mod, mask_mod, attention_bias)`; the bias broadcasts to the
    logits.
    """
    score_mod = score_mod_of(own[0], call[0], None)
    mask_mod = ka_ops.masks.AttentionMasks(mask_mods=(own[1], call[1]))
    logits, extra = ka_ops.apply_mods(logits, score_mod, mask_mod.mask_mod())
    if call[2] is not None:
        logits = logits + ops.cast(call[2], logits.dtype)
    return logits, ka_ops.masks.and_all(mask, extra)
