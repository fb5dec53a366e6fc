"""The adapters `keras_attention.hub.swap_attention` puts in a keras-hub
decoder (private module; the names are public as `keras_attention.hub.X`):
keras-hub's attention call on our `GroupedQueryAttention`, and Qwen3.5's
Gated DeltaNet call on our `GatedDeltaNet`."""

import contextlib

import keras
from keras import ops

from keras_attention.layers.gated_delta_net import GatedDeltaNet


class Route:
    """A cache of this package's kinds (`KeyValueCache`, `RollingCache`,
    `QuantizedCache`, `PagedCache`, `GatedDeltaCache`) and where the call
    writes it, handed to an adapter past keras-hub's decoder, which calls
    its attention without a cache; the adapter puts the written cache in
    `cache`, and the attention weights in `scores` when asked. How
    `hub.language_model`'s blocks run our caches and report weights."""

    def __init__(self, cache, index, scores=False):
        self.cache, self.index = cache, index
        # Asked for: the attention weights, which the adapter puts here.
        self.wants_scores, self.scores = scores, None


class _Routed:
    """An adapter that a `Route` can be handed to (`routing`)."""

    _route = None

    @contextlib.contextmanager
    def routing(self, route):
        """Within, a call without a cache runs on `route.cache` at
        `route.index` with our causal mask (keras-hub's mask, of a call
        without a cache, is not used), and leaves the written cache in
        `route.cache`."""
        previous, self._route = self._route, route
        try:
            yield route
        finally:
            self._route = previous


@keras.saving.register_keras_serializable(package="keras_attention")
class KerasHubAttention(_Routed, keras.layers.Layer):
    """keras-hub's attention call on a keras_attention layer.

    What `swap_attention` puts where a keras-hub decoder held its
    attention: it takes the decoder's keyword arguments and calls
    `attention` (a `GroupedQueryAttention`) on the same sequence as query
    and value, keras-hub's integer mask as a boolean one, the cache in
    keras-hub's layout.

    Args:
        attention: The layer called, or its config.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        hidden_states: `(batch_size, T, hidden_dim)`.
        attention_mask: Optional `(batch_size, T, keys)`, nonzero = attend.
        cache: Optional `(batch_size, 2, max_length, num_key_value_heads,
            head_dim)`, or Gemma 3's pair `(key, value)` of `(batch_size,
            max_length, num_key_value_heads, head_dim)` (returned as a
            pair).
        cache_update_index: Where the call's keys and values are written.
        cache_update_mask: Optional `(batch_size, T)` booleans, `False`
            for the tokens whose keys and values are not written (Gemma
            3's).
        training: Whether dropout is active.
        self_attention_cache: SmolLM3's name of `cache`.
        self_attention_cache_update_index: SmolLM3's name of
            `cache_update_index`.
        position_ids: Qwen3.5's M-RoPE positions (its vision model's):
            `None` only.
        **passed_down: What SmolLM3's backbone passes down from its own
            constructor when it is built from a config (`name`, `dtype`,
            `trainable`), which its attention ignores: so does this one.

    Returns:
        The output `(batch_size, T, hidden_dim)`, and the updated cache
        when a cache is given.

    Example:

    >>> gqa = keras_attention.GroupedQueryAttention(
    ...     head_dim=4, num_query_heads=2, num_key_value_heads=1
    ... )
    >>> layer = keras_attention.hub.KerasHubAttention(gqa)
    >>> x = np.random.rand(2, 5, 8).astype("float32")
    >>> tuple(layer(hidden_states=x).shape)
    (2, 5, 8)
    """

    def __init__(self, attention, **kwargs):
        super().__init__(**kwargs)
        if isinstance(attention, dict):
            attention = keras.saving.deserialize_keras_object(attention)
        if not isinstance(attention, keras.layers.Layer):
            raise ValueError(
                "Received an invalid value for argument `attention`, "
                "expected a keras_attention layer or its config. Received: "
                f"attention={attention!r}"
            )
        self.attention = attention

    def build(self, inputs_shape):
        if not self.attention.built:
            self.attention.build(inputs_shape, inputs_shape)

    def call(
        self,
        hidden_states,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        cache_update_mask=None,
        training=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        position_ids=None,
        **passed_down,
    ):
        _check_passed_down(passed_down)
        if position_ids is not None:
            raise ValueError(
                "KerasHubAttention takes Qwen3.5's text model: its M-RoPE "
                "`position_ids` (the vision model's) have no equal in "
                "keras_attention's RotaryEmbedding. Received: position_ids "
                f"of shape {tuple(position_ids.shape)}"
            )
        if self_attention_cache is not None:
            cache = self_attention_cache
        if self_attention_cache_update_index is not None:
            cache_update_index = self_attention_cache_update_index
        if attention_mask is not None:
            attention_mask = ops.cast(attention_mask, "bool")
        route = self._route
        if route is not None and cache is None:
            return _routed(self.attention, hidden_states, attention_mask, route)
        pair = isinstance(cache, (tuple, list))
        if pair:
            # Gemma 3's `(key, value)`, each `(batch, max_length, heads,
            # head_dim)`: keras-hub's tensor for the call, a pair again.
            cache = ops.stack(cache, axis=1)
        outputs = self.attention(
            hidden_states,
            hidden_states,
            attention_mask=attention_mask,
            cache=cache,
            cache_update_index=cache_update_index,
            cache_update_mask=cache_update_mask,
            training=training,
        )
        if not pair:
            return outputs
        output, cache = outputs
        return output, (cache[:, 0], cache[:, 1])

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "attention": keras.saving.serialize_keras_object(self.attention),
        }


