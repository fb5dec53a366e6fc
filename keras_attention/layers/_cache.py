"""The key/value cache objects and rotary embeddings of the multi-head layers.

An `AttentionCache` is one call's cache: its layout (checked), its update
(the call's new entries written at `cache_update_index`) and the position
of the call's first query (`start`, the call record's `query_offset`,
which the band and the mods read).
`KeyValueCache` is keras-hub's layout, which `MultiHeadAttention`,
`SelfAttention` and `GroupedQueryAttention` use; a variant with another
layout (`MultiHeadLatentAttention`'s latent cache) subclasses it.

keras-hub's `CachedMultiHeadAttention` semantics: a cache
`(batch_size, 2, max_length, heads, head_dim)` holds the projected keys
(index 0) and values (index 1); with `cache_update_index` the new keys and
values are written at that position first, without it the cache is
attended as it is. The caller's `attention_mask (batch_size, Tq,
max_length)` says which slots each query sees. Rotary embeddings rotate
the projected queries and keys at their absolute positions, which follow
`cache_update_index` when decoding.
"""

import abc

import keras
from keras import ops


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
    check_key_value_layout(layer_name, tuple(cache.shape))


def check_key_value_layout(layer_name, shape):
    """keras-hub's layout, rank 5 with 2 slots, or a `ValueError`."""
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


class AttentionCache(abc.ABC):
    """One call's cache: layout, update, and where its queries begin.

    Subclasses implement `check_shape(shape)` and `update(*projections)`, which
    writes the call's new entries at `index` (when given) and returns what
    the heads attend over. `tensor` is the cache to return.

    Args:
        layer_name: The layer's class name, for errors.
        tensor: The cache tensor.
        index: `cache_update_index`, or `None` to attend to the cache as
            it is.
    """

    def __init__(self, layer_name, tensor, index, dtype=None):
        self.layer_name = layer_name
        self.check_shape(tuple(tensor.shape))
        self.tensor = tensor if dtype is None else ops.cast(tensor, dtype)
        self.index = index
        self.start = start_of(index)

    @classmethod
    def open(cls, layer_name, tensor, index, dtype=None, **kwargs):
        """The call's cache object, or `None` without a cache (then
        `index` must be `None`)."""
        if tensor is None:
            check_cache(layer_name, None, index)
            return None
        return cls(layer_name, tensor, index, dtype, **kwargs)

    @abc.abstractmethod
    def check_shape(self, shape):
        """A `ValueError` naming `shape` unless it is the layout."""

    @abc.abstractmethod
    def update(self, *projections):
        """What the heads attend over, the call's entries written."""


class KeyValueCache(AttentionCache):
    """keras-hub's cache `(batch_size, 2, max_length, heads, head_dim)`:
    the projected (rotated) keys at index 0, the values at index 1."""

    def check_shape(self, shape):
        check_key_value_layout(self.layer_name, shape)

    def update(self, project_key, project_value):
        """`(keys, values)` over the slots, the new ones written first;
        `project_key()` / `project_value()` run only on an update."""
        key, value, self.tensor = cached_keys_values(
            self.tensor, self.index, project_key, project_value
        )
        return key, value
