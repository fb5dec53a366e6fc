"""Gated DeltaNet's cache: the state of its convolution and of its
recurrence (private module; `keras_attention.GatedDeltaCache`)."""

from keras import ops

from keras_attention.layers import _cache


class GatedDeltaCache(_cache.AttentionCache):
    """The state `GatedDeltaNet` carries from one call to the next.

    A linear-attention layer keeps no keys: its memory is a fixed size
    whatever the length. It holds the last `conv_kernel_size - 1` inputs
    of the short causal convolution and each value head's matrix `S`; a
    call reads them as the state before its first position and returns
    the state after its last valid one (padded positions leave it as it
    was). So a prefill followed by decoding one token at a time equals
    one call on the whole sequence. There are no slots:
    `cache_update_index` is accepted and ignored.

    The layouts are keras-hub's (`Qwen3_5GatedDeltaNet`'s `(conv_state,
    recurrent_state)`, which a layer also takes as a tuple and returns as
    one). The recurrent state stays float32 under mixed precision.

    Args:
        conv_state: `(batch_size, conv_dim, conv_kernel_size - 1)`, the
            convolution's last inputs, `conv_dim = 2 · num_key_heads ·
            key_head_dim + num_value_heads · value_head_dim`.
        recurrent_state: `(batch_size, num_value_heads, key_head_dim,
            value_head_dim)`, float32.

    Returns:
        A layer called with it returns a `GatedDeltaCache` of the same
        shapes holding the state after the call.

    Example:

    >>> layer = keras_attention.GatedDeltaNet(2, 4, num_value_heads=4)
    >>> x = np.random.rand(1, 6, 8).astype("float32")
    >>> full = layer(x)
    >>> cache = keras_attention.GatedDeltaCache.allocate(layer, 1)
    >>> steps = []
    >>> for t in range(6):
    ...     out, cache = layer(x[:, t : t + 1], cache=cache)
    ...     steps.append(out)
    >>> bool(np.allclose(np.concatenate(steps, axis=1), full, atol=1e-5))
    True

    References:
        - [keras-hub's `Qwen3_5GatedDeltaNet`](https://github.com/keras-team/keras-hub/blob/master/keras_hub/src/models/qwen3_5/qwen3_5_gated_delta_net.py)
    """

    slots_are_positions = False
    layout = (
        "(batch_size, conv_dim, conv_kernel_size - 1) and (batch_size, "
        "num_value_heads, key_head_dim, value_head_dim)"
    )

    def __init__(self, conv_state, recurrent_state):
        argument = _cache.tensor_argument
        self.conv_state = argument(self, "conv_state", conv_state, rank=3)
        self.recurrent_state = argument(
            self, "recurrent_state", recurrent_state, rank=4
        )

    @property
    def tensors(self):
        return (self.conv_state, self.recurrent_state)

    def with_tensors(self, tensors):
        return GatedDeltaCache(*tensors)

    @property
    def max_length(self):
        return None

    def check(self, spec, batch_size, new_length):
        conv = _cache.static_shape(self.conv_state)
        state = _cache.static_shape(self.recurrent_state)
        expected = (
            (batch_size, spec.width, spec.window),
            (batch_size, spec.kv_heads, spec.key_dim, spec.value_dim),
        )
        for shape, want in zip((conv, state), expected, strict=True):
            if any(
                None not in (s, w) and s != w
                for s, w in zip(shape, want, strict=True)
            ):
                raise _cache.mismatch(
                    spec,
                    f"a cache of shapes {expected[0]} and {expected[1]}",
                    f"conv_state.shape={conv}, recurrent_state.shape={state}",
                )
        for name, tensor in zip(
            ("conv_state", "recurrent_state"), self.tensors, strict=True
        ):
            _cache.check_floating(spec, tensor, name)

    def check_index(self, layer_name, index, new_length):
        # The state has no slots: an index, if given, is only checked.
        _cache.check_index_type(layer_name, index)
        return index

    def cast(self, dtype):
        """The convolution's state in `dtype`; the recurrent state stays
        float32."""
        return GatedDeltaCache(
            ops.cast(self.conv_state, dtype),
            ops.cast(self.recurrent_state, "float32"),
        )

    def read(self):
        return _cache.Attended(self.tensors)

    def write(self, index, conv_state, recurrent_state):
        new = GatedDeltaCache(conv_state, recurrent_state)
        return _cache.Attended(new.tensors), new

    @classmethod
    def allocate(cls, layer, batch_size, dtype=None):
        """Zeros for a built `GatedDeltaNet` and `batch_size` sequences:
        the convolution's state in `dtype` (the layer's compute dtype by
        default), the recurrent state in float32."""
        spec = _cache.layer_spec(layer, batch_size)
        dtype = _cache.float_dtype(layer, dtype)
        conv = ops.zeros((batch_size, spec.width, spec.window), dtype)
        state = (batch_size, spec.kv_heads, spec.key_dim, spec.value_dim)
        return cls(conv, ops.zeros(state, "float32"))