# SmolLM3's backbone passes its constructor's keywords to its decoders,
# which pass them to their attention.
_PASSED_DOWN = ("name", "dtype", "trainable")


def _routed(attention, hidden_states, attention_mask, route):
    """`attention` on `route`'s cache (our causal mask) or, without one,
    on keras-hub's mask; the cache and the weights asked for left in
    `route`."""
    if route.cache is None:
        arguments = {"attention_mask": attention_mask}
    else:
        arguments = {
            "use_causal_mask": True,
            "cache": route.cache,
            "cache_update_index": route.index,
        }
    outputs = attention(
        hidden_states,
        hidden_states,
        return_attention_scores=route.wants_scores,
        **arguments,
    )
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    output = outputs.pop(0)
    if route.wants_scores:
        route.scores = outputs.pop(0)
    if route.cache is not None:
        route.cache = outputs.pop(0)
    return output


def _check_passed_down(passed_down):
    unknown = sorted(set(passed_down) - set(_PASSED_DOWN))
    if unknown:
        raise TypeError(
            "KerasHubAttention takes keras-hub's attention arguments. "
            f"Received: unexpected keyword arguments {unknown}"
        )


@keras.saving.register_keras_serializable(package="keras_attention")
class KerasHubGatedDeltaNet(_Routed, keras.layers.Layer):
    """keras-hub's Gated DeltaNet call on `keras_attention.GatedDeltaNet`.

    What `swap_attention` puts where a Qwen3.5 decoder held its
    `linear_attention` layer: it takes the decoder's call and calls
    `layer` with keras-hub's padding mask as `mask` and its cache pair
    `(conv_state, recurrent_state)`.

    keras-hub's Qwen3.5 `generate` prefills the cache with one call over
    the whole padded prompt (padding mask given), then feeds position
    `min(lengths) - 1` on, one per step, the rows still in their prompt
    with their prompt tokens. A key/value cache forgives the positions
    fed twice; a recurrent state does not. So a cache call with a padding
    mask builds the state over the positions before `min(lengths) - 1`
    only, and each position reaches the state exactly once: the swapped
    model's `generate` is greedy decoding by full forward passes.

    Args:
        layer: The `GatedDeltaNet` called, or its config.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        hidden_states: `(batch_size, T, hidden_dim)`.
        attention_mask: Optional `(batch_size, T)`, nonzero = a real token.
        cache: Optional keras-hub pair `(conv_state, recurrent_state)`.
        cache_update_index: Accepted, as keras-hub's (the state has no
            positions).
        training: Unused (no dropout).

    Returns:
        The output `(batch_size, T, hidden_dim)`, and the updated pair
        when a cache is given.
    """

    def __init__(self, layer, **kwargs):
        super().__init__(**kwargs)
        if isinstance(layer, dict):
            layer = keras.saving.deserialize_keras_object(layer)
        if not isinstance(layer, GatedDeltaNet):
            raise ValueError(
                "Received an invalid value for argument `layer`, expected a "
                f"keras_attention.GatedDeltaNet or its config. Received: "
                f"layer={layer!r}"
            )
        self.layer = layer

    def build(self, inputs_shape):
        if not self.layer.built:
            self.layer.build(inputs_shape)

    def call(
        self,
        hidden_states,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        training=None,
    ):
        route = self._route
        if route is not None and cache is None:
            output, route.cache = self.layer(
                hidden_states,
                cache=route.cache,
                cache_update_index=route.index,
                training=training,
            )
            return output
        mask = None
        if attention_mask is not None:
            mask = ops.cast(attention_mask, "bool")
            if cache is not None:
                mask = _before_the_first_fed_again(mask)
        if cache is None:
            return self.layer(hidden_states, mask=mask, training=training)
        return self.layer(
            hidden_states,
            mask=mask,
            cache=tuple(cache),
            cache_update_index=cache_update_index,
            training=training,
        )

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "layer": keras.saving.serialize_keras_object(self.layer),
        }


def _before_the_first_fed_again(mask):
    """`mask` `(batch, T)` without the positions from `min(lengths) - 1`
    on, which keras-hub's `generate` feeds again after its prefill."""
    lengths = ops.sum(ops.cast(mask, "int32"), axis=1)
    first = ops.min(lengths) - 1
    positions = ops.arange(ops.shape(mask)[1], dtype="int32")
    return ops.logical_and(mask, (positions < first)[None, :])
