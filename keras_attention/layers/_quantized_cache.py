"""The quantized cache: int8 (or float8) keys and values with one scale
per position and head (private module; `keras_attention.QuantizedCache`)."""

from keras import ops

from keras_attention import _validation
from keras_attention.layers import _cache
from keras_attention.layers import _in_place
from keras_attention.layers import _update_mask

# The largest magnitude of each quantized dtype: int8's symmetric range,
# float8 e4m3's largest finite value.
_RANGES = {"int8": 127.0, "float8_e4m3fn": 448.0}


def quantize(x, dtype):
    """`(q, scale)`: `x (..., D)` as `dtype` with one scale per row,
    `scale = max |x| / range`, `x ≈ q · scale` (absmax, symmetric)."""
    x = ops.cast(x, "float32")
    peak = ops.max(ops.abs(x), axis=-1)
    scale = peak / _RANGES[dtype]
    safe = ops.where(scale > 0, scale, ops.ones_like(scale))
    scaled = x / safe[..., None]
    if dtype == "int8":
        scaled = ops.clip(ops.round(scaled), -127.0, 127.0)
    return ops.cast(scaled, dtype), scale


def dequantize(q, scale, dtype):
    """`q · scale` in `dtype` (`scale` one per row of `q`)."""
    return ops.cast(ops.cast(q, "float32") * scale[..., None], dtype)


class QuantizedCache(_cache.AttentionCache):
    """keras-hub's layout with int8 (or float8) keys and values: one
    scale per position and head (MaxText's `quantize_kvcache`).

    Each written key and value `x` (one position, one head) is stored as
    `q = round(x / s)` with `s = max |x| / 127` (int8; float8 e4m3:
    `x / s` cast, `s = max |x| / 448`), and read as `q · s`. The slots are
    positions, as in `KeyValueCache` (`attention_mask (batch_size, Tq,
    max_length)` as there). The block kernel dequantizes the key and value
    blocks one at a time (for a score whose dot-product form leaves the
    keys as they are: dot, scaled dot, bilinear); the dense and fused
    kernels read the dequantized keys and values whole, within the call.
    A quantized cache is for decoding: no gradient flows into it.

    Int8 entries with float32 scales take `2 · heads · (head_dim + 4)`
    bytes a position against `8 · heads · head_dim` for float32
    (BENCHMARKS.md).

    Args:
        values: `(batch_size, 2, max_length, num_key_value_heads,
            head_dim)`, `int8` or `float8_e4m3fn`: the quantized keys
            (index 0) and values (index 1).
        scales: `(batch_size, 2, max_length, num_key_value_heads)`,
            floating-point: the scale of each.

    Returns:
        A layer called with it returns a `QuantizedCache` with the call's
        keys and values quantized and written.

    Example:

    >>> layer = keras_attention.GroupedQueryAttention(4, 4, 2)
    >>> x = np.random.rand(2, 1, 8).astype("float32")
    >>> _ = layer(x, x)
    >>> cache = keras_attention.QuantizedCache.allocate(layer, 2, 6)
    >>> out, cache = layer(x, x, cache=cache, cache_update_index=0)
    >>> cache.dtype
    'int8'

    References:
        - [MaxText's `quantize_kvcache`](https://github.com/AI-Hypercomputer/maxtext)
        - [Hooper et al., 2024, KVQuant](https://arxiv.org/abs/2401.18079)
    """

    layout = "(batch_size, 2, max_length, heads, head_dim)"
    takes_update_mask = True

    def __init__(self, values, scales):
        self.values = _cache.tensor_argument(self, "values", values)
        self.scales = _cache.tensor_argument(self, "scales", scales, rank=4)
        dtype = _cache.dtype_of(values)
        if dtype not in _RANGES:
            raise ValueError(
                "QuantizedCache expects `values` of dtype int8 or "
                f"float8_e4m3fn. Received: values.dtype={dtype}"
            )
        if not _cache.is_float(scales):
            raise ValueError(
                "QuantizedCache expects floating-point `scales`. Received: "
                f"scales.dtype={_cache.dtype_of(scales)}"
            )
        if tuple(scales.shape) != tuple(values.shape)[:4]:
            raise ValueError(
                "QuantizedCache expects `scales` of shape `values.shape[:4]`"
                f". Received: values.shape={tuple(values.shape)}, "
                f"scales.shape={tuple(scales.shape)}"
            )

    @classmethod
    def fits_layout(cls, shape):
        return len(shape) == 5 and shape[1] == 2

    @property
    def tensors(self):
        return (self.values, self.scales)

    def with_tensors(self, tensors):
        return QuantizedCache(*tensors)

    @property
    def max_length(self):
        return int(self.values.shape[2])

    @property
    def dtype(self):
        """The quantized dtype, `"int8"` or `"float8_e4m3fn"`."""
        return _cache.dtype_of(self.values)

    def check(self, spec, batch_size, new_length):
        shape = tuple(self.values.shape)
        layout = f"(batch_size, 2, max_length, {spec.kv_heads}, {spec.key_dim})"
        if spec.key_dim != spec.value_dim:
            raise _cache.mismatch(
                spec,
                "keys and values of one head size for a QuantizedCache",
                f"key_dim={spec.key_dim}, value_dim={spec.value_dim}",
            )
        if shape[3:] != (spec.kv_heads, spec.key_dim):
            raise _cache.mismatch(
                spec,
                f"a QuantizedCache of shape `{layout}` (its key/value "
                "heads and head size)",
                f"values.shape={shape}",
            )
        _cache.check_batch(spec, shape, batch_size, layout)
        _cache.check_length(spec, self.max_length, new_length)

    def cast(self, dtype):
        return self

    def _attended(self, values, scales):
        return _cache.Attended(
            (values[:, 0], values[:, 1]), scales=(scales[:, 0], scales[:, 1])
        )

    def read(self):
        return self._attended(self.values, self.scales)

    def write(self, index, keys, values, update_mask=None):
        new = ops.stack([keys, ops.cast(values, keys.dtype)], axis=1)
        quantized, scales = quantize(new, self.dtype)
        start = [0, 0, index, 0, 0]
        scales = ops.cast(scales, self.scales.dtype)
        if update_mask is not None:
            quantized = _update_mask.kept(
                self.values, start, quantized, update_mask
            )
            scales = _update_mask.kept(
                self.scales, start[:4], scales, update_mask
            )
        stored = _in_place.slice_update(self.values, start, quantized)
        scales = _in_place.slice_update(self.scales, start[:4], scales)
        return self._attended(stored, scales), QuantizedCache(stored, scales)

    @classmethod
    def allocate(
        cls, layer, batch_size, max_length, dtype="int8", scale_dtype=None
    ):
        """An empty cache for `layer` (built): `dtype` `"int8"` or
        `"float8_e4m3fn"` entries and `scale_dtype` scales (defaults to
        `"float32"`)."""
        spec = _cache.layer_spec(layer, batch_size)
        _validation.positive_int("max_length", max_length)
        if dtype not in _RANGES:
            raise _validation.invalid(
                "dtype", dtype, "'int8' or 'float8_e4m3fn'"
            )
        scale_dtype = _cache.float_dtype(layer, scale_dtype or "float32")
        shape = (batch_size, 2, max_length, spec.kv_heads, spec.key_dim)
        # Cast from float32: TensorFlow makes no float8 zeros of its own.
        values = ops.cast(ops.zeros(shape, dtype="float32"), dtype)
        return cls(values, ops.zeros(shape[:4], dtype=scale_dtype))
