"""The key/value cache and rotary embeddings of the multi-head layers.

keras-hub's `CachedMultiHeadAttention` semantics: a cache
`(batch_size, 2, max_length, heads, head_dim)` holds the projected keys
(index 0) and values (index 1); with `cache_update_index` the new keys and
values are written at that position first, without it the cache is
attended as it is. The caller's `attention_mask (batch_size, Tq,
max_length)` says which slots each query sees. Rotary embeddings rotate
the projected queries and keys at their absolute positions, which follow
`cache_update_index` when decoding.
"""

import keras
from keras import ops

from keras_attention import ops as ka_ops


def check_cache(layer_name, cache, cache_update_index):
    """`cache_update_index` needs a cache; a cache is rank 5 with 2 slots."""
    if cache is None:
        if cache_update_index is not None:
            raise ValueError(
                f"{layer_name}: `cache_update_index` should not be set if "
                f"`cache` is `None`. Received: cache=None, "
                f"cache_update_index={cache_update_index!r}"
            )
        return
    shape = tuple(cache.shape)
    if len(shape) != 5 or shape[1] != 2:
        raise ValueError(
            f"{layer_name} expects `cache` of shape `(batch_size, 2, "
            f"max_length, heads, head_dim)`. Received: cache.shape={shape}"
        )


def cached_keys_values(cache, cache_update_index, project_key, project_value):
    """`(key, value, new_cache)` from the cache and the new positions.

    `project_key()` / `project_value()` project the call's new key and
    value; they run only when the cache is updated.
    """
    key_cache, value_cache = cache[:, 0, ...], cache[:, 1, ...]
    if cache_update_index is None:
        return key_cache, value_cache, cache
    start = [0, cache_update_index, 0, 0]
    key = ops.slice_update(key_cache, start, project_key())
    value = ops.slice_update(value_cache, start, project_value())
    return key, value, ops.stack((key, value), axis=1)


def rotate(rotary_embedding, tensor, start_index):
    """`tensor (batch_size, T, heads, head_dim)` rotated from `start_index`."""
    if rotary_embedding is None:
        return tensor
    return rotary_embedding(tensor, start_index=start_index)


def start_of(cache_update_index):
    """The position of the call's first query: the update index, or 0."""
    return 0 if cache_update_index is None else cache_update_index


def get_rotary(value):
    """A `RotaryEmbedding` (or any layer) from an instance or a config."""
    if value is None or isinstance(value, keras.layers.Layer):
        return value
    if isinstance(value, dict):
        return keras.saving.deserialize_keras_object(value)
    raise ValueError(
        "Received an invalid value for argument `rotary_embedding`, expected "
        "a keras_attention.RotaryEmbedding, its config or None. Received: "
        f"rotary_embedding={value!r}"
    )


def outputs(output, scores, cache, return_attention_scores):
    """keras-hub's return: output, then scores, then the cache if any."""
    result = (output,)
    if return_attention_scores:
        result += (scores,)
    if cache is not None:
        result += (cache,)
    return result[0] if len(result) == 1 else result


class CacheMixin:
    """`rotary_embedding=` and the cached call of the multi-head layers.

    Mixed in before `MultiHeadBase`: it takes `rotary_embedding` out of
    the constructor's keyword arguments, serialises it, and runs a call
    with a cache or rotary embeddings through the layer's own sublayers
    and Keras hooks (`_compute_attention_mask`, `_compute_attention`).
    """

    def __init__(self, *args, rotary_embedding=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.rotary_embedding = get_rotary(rotary_embedding)

    def _uses_cache_path(self, cache, cache_update_index):
        check_cache(type(self).__name__, cache, cache_update_index)
        return cache is not None or self.rotary_embedding is not None

    def _cached_call(
        self,
        query,
        value,
        key,
        masks,
        training,
        return_attention_scores,
        cache,
        cache_update_index,
        mods=(),
    ):
        """Projections, rotary, cache update, attention, output: keras-hub's
        `CachedMultiHeadAttention.call` on this layer's sublayers.

        With a cache only the caller's `attention_mask (B, Tq, max_length)`
        and `use_causal_mask` (queries at `cache_update_index` onwards)
        apply; the padding masks of the call's inputs do not describe the
        cache.
        """
        if self._axes is not None and not self._axes.is_plain:
            raise ValueError(
                f"{type(self).__name__}: `cache` and `rotary_embedding` "
                "need inputs `(batch_size, time, dim)` attended over time. "
                "Received: attention_axes="
                f"{getattr(self, 'attention_axes', None)!r}"
            )
        layer_mods = (
            getattr(self, "score_mod", None),
            getattr(self, "mask_mod", None),
        )
        if any(m is not None for m in (*layer_mods, *mods)):
            raise ValueError(
                f"{type(self).__name__}: `score_mod`, `mask_mod` and "
                "`attention_bias` do not apply with `cache` or "
                "`rotary_embedding` yet (GroupedQueryAttention takes both). "
                f"Received: rotary_embedding={self.rotary_embedding!r}, "
                f"cache given: {cache is not None}"
            )
        start = start_of(cache_update_index)
        q = rotate(self.rotary_embedding, self._query_dense(query), start)

        def project_key():
            return rotate(self.rotary_embedding, self._key_dense(key), start)

        if cache is None:
            k, v = project_key(), self._value_dense(value)
            mask = self._compute_attention_mask(query, value, **masks)
        else:
            cache = ops.cast(cache, self.compute_dtype)
            k, v, cache = cached_keys_values(
                cache,
                cache_update_index,
                project_key,
                lambda: self._value_dense(value),
            )
            window = getattr(self, "_sliding_window", None)
            mask = cache_mask(query, k, masks, start, sliding_window=window)
        context, weights = self._compute_attention(
            q, k, v, mask, training, return_attention_scores
        )
        if getattr(self, "use_gate", False):
            context = context * self._gate_dense(query)
        output = self._output_dense(context)
        return outputs(output, weights, cache, return_attention_scores)

    def get_config(self):
        rotary = self.rotary_embedding
        return {
            **super().get_config(),
            "rotary_embedding": None
            if rotary is None
            else keras.saving.serialize_keras_object(rotary),
        }


def cache_mask(query, key, masks, start, heads_axis=True, sliding_window=None):
    """The mask over the cache slots: `attention_mask`, and causality from
    the first query's position `start`, with a heads axis."""
    attention_mask = masks.get("attention_mask")
    if attention_mask is not None:
        attention_mask = ops.cast(attention_mask, "bool")
    mask = ka_ops.combine_masks(
        ops.shape(query)[1],
        ops.shape(key)[1],
        attention_mask=attention_mask,
        use_causal_mask=bool(masks.get("use_causal_mask")),
        sliding_window=sliding_window,
        query_offset=start,
        heads_axis=heads_axis,
    )
    return mask
