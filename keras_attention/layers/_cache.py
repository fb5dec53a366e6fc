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
