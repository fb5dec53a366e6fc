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
from keras_attention.layers import _chunking
from keras_attention.layers import _local_window
from keras_attention.layers import _mods


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


class _Shifted:
    """A mod read at absolute query positions, `q_idx + start`: the
    queries of a cached call begin at `cache_update_index`, and a mod
    (causality, a window, ALiBi) means the query's place in the cache."""

    def __init__(self, mod, start):
        self.mod, self.start = mod, start

    @property
    def tensors(self):
        return tuple(getattr(self.mod, "tensors", ()) or ())

    def with_tensors(self, tensors):
        return _Shifted(self.mod.with_tensors(tensors), self.start)

    def __call__(self, *args):
        *lead, q_idx, kv_idx = args
        q_idx = ops.cast(q_idx, "int32") + ops.cast(self.start, "int32")
        return self.mod(*lead, q_idx, kv_idx)


def shifted(mod, start):
    """`mod` at absolute query positions (itself when `start` is `0`)."""
    if mod is None or (isinstance(start, int) and start == 0):
        return mod
    return _Shifted(mod, start)


def cache_mask_mod(masks, start, own, call, sliding_window=None, band=None):
    """The mask mod over the cache slots, for `flex_attention`.

    The caller's `attention_mask (B, Tq, max_length)` is read at the
    call's queries; causality, the windows and the mask mods `own` (the
    constructor's) and `call` at absolute positions (from `start`).
    """
    explicit = ka_ops.masks.attention_masks(
        attention_mask=masks.get("attention_mask")
    ).mask_mod()
    positional = ka_ops.masks.attention_masks(
        use_causal_mask=bool(masks.get("use_causal_mask")),
        sliding_window=sliding_window,
        band=band,
        mask_mods=(own, call),
    ).mask_mod()
    parts = [m for m in (explicit, shifted(positional, start)) if m is not None]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else ka_ops.and_masks(*parts)


