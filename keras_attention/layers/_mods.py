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


def check_flex(layer, features, flash):
    """What the mods need of a multi-head layer, or a `ValueError`."""
    if layer.score.is_dot_product and not flash and not features:
        return
    raise ValueError(
        f"{type(layer).__name__}: `score_mod`, `mask_mod` and "
        "`attention_bias` need a dot-product score, without flash "
        "attention, `attention_activation` or `penalty_coefficient`. "
        f"Received: score={layer.score.name!r}, flash_attention={flash}, "
        f"features={features}"
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


def flex_heads(heads, scale, score_mod, mask_mod, options):
    """`(context, weights)` of projected heads `(q, k, v)`, `(B, T, H, D)`.

    `options` is `(chunk_size, dropout_fn, return_weights)`. With dropout
    or weights to return, the dense weights are formed (and the dropout
    applied to them); otherwise `chunk_size` chooses the path.
    """
    q, k, v = heads
    chunk_size, dropout_fn, return_weights = options
    if dropout_fn is None and not return_weights:
        context = ka_ops.flex_attention(
            q,
            k,
            v,
            score_mod,
            mask_mod,
            scale=scale,
            chunk_size=chunk_size,
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
    used = ops.cast(
        weights if dropout_fn is None else dropout_fn(weights), v.dtype
    )
    heads, kv_heads = used.shape[1], v.shape[2]
    if heads == kv_heads:
        return ops.einsum("bhqk,bkhd->bqhd", used, v), weights
    # Grouped query heads: each group of `heads // kv_heads` shares a head.
    batch, q_len, k_len = (
        ops.shape(used)[0],
        ops.shape(used)[2],
        ops.shape(used)[3],
    )
    grouped = ops.reshape(
        used, (batch, kv_heads, heads // kv_heads, q_len, k_len)
    )
    context = ops.einsum("bkgqs,bskd->bqkgd", grouped, v)
    return ops.reshape(context, (batch, q_len, heads, v.shape[-1])), weights


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
