"""The rolling cache of a windowed layer: StreamingLLM's sink tokens and
the most recent positions, written modulo the window (private module;
`keras_attention.RollingCache`)."""

from keras import ops

from keras_attention import _validation
from keras_attention.layers import _cache
from keras_attention.ops import mods


class RollingCache(_cache.AttentionCache):
    """A cache of a window: the last `window` positions and the first
    `num_sink_tokens` (StreamingLLM's attention sinks, Xiao et al. 2024).

    Its memory stays `num_sink_tokens + window` positions however long
    the sequence: position `p` is written in slot `p` if it is a sink
    token (`p < num_sink_tokens`), else in slot `(p - num_sink_tokens) %
    window` of the window, over the position `window` before it. A call
    attends to what the cache held before it and to its own keys, each at
    its absolute position (`cache_update_index` is the call's first
    position, unbounded), under `keras_attention.ops.mods.streaming(window,
    num_sink_tokens)`: a query sees the keys less than `window` positions
    before it and the sink tokens. So decoding with it equals the full
    causal pass with that mask (with no sink tokens, the full causal pass
    of a layer with `sliding_window=window`), whatever the length. Rotary
    positions are absolute: the keys are rotated when written.

    The layer's own window must fit in the cache's (`window` at least its
    `sliding_window`), and sink tokens need a layer without a window of its
    own (which would hide them): StreamingLLM's setting, a model trained
    with full attention served with a bounded cache.

    Args:
        sinks: `(batch_size, 2, num_sink_tokens, num_key_value_heads,
            head_dim)` keys (index 0) and values (index 1) of the sink
            tokens (`num_sink_tokens` may be 0).
        window: `(batch_size, 2, window, num_key_value_heads, head_dim)`
            keys and values of the most recent positions.

    Returns:
        A layer called with it returns a `RollingCache` of the same size,
        the call's positions written over the oldest.

    Example:

    >>> layer = keras_attention.GroupedQueryAttention(
    ...     4, 4, 2, sliding_window=3
    ... )
    >>> x = np.random.rand(1, 10, 8).astype("float32")
    >>> _ = layer(x, x)
    >>> cache = keras_attention.RollingCache.allocate(layer, 1)
    >>> for i in range(10):
    ...     token = x[:, i : i + 1]
    ...     out, cache = layer(
    ...         token, token, cache=cache, cache_update_index=i,
    ...         use_causal_mask=True,
    ...     )
    >>> tuple(cache.window.shape)  # 3 positions, not 10
    (1, 2, 3, 2, 4)

    References:
        - [Xiao et al., 2024, Efficient Streaming Language Models with
          Attention Sinks](https://arxiv.org/abs/2309.17453)
        - [Beltagy et al., 2020, Longformer](https://arxiv.org/abs/2004.05150)
    """

    slots_are_positions = False

    def __init__(self, sinks, window):
        argument = _cache.tensor_argument
        self.sinks = argument(self, "sinks", sinks, rank=5)
        self.window = argument(self, "window", window, rank=5)
        if self.window.shape[2] == 0:
            raise ValueError(
                "RollingCache needs a window of at least one position. "
                f"Received: window.shape={tuple(self.window.shape)}"
            )
        shapes = tuple(sinks.shape), tuple(window.shape)
        if shapes[0][:2] + shapes[0][3:] != shapes[1][:2] + shapes[1][3:]:
            raise ValueError(
                "RollingCache expects `sinks` and `window` of the same batch, "
                f"heads and head size. Received: sinks.shape={shapes[0]}, "
                f"window.shape={shapes[1]}"
            )

    @property
    def num_sink_tokens(self):
        return int(self.sinks.shape[2])

    @property
    def window_size(self):
        return int(self.window.shape[2])

    @property
    def tensors(self):
        return (self.sinks, self.window)

    def with_tensors(self, tensors):
        return RollingCache(*tensors)

    @property
    def max_length(self):
        return None

    def check(self, spec, batch_size, new_length):
        shape = tuple(self.window.shape)
        layout = f"(batch_size, 2, window, {spec.kv_heads}, {spec.key_dim})"
        if spec.key_dim != spec.value_dim:
            raise _cache.mismatch(
                spec,
                "keys and values of one head size for a RollingCache",
                f"key_dim={spec.key_dim}, value_dim={spec.value_dim}",
            )
        if shape[3:] != (spec.kv_heads, spec.key_dim):
            raise _cache.mismatch(
                spec,
                f"a RollingCache of shape `{layout}` (its key/value heads "
                "and head size)",
                f"window.shape={shape}",
            )
        _cache.check_batch(spec, shape, batch_size, layout)
        for name, tensor in (("sinks", self.sinks), ("window", self.window)):
            _cache.check_floating(spec, tensor, name)
        if spec.window is not None and self.window_size < spec.window:
            raise _cache.mismatch(
                spec,
                f"a RollingCache window of at least its own window, "
                f"{spec.window} positions",
                f"window.shape={shape}",
            )
        if spec.window is not None and self.num_sink_tokens:
            raise _cache.mismatch(
                spec,
                "no sink tokens with a window of its own, which would "
                "hide them (StreamingLLM's sinks need a layer without "
                "`sliding_window`)",
                f"num_sink_tokens={self.num_sink_tokens}, window={spec.window}",
            )

    def check_index(self, layer_name, index, new_length):
        """Any position from 0 on; a traced one below 0 is clamped."""
        _cache.check_index_type(layer_name, index)
        value = _cache.concrete(index)
        if value is None:
            return ops.maximum(ops.cast(index, "int32"), 0)
        if int(value) < 0:
            raise ValueError(
                f"{layer_name}: a RollingCache's `cache_update_index` is a "
                "position, 0 or more. Received: "
                f"cache_update_index={int(value)}"
            )
        return index

    def read(self):
        raise ValueError(
            "A RollingCache's slots hold the positions before "
            "`cache_update_index`: a call with it needs that index. "
            "Received: cache_update_index=None"
        )

    def slot_positions(self, last):
        """The position each slot holds once position `last` is written,
        `(num_sink_tokens + window,)`, `-1` for an empty slot."""
        sinks, size = self.num_sink_tokens, self.window_size
        last = ops.cast(last, "int32")
        sink = ops.arange(sinks, dtype="int32")
        sink = ops.where(sink <= last, sink, -1)
        slot = ops.arange(size, dtype="int32")
        # The largest `p <= last` with `(p - sinks) % size == slot`.
        recent = last - ops.mod(last - sinks - slot, size)
        recent = ops.where(recent >= sinks, recent, -1)
        return ops.concatenate([sink, recent], axis=0)

    def write(self, index, keys, values):
        """Attends to the slots before the call and to its own entries at
        their positions; keeps the sink tokens and the last `window`."""
        index = ops.cast(index, "int32")
        length = ops.shape(keys)[1]
        old = ops.concatenate([self.sinks, self.window], axis=2)
        new = ops.stack([keys, ops.cast(values, keys.dtype)], axis=1)
        new = ops.cast(new, old.dtype)
        positions = ops.concatenate(
            [
                self.slot_positions(index - 1),
                index + ops.arange(length, dtype="int32"),
            ],
            axis=0,
        )
        attended = ops.concatenate([old, new], axis=2)
        kept = self.slot_positions(index + length - 1)
        fresh = kept >= index
        taken = ops.take(new, ops.clip(kept - index, 0, length - 1), axis=2)
        slots = ops.where(fresh[None, None, :, None, None], taken, old)
        sinks = self.num_sink_tokens
        rule = mods.streaming(self.window_size, sinks)
        result = _cache.Attended(
            (attended[:, 0], attended[:, 1]),
            key_positions=positions,
            key_mask=(positions >= 0)[None],
            mask_mods=(rule,),
        )
        return result, RollingCache(slots[:, :, :sinks], slots[:, :, sinks:])

    @classmethod
    def allocate(
        cls,
        layer,
        batch_size,
        window=None,
        num_sink_tokens=0,
        dtype=None,
    ):
        """An empty rolling cache for `layer` (built): `window` positions
        (defaults to the layer's own window, which it must then have) and
        `num_sink_tokens` sink tokens."""
        spec = _cache.layer_spec(layer, batch_size)
        if window is None:
            if spec.window is None:
                raise ValueError(
                    f"{spec.layer_name} has no window of its own: pass "
                    "RollingCache.allocate(..., window=...). Received: "
                    "window=None"
                )
            window = spec.window
        window = _validation.positive_int("window", window)
        if spec.window is not None and window < spec.window:
            # Refused here, not at the first call: a shorter window would
            # drop positions the layer still attends to.
            raise ValueError(
                f"{spec.layer_name} attends to its last {spec.window} "
                "positions (`sliding_window`): its RollingCache needs a "
                f"window of at least {spec.window}. Received: window={window}"
            )
        sinks = _validation.non_negative_length(
            "num_sink_tokens", num_sink_tokens
        )
        dtype = _cache.float_dtype(layer, dtype)
        head = (spec.kv_heads, spec.key_dim)
        return cls(
            ops.zeros((batch_size, 2, sinks) + head, dtype=dtype),
            ops.zeros((batch_size, 2, window) + head, dtype=dtype),
        )