class CacheMixin:
    """`rotary_embedding=` and the cached call of the multi-head layers.

    Mixed in before `MultiHeadBase`: it takes `rotary_embedding` out of
    the constructor's keyword arguments, serialises it, and runs a call
    with a cache or rotary embeddings through the layer's own sublayers
    and Keras hooks (`_compute_attention_mask`, `_compute_attention`).
    With a cache, the slots are attended densely through those hooks, or
    through `flex_attention` when the call has mods or the layer chunks
    (a positive `chunk_size`, or `None` with large dense weights): its
    blocks keep memory linear in the cache length.
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
        mods=(None, None, None),
    ):
        """Projections, rotary, cache update, attention, output: keras-hub's
        `CachedMultiHeadAttention.call` on this layer's sublayers.

        With a cache only the caller's `attention_mask (B, Tq, max_length)`
        and `use_causal_mask` (queries at `cache_update_index` onwards)
        apply; the padding masks of the call's inputs do not describe the
        cache. Without one (rotary embeddings only) the heads attend as in
        a plain call, chunked or through the mods.
        """
        if self._axes is not None and not self._axes.is_plain:
            raise ValueError(
                f"{type(self).__name__}: `cache` and `rotary_embedding` "
                "need inputs `(batch_size, time, dim)` attended over time. "
                "Received: attention_axes="
                f"{getattr(self, 'attention_axes', None)!r}"
            )
        start = start_of(cache_update_index)
        q = rotate(self.rotary_embedding, self._query_dense(query), start)

        def project_key():
            return rotate(self.rotary_embedding, self._key_dense(key), start)

        if cache is None:
            self._check_masks(query.shape, value.shape, key.shape, masks)
            k, v = project_key(), self._value_dense(value)
            context, weights = self._attend_heads(
                query,
                value,
                q,
                k,
                v,
                masks,
                training,
                return_attention_scores,
                mods,
            )
        else:
            cache = ops.cast(cache, self.compute_dtype)
            k, v, cache = cached_keys_values(
                cache,
                cache_update_index,
                project_key,
                lambda: self._value_dense(value),
            )
            context, weights = self._attend_cache(
                query,
                (q, k, v),
                masks,
                start,
                training,
                return_attention_scores,
                mods,
            )
        if getattr(self, "use_gate", False):
            context = context * self._gate_dense(query)
        output = self._output_dense(context)
        return outputs(output, weights, cache, return_attention_scores)

    def _cache_band(self, masks):
        """`SelfAttention`'s `attention_width` as a `(left, right)` band."""
        width = getattr(self, "_attention_width", None)
        if width is None:
            return None
        return _local_window.band(width, bool(masks.get("use_causal_mask")))

    def _attend_cache(
        self, query, heads, masks, start, training, return_weights, mods
    ):
        """`(context, weights)` of the heads `(q, k, v)` over the cache."""
        own = self._mods_holder.value
        modded = any(m is not None for m in (*own, *mods))
        q, k, v = heads
        if modded or self._cache_blocks(q, k, return_weights, training):
            return self._flex_cache(
                heads, masks, start, training, return_weights, mods
            )
        mask = cache_mask(
            query,
            k,
            masks,
            start,
            sliding_window=getattr(self, "_sliding_window", None),
            band=self._cache_band(masks),
        )
        return self._compute_attention(q, k, v, mask, training, return_weights)

    def _cache_blocks(self, q, k, return_weights, training):
        """Whether the cache is attended in `flex_attention`'s blocks: a
        positive `chunk_size`, or `None` where the dense weights would
        pass `_chunking.AUTO_CHUNK_MIN_BYTES` (as a plain call chooses)."""
        if self.chunk_size == 0:
            return False
        dense_only = (
            bool(self._dense_only_features())
            or self._flash_attention
            or bool(self.overridden_hooks)
            or not self.score.is_dot_product
        )
        if self.chunk_size:
            if dense_only:
                raise ValueError(
                    f"{type(self).__name__}: a cached call with a positive "
                    "`chunk_size` attends in the blocks of `flex_attention`"
                    ", which need a dot-product score, no flash attention "
                    "and no overridden attention hooks; pass chunk_size="
                    f"None or 0. Received: chunk_size={self.chunk_size}, "
                    f"score={self.score.name!r}"
                )
            return True
        dropout = self.dropout > 0 and training is not False
        if dense_only or return_weights or dropout:
            return False
        batch, q_len, k_len = q.shape[0], q.shape[1], k.shape[1]
        if not all(isinstance(n, int) for n in (q_len, k_len)):
            return False
        size = 4 * (batch or 1) * self.num_heads * q_len * k_len
        return size >= _chunking.AUTO_CHUNK_MIN_BYTES

    def _flex_cache(self, heads, masks, start, training, return_weights, mods):
        """The cache through `flex_attention` (`_mods.flex_heads`), the
        mods and masks at absolute query positions."""
        _mods.check_flex(
            self, self._dense_only_features(), self._flash_attention
        )
        q, k, v = heads
        q, k, scale = self.score.dot_product_form(q, k)
        own = self._mods_holder.value
        score_mod = _mods.score_mod_of(
            shifted(own[0], start), shifted(mods[0], start), mods[2]
        )
        mask_mod = cache_mask_mod(
            masks,
            start,
            own[1],
            mods[1],
            getattr(self, "_sliding_window", None),
            self._cache_band(masks),
        )
        dropout_fn = None
        if self.dropout > 0 and training not in (None, False):

            def dropout_fn(weights):
                return self._dropout_layer(weights, training=training)

        chunk_size = self.chunk_size
        if chunk_size is None and self._cache_blocks(
            q, k, return_weights, training
        ):
            chunk_size = _chunking.AUTO_CHUNK_SIZE
        return _mods.flex_heads(
            (q, k, v),
            1.0 if scale is None else scale,
            score_mod,
            mask_mod,
            (chunk_size, dropout_fn, return_weights),
        )

    def get_config(self):
        rotary = self.rotary_embedding
        return {
            **super().get_config(),
            "rotary_embedding": None
            if rotary is None
            else keras.saving.serialize_keras_object(rotary),
        }


def cache_mask(
    query, key, masks, start, heads_axis=True, sliding_window=None, band=None
):
    """The mask over the cache slots: `attention_mask`, and causality and
    the windows from the first query's position `start`, with a heads
    axis."""
    attention_mask = masks.get("attention_mask")
    if attention_mask is not None:
        attention_mask = ops.cast(attention_mask, "bool")
    mask = ka_ops.combine_masks(
        ops.shape(query)[1],
        ops.shape(key)[1],
        attention_mask=attention_mask,
        use_causal_mask=bool(masks.get("use_causal_mask")),
        sliding_window=sliding_window,
        band=band,
        query_offset=start,
        heads_axis=heads_axis,
    )
    return mask
