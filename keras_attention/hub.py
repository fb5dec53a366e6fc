"""keras-hub models on this package's attention: `swap_attention`.

A keras-hub `CausalLM` or `Backbone` writes one attention layer per
family; `swap_attention` replaces each by `GroupedQueryAttention` with
the same weights, through a thin adapter that takes keras-hub's call
(`hidden_states`, `attention_mask`, `cache`, `cache_update_index`). A
family is one entry of `_hub_families.FAMILIES`: how its layer's
settings map onto our options, and its variables, which keep keras-hub's
names or are mapped onto ours. A setting our layers cannot reproduce
exactly is refused, never approximated.

keras-hub is a test extra, not a dependency: this module never imports
it. keras-hub's classes are recognised by name, and a saved swapped
model names its keras-hub class, which Keras imports when it loads.
"""

import keras
from keras import ops

from keras_attention import _hub_families
from keras_attention.layers.gated_delta_net import GatedDeltaNet
from keras_attention.layers.grouped_query import GroupedQueryAttention

# The variables of the attention layers, keras-hub's and ours, by the
# last two parts of their paths (our projections keep keras-hub's names).
_PROJECTIONS = ("query", "key", "value", "gate", "attention_output")
# keras-hub's per-head query/key norms (their weight `scale`), as ours.
_NORMS = {
    "query_dense_layernorm": "query_norm",
    "key_dense_layernorm": "key_norm",
    "query_norm": "query_norm",
    "key_norm": "key_norm",
}


def _class_names(obj):
    return [cls.__name__ for cls in type(obj).__mro__]


def _supported():
    return ", ".join(family.name for family in _hub_families.FAMILIES)


def _family(model, backbone):
    names = _class_names(backbone)
    for family in _hub_families.FAMILIES:
        if family.backbone in names:
            return family
    raise ValueError(
        "swap_attention takes a keras-hub CausalLM or Backbone of the "
        f"families {_supported()}. Received: a {type(model).__name__}"
    )


def _backbone(model):
    names = _class_names(model)
    if "CausalLM" in names:
        return model.backbone
    if "Backbone" in names:
        return model
    raise ValueError(
        "swap_attention takes a keras-hub CausalLM or Backbone of the "
        f"families {_supported()}. Received: a {type(model).__name__}"
    )


@keras.saving.register_keras_serializable(package="keras_attention")
class KerasHubAttention(keras.layers.Layer):
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


def _check_passed_down(passed_down):
    unknown = sorted(set(passed_down) - set(_PASSED_DOWN))
    if unknown:
        raise TypeError(
            "KerasHubAttention takes keras-hub's attention arguments. "
            f"Received: unexpected keyword arguments {unknown}"
        )


def _variable_key(variable, renames=None):
    """A variable by its name in our layer: `query/kernel`, `sinks`,
    `query_norm` (`renames`: a family's projections by ours)."""
    parts = variable.path.split("/")
    if len(parts) > 1:
        owner = (renames or {}).get(parts[-2], parts[-2])
        if owner in _PROJECTIONS:
            return f"{owner}/{parts[-1]}"
        if parts[-1] == "scale" and owner in _NORMS:
            return _NORMS[owner]
    return parts[-1]


def _ours(family, hub_layer):
    """Our layer with `hub_layer`'s settings and weights, in an adapter."""
    theirs = {}
    for variable in hub_layer.weights:
        key = _variable_key(variable, family.renames)
        value = ops.convert_to_numpy(variable)
        value = family.transform(hub_layer, key, value)
        theirs.update(value if isinstance(value, dict) else {key: value})
    hidden_dim, heads, head_dim = theirs["query/kernel"].shape
    attention = GroupedQueryAttention(
        head_dim=head_dim,
        num_query_heads=heads,
        num_key_value_heads=theirs["key/kernel"].shape[1],
        dtype=hub_layer.dtype_policy,
        name="attention",
        **family.options(hub_layer, head_dim),
    )
    adapter = KerasHubAttention(
        attention, dtype=hub_layer.dtype_policy, name=hub_layer.name
    )
    adapter.build((None, None, hidden_dim))
    for variable in attention.weights:
        variable.assign(theirs[_variable_key(variable)])
    return adapter


@keras.saving.register_keras_serializable(package="keras_attention")
class KerasHubGatedDeltaNet(keras.layers.Layer):
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


def _ours_linear(hub_layer):
    """Our `GatedDeltaNet` with keras-hub's Gated DeltaNet's settings and
    weights (the same names, in the same order), in an adapter."""
    layer = GatedDeltaNet(
        hub_layer.num_k_heads,
        hub_layer.head_k_dim,
        num_value_heads=hub_layer.num_v_heads,
        value_head_dim=hub_layer.head_v_dim,
        conv_kernel_size=hub_layer.conv_kernel_size,
        norm_epsilon=hub_layer.layer_norm_epsilon,
        dtype=hub_layer.dtype_policy,
        name="gated_delta_net",
    )
    adapter = KerasHubGatedDeltaNet(
        layer, dtype=hub_layer.dtype_policy, name=hub_layer.name
    )
    adapter.build((None, None, hub_layer.hidden_size))
    layer.set_weights(hub_layer.get_weights())
    return adapter


