"""The cache half of the multi-head engine: the kinds of cache a layer
takes, what a cache of it must match, and one call's cache opened and
its masks checked (private module)."""

from keras_attention.layers import _cache
from keras_attention.layers import _cache_call
from keras_attention.layers import _mask_shapes
from keras_attention.layers import _update_mask
from keras_attention.layers._paged_cache import PagedCache
from keras_attention.layers._quantized_cache import QuantizedCache
from keras_attention.layers._rolling_cache import RollingCache


class CachedAttention:
    """What `MultiHeadBase` does with a cache: `_open_cache` (the call's
    `_cache_call.CacheCall`, checked against `cache_spec()`) and
    `_check_cached_masks`.

    `cache_kinds` are the `AttentionCache` kinds the layer takes, the first
    for a cache tensor (keras-hub's, `KeyValueCache`); MLA takes its
    `LatentCache`. It reads the engine's `_kv_heads`, `_head_dims` (set
    when built), `_band` and `num_heads`.
    """

    cache_kinds = (
        _cache.KeyValueCache,
        RollingCache,
        QuantizedCache,
        PagedCache,
    )

    def _open_cache(self, call):
        """The call's `_cache_call.CacheCall` (a cache tensor is keras-hub's
        layout, `KeyValueCache`) with its `cache_update_mask` checked, or
        `None` without a cache."""
        mask = getattr(call, "cache_update_mask", None)
        if call.cache is None:
            name = type(self).__name__
            _cache_call.check_no_index(name, None, call.cache_update_index)
            if mask is not None:
                raise ValueError(
                    f"{name}: `cache_update_mask` needs a cache. Received: "
                    "cache=None"
                )
            return None
        shape = call.query.shape
        batch, length = shape[0], shape[1] if len(shape) == 3 else None
        opened = _cache_call.open_cache(
            self.cache_spec(),
            call.cache,
            call.cache_update_index,
            batch,
            length,
            self.compute_dtype,
            self.cache_kinds,
        )
        opened.update_mask = _update_mask.check(
            type(self).__name__,
            opened.cache,
            mask,
            opened.index,
            batch,
            length,
        )
        return opened

    def cache_spec(self):
        """What a cache of this layer must match: its key/value heads,
        their sizes and the layer's window (a `CacheSpec`; the layer must
        be built)."""
        if not self.built:
            raise ValueError(
                f"{type(self).__name__} makes its cache's shape when it is "
                "built: call it (or `build` it) first. Received: an "
                "unbuilt layer"
            )
        key_dim, value_dim = self._head_dims
        left = (self._band(True) or (None, None))[0]
        return _cache.CacheSpec(
            type(self).__name__,
            kv_heads=self._kv_heads,
            key_dim=key_dim,
            value_dim=value_dim,
            window=None if left is None else left + 1,
        )

    def _check_cached_masks(self, call, cache):
        """With a cache the padding masks do not apply; an `attention_mask`
        says which slots each query sees, `(batch_size, Tq, max_length)`,
        where the slots are positions."""
        mask = call.attention_mask
        if mask is None:
            return
        name = type(self).__name__
        if not cache.cache.slots_are_positions:
            raise ValueError(
                f"{name}: the slots of a {type(cache.cache).__name__} are "
                "not positions, so an `attention_mask` over them means "
                "nothing; mask by position with `use_causal_mask` or a "
                f"`mask_mod`. Received: attention_mask.shape="
                f"{tuple(mask.shape)}"
            )
        query = call.query.shape
        slots = (query[0], cache.cache.max_length, query[-1])
        _mask_shapes.check_attention_mask(
            name,
            mask,
            query,
            slots,
            self.num_heads,
            {"query": query, "cache": tuple(cache.cache.tensors[0].shape)},
        )
