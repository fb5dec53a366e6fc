"""When the multi-head layers take the chunked path, and the call itself.

The chunked path (`keras_attention.ops.chunked_attention`) keeps memory
linear in the sequence length but never forms the weights, so it cannot
return them, apply dropout to them, or take an explicit `attention_mask`.
It takes padding masks, causal masking and sliding windows, for every
score but the location score. With `chunk_size=None` it is chosen where
the dense weights would be large (private module).
"""

import keras
from keras import ops

from keras_attention import ops as ka_ops

# With `chunk_size=None`, the chunked path is taken when the dense weights
# (batch × heads × Tq × Tk floats, batch 1 when it is not static; times
# `units` for an additive score) would exceed this many bytes: 2 GiB,
# N = 8192 for one example with 8 heads. On an idle CPU the chunked
# training step measured 1.14-1.20x the dense one at N = 2048-8192
# (TensorFlow, BENCHMARKS.md), so below this the dense path is faster and
# its memory still modest.
AUTO_CHUNK_MIN_BYTES = 2**31
# Queries and keys per block of the automatic choice: 512 × 512 measured
# fastest on an idle CPU at N = 4096 (1.22x dense, against 1.32x for
# 512 × 256 and 1.59x for 1024 × 1024, with the kernel before e6d7b14;
# BENCHMARKS.md).
AUTO_CHUNK_SIZE = 512
AUTO_KEY_CHUNK_SIZE = 512
# A causal dot-product attention in a compiled TensorFlow step
# (`tf.function`, XLA: what `model.fit` runs) takes the chunked path from
# this many queries and keys on: it skips the key blocks in the future,
# and measured faster than dense from N = 2048 (0.91x in graph mode, 0.73x
# under XLA; 1.09x and 0.86x at 1024). Eager steps run the block loops
# op by op (1.5x dense at N = 4096 in TensorFlow eager), so they keep the
# rule above.
AUTO_CAUSAL_MIN_LENGTH = 2048


def block_size(
    layer,
    shapes,
    attention_mask,
    return_weights,
    training,
    dense_only=False,
    causal=False,
):
    """`(queries, keys)` per block of the chunked path, `(0, 0)` for dense.

    `shapes` is `(batch_size, Tq, Tk)`, each an integer or `None`;
    `causal` whether the call masks the future. `dense_only` says that
    the layer must attend through its
    `_compute_attention` (flash attention, or a subclass that overrides
    the attention hooks). Windows (`sliding_window`, `attention_width`) go
    to `chunked_heads_attention` as a `band`.
    """
    unsupported = {
        "attention_mask": attention_mask is not None,
        "return_attention_scores": return_weights,
    }
    if layer.chunk_size:
        if dense_only:
            raise ValueError(
                "A positive `chunk_size` takes the chunked path, which "
                "bypasses flash attention and overridden "
                "`_compute_attention` / `_compute_attention_mask`; pass "
                f"chunk_size=None or 0. Received: chunk_size={layer.chunk_size}"
            )
        for name, used in unsupported.items():
            if used:
                raise ValueError(
                    "Chunked attention supports padding masks, causal "
                    f"masking and windows only, not `{name}`: pass "
                    f"chunk_size=0 or None to use `{name}`. Received: "
                    f"chunk_size={layer.chunk_size}"
                )
        return layer.chunk_size, layer.chunk_size
    dense = (0, 0)
    if layer.chunk_size == 0 or any(unsupported.values()):
        return dense
    if dense_only:
        return dense
    if not layer.score.can_chunk:
        return dense
    if layer.dropout > 0 and training is not False:
        return dense
    batch_size, query_length, key_length = shapes
    if not all(isinstance(n, int) for n in (query_length, key_length)):
        return dense
    batch = batch_size if isinstance(batch_size, int) else 1
    dense_bytes = 4 * batch * layer.num_heads * query_length * key_length
    if not layer.score.is_dot_product:
        # An additive score's dense path holds `units` values per pair.
        dense_bytes *= int(layer.score.v.shape[0])
    causal_pays = (
        causal
        and layer.score.is_dot_product
        and min(query_length, key_length) >= AUTO_CAUSAL_MIN_LENGTH
        and _compiled_tensorflow()
    )
    if dense_bytes < AUTO_CHUNK_MIN_BYTES and not causal_pays:
        return dense
    return AUTO_CHUNK_SIZE, AUTO_KEY_CHUNK_SIZE


def _compiled_tensorflow():
    """Whether this call is traced into a TensorFlow graph (or XLA)."""
    if keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    return not tf.executing_eagerly()


def window_band(window):
    """The `band` of `chunked_attention` for a `sliding_window` (or `None`):
    the limits of the mask mod `keras_attention.ops.mods.sliding_window`."""
    return None if window is None else ka_ops.mods.sliding_window(window).limits


def chunked_heads_attention(
    score, query, key, value, query_mask, key_masks, causal, block, band=None
):
    """Chunked attention on `(B, T, heads, depth)` heads with `score`.

    `block` is `(queries, keys)` per block (from `block_size`); `band` is
    `chunked_attention`'s `(left, right)` window, or `None`.
    """
    key_mask = ka_ops.masks.and_all(*key_masks)
    additive_v = None
    if score.is_dot_product:
        query, key, scale = score.dot_product_form(query, key)
    else:
        query, key, additive_v = score.additive_form(query, key)
        scale = None
    heads_first = (0, 2, 1, 3)
    context = ka_ops.chunked_attention(
        ops.transpose(query, heads_first),
        ops.transpose(key, heads_first),
        ops.transpose(value, heads_first),
        scale=1.0 if scale is None else scale,
        query_mask=query_mask,
        key_mask=key_mask,
        causal=causal,
        query_chunk_size=block[0],
        key_chunk_size=block[1],
        band=band,
        additive_v=additive_v,
    )
    return ops.transpose(context, heads_first)