def _replace(parent, name, old, new):
    """`parent.name = new` in a built layer, `old` no longer tracked.

    Keras has no public way to replace a sublayer of a built layer (its
    tracker refuses new state once built): this is the one place where
    this package opens it, for one assignment, so that the old layer's
    weights leave the model's and the new one's join them."""
    tracker = parent._tracker
    locked = tracker.locked
    tracker.unlock()
    try:
        tracker.untrack(old)
        setattr(parent, name, new)
    finally:
        if locked:
            tracker.lock()


@keras.saving.register_keras_serializable(package="keras_attention")
class KerasHubBackbone:
    """How a saved swapped backbone loads: its keras-hub class rebuilt
    from the config, then swapped again (the weights are loaded after).

    A swapped backbone's class is a subclass of its keras-hub class that
    saves under this name, with its keras-hub class in its config."""

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        hub_class = config.pop("keras_hub_class")
        backbone = keras.saving.deserialize_keras_object(
            {**hub_class, "config": config}
        )
        return swap_attention(backbone)

    def get_config(self):
        hub_class = type(self).__mro__[2]
        return {
            **super().get_config(),
            "keras_hub_class": {
                "module": hub_class.__module__,
                "class_name": hub_class.__name__,
                "registered_name": keras.saving.get_registered_name(hub_class),
            },
        }


_SWAPPED_CLASSES = {}


def _swapped_class(hub_class):
    """`hub_class` saving as `KerasHubBackbone` (made once per class)."""
    if hub_class not in _SWAPPED_CLASSES:
        swapped = type(
            hub_class.__name__,
            (KerasHubBackbone, hub_class),
            {"__module__": __name__, "__qualname__": hub_class.__name__},
        )
        # The name is the loader's: registering the class points the name
        # at it, so the loader is registered again after it.
        register = keras.saving.register_keras_serializable(
            package="keras_attention", name="KerasHubBackbone"
        )
        register(swapped)
        register(KerasHubBackbone)
        _SWAPPED_CLASSES[hub_class] = swapped
    return _SWAPPED_CLASSES[hub_class]


def swap_attention(model):
    """Puts keras_attention's attention in a keras-hub model, in place.

    Every attention layer of a keras-hub `CausalLM` or `Backbone` of the
    Llama 3 (and Llama 2), Mistral, gpt-oss, Qwen3, Gemma 3 (text),
    SmolLM3 and Qwen3.5 (text) families is replaced by a
    `keras_attention.GroupedQueryAttention` with the same settings (its
    rotary embedding, partial or none, window, biases, sinks, gate,
    query/key norms, query scale and logit soft cap) and the same weights,
    called through `KerasHubAttention`; Qwen3.5's Gated DeltaNet layers
    by `keras_attention.GatedDeltaNet`, through `KerasHubGatedDeltaNet`.
    The logits and `generate` stay keras-hub's within float32 rounding
    (Qwen3.5's `generate`: greedy decoding by full forward passes, which
    keras-hub's is not, see docs/hub.md); the model saves to `.keras` and
    loads back, after `import keras_attention`, still swapped. A
    `CausalLM`'s compiled functions are rebuilt on their next call.

    Args:
        model: A keras-hub `CausalLM` or `Backbone`.

    Returns:
        `model`, swapped.

    Raises:
        ValueError: for a model of another family (naming the families),
            or a setting our layers cannot reproduce exactly (naming it).

    Example:

    ```python
    import keras_hub
    import keras_attention

    causal_lm = keras_hub.models.Llama3CausalLM(backbone=..., preprocessor=...)
    keras_attention.hub.swap_attention(causal_lm)
    causal_lm.generate("The weather is")
    ```
    """
    backbone = _backbone(model)
    family = _family(model, backbone)
    for decoder in backbone.transformer_layers:
        old = getattr(decoder, family.attribute, None)
        if family.attention in _class_names(old):
            _replace(decoder, family.attribute, old, _ours(family, old))
        if family.linear is not None:
            attribute, class_name = family.linear
            old = getattr(decoder, attribute, None)
            if class_name in _class_names(old):
                _replace(decoder, attribute, old, _ours_linear(old))
    if not isinstance(backbone, KerasHubBackbone):
        backbone.__class__ = _swapped_class(type(backbone))
    for function in (
        "generate_function",
        "predict_function",
        "train_function",
        "test_function",
    ):
        if getattr(model, function, None) is not None:
            setattr(model, function, None)
    return model
