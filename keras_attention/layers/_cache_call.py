"""One layer call's cache (private to `keras_attention.layers`).

`open_cache` turns a call's `cache` and `cache_update_index` arguments
into a `CacheCall` (or `None`): the cache checked against the layer
(`AttentionCache.check`, `layers/_cache.py`), its index checked, the
entries written while the engine projects, and the cache the layer
returns; `outputs` is keras-hub's return tuple.
"""

import keras
from keras import ops

from keras_attention.layers._cache import AttentionCache
from keras_attention.layers._cache import dtype_of
from keras_attention.layers._cache import static_shape


def check_no_index(layer_name, cache, index):
    """`cache_update_index` needs a cache."""
    if cache is None and index is not None:
        raise ValueError(
            f"{layer_name}: `cache_update_index` should not be set if "
            f"`cache` is `None`. Received: cache=None, "
            f"cache_update_index={index!r}"
        )


class CacheCall:
    """One layer call's cache: checked against the layer, its index
    checked, written while the engine projects.

    Args:
        cache: The `AttentionCache`.
        index: `cache_update_index`, or `None` to attend to the cache as
            it is.
        spec: The layer's `CacheSpec`.
        batch_size: The call's static batch size, or `None`.
        new_length: The call's static number of positions, or `None`.
        dtype: The layer's compute dtype.
        as_tensor: Whether the layer was given a tensor (and returns one).
    """

    def __init__(
        self, cache, index, spec, batch_size, new_length, dtype, as_tensor=False
    ):
        cache.check(spec, batch_size, new_length)
        if index is None:
            self.index = None
        else:
            self.index = cache.check_index(spec.layer_name, index, new_length)
        self.cache = cache.cast(dtype)
        self.as_tensor = as_tensor
        self.start = 0 if self.index is None else self.index
        self.attended = None
        self.result = self.cache
        # `cache_update_mask`, checked and set by the layer's caching
        # mixin (`layers/_caching.py`) for the kinds that take it.
        self.update_mask = None

    @property
    def writes(self):
        """Whether the call writes its entries (it has an index)."""
        return self.index is not None

    def read(self):
        """What the heads attend over: the cache as it is."""
        self.attended = self.cache.read()
        return self.attended.tensors

    def write(self, *entries):
        """What the heads attend over: the cache with the call's `entries`
        (its keys and values, or MLA's latents) written at the index."""
        masked = {}
        if self.update_mask is not None:
            masked["update_mask"] = self.update_mask
        self.attended, self.result = self.cache.write(
            self.index, *entries, **masked
        )
        return self.attended.tensors

    @property
    def output(self):
        """The cache the layer returns: a tensor if it was given one."""
        return self.result.tensor if self.as_tensor else self.result


def open_cache(spec, cache, index, batch_size, new_length, dtype, kinds):
    """The call's `CacheCall`, or `None` without a cache. `kinds` are the
    `AttentionCache` classes the layer takes, the first one for a
    tensor."""
    if cache is None:
        check_no_index(spec.layer_name, None, index)
        return None
    if isinstance(cache, AttentionCache):
        if not isinstance(cache, kinds):
            names = ", ".join(k.__name__ for k in kinds)
            raise TypeError(
                f"{spec.layer_name} takes a cache tensor or one of: {names}. "
                f"Received: cache={cache!r}"
            )
        return CacheCall(cache, index, spec, batch_size, new_length, dtype)
    if not hasattr(cache, "shape") or not hasattr(cache, "dtype"):
        cache = ops.convert_to_tensor(cache)
    kind = kinds[0]
    if not kind.fits_layout(static_shape(cache)):
        raise ValueError(
            f"{spec.layer_name} expects `cache` of shape `{kind.layout}`. "
            f"Received: cache.shape={static_shape(cache)}"
        )
    return CacheCall(
        kind(cache), index, spec, batch_size, new_length, dtype, as_tensor=True
    )


def output_spec(cache):
    """The symbolic cache a call returns (`compute_output_spec`)."""
    if cache is None:
        return None
    if isinstance(cache, AttentionCache):
        return cache.with_tensors(
            [keras.KerasTensor(t.shape, dtype_of(t)) for t in cache.tensors]
        )
    return keras.KerasTensor(cache.shape, dtype_of(cache))
