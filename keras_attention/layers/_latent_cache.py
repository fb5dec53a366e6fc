"""MLA's cache: each position's latent and rotated key (private module)."""

from keras import ops

from keras_attention import _validation
from keras_attention.layers import _cache
from keras_attention.layers import _in_place


class LatentCache(_cache.AttentionCache):
    """MLA's cache `(batch_size, max_length, kv_lora_rank +
    qk_rope_head_dim)`: each position's latent and rotated key, written at
    `cache_update_index` (private: `MultiHeadLatentAttention` takes its
    tensor)."""

    layout = "(batch_size, max_length, kv_lora_rank + qk_rope_head_dim)"

    def __init__(self, tensor):
        self.tensor = _cache.tensor_argument(self, "tensor", tensor)

    @classmethod
    def fits_layout(cls, shape):
        return len(shape) == 3

    @property
    def tensors(self):
        return (self.tensor,)

    def with_tensors(self, tensors):
        (tensor,) = tensors
        return LatentCache(tensor)

    @property
    def max_length(self):
        return _cache.static_shape(self.tensor)[1]

    def check(self, spec, batch_size, new_length):
        shape = _cache.static_shape(self.tensor)
        layout = "(batch_size, max_length, kv_lora_rank + qk_rope_head_dim)"
        if len(shape) != 3 or shape[-1] != spec.width:
            raise _cache.mismatch(
                spec,
                f"`cache` of shape `{layout}` = `(..., {spec.width})`",
                f"cache.shape={shape}",
            )
        _cache.check_batch(spec, shape, batch_size, layout)
        _cache.check_floating(spec, self.tensor, "cache")
        _cache.check_length(spec, self.max_length, new_length)

    def read(self):
        return _cache.Attended((self.tensor,))

    @classmethod
    def allocate(cls, layer, batch_size, max_length, dtype=None):
        """`zeros((batch_size, max_length, kv_lora_rank +
        qk_rope_head_dim))` for a `MultiHeadLatentAttention`."""
        spec = _cache.layer_spec(layer, batch_size)
        _validation.positive_int("max_length", max_length)
        dtype = _cache.float_dtype(layer, dtype)
        return cls(ops.zeros((batch_size, max_length, spec.width), dtype))

    def write(self, index, latents):
        tensor = _in_place.slice_update(self.tensor, [0, index, 0], latents)
        return _cache.Attended((tensor,)), LatentCache(tensor)
