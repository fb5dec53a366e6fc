"""Score and mask mods on the layers (private module).

The layers take `score_mod=` / `mask_mod=` in the constructor (saved in
their config) and in the call (one call's mods, `document(segment_ids)`
say), and an `attention_bias` call argument: the multi-head engine puts
them in the call's `ops.engine.AttentionCall`, whose dense and block
kernels apply them; a single-head layer applies them to its logits
(`apply_to_logits`).
"""

import inspect

import keras
from keras import ops

from keras_attention import ops as ka_ops
from keras_attention.ops import mods as mods_lib


def checked(score_mod, mask_mod):
    """The constructor's `(score_mod, mask_mod)`, from configs if saved
    (`ops.checks.mod`: `None` or a callable of the mod's arguments)."""
    return (
        ka_ops.checks.mod("score_mod", deserialize(score_mod)),
        ka_ops.checks.mod("mask_mod", deserialize(mask_mod)),
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


def chained(*score_mods):
    """One score mod applying `score_mods` in order (`None`s skipped)."""
    parts = [m for m in score_mods if m is not None]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else mods_lib.chain(*parts)


def apply_to_logits(logits, mask, score_mods=(), mask_mods=(), bias=None):
    """A single-head layer's logits `(B, Tq, Tk)` and mask with its mods:
    `score_mods` applied in order (the constructor's, then the call's),
    `mask_mods` ANDed with `mask`, then `bias` added (it broadcasts to the
    logits)."""
    mask_mod = ka_ops.masks.AttentionMasks(mask_mods=mask_mods).mask_mod()
    logits, extra = ka_ops.apply_mods(logits, chained(*score_mods), mask_mod)
    if bias is not None:
        logits = logits + ops.cast(bias, logits.dtype)
    return logits, ka_ops.masks.and_all(mask, extra)
