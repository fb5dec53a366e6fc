"""keras-hub models on this package's attention: `swap_attention`.

A keras-hub `CausalLM` or `Backbone` writes one attention layer per
family; `swap_attention` replaces each by `GroupedQueryAttention` with
the same weights, through a thin adapter that takes keras-hub's call
(`hidden_states`, `attention_mask`, `cache`, `cache_update_index`). A
family is one entry of `_FAMILIES`: how its layer's settings map onto
our options, and the variables, which keep keras-hub's names. A setting
our layers cannot reproduce exactly is refused, never approximated.

keras-hub is a test extra, not a dependency: this module never imports
it. keras-hub's classes are recognised by name, and a saved swapped
model names its keras-hub class, which Keras imports when it loads.
"""

import dataclasses
import math

import keras
from keras import ops

from keras_attention.layers.grouped_query import GroupedQueryAttention
from keras_attention.layers.rotary import RotaryEmbedding

# The variables of the attention layers, keras-hub's and ours, by the
# last two parts of their paths (our projections keep keras-hub's names).
_PROJECTIONS = ("query", "key", "value", "attention_output")
# keras-hub's per-head query/key norms (their weight `scale`), as ours.
_NORMS = {
    "query_dense_layernorm": "query_norm",
    "key_dense_layernorm": "key_norm",
}


@dataclasses.dataclass(frozen=True)
class _Family:
    """One keras-hub family: its backbone and attention classes (names),
    and its attention layer's settings as `GroupedQueryAttention`'s
    arguments (`options(hub_layer, head_dim) -> dict`)."""

    name: str
    backbone: str
    attention: str
    attribute: str
    options: object


def _llama_options(layer, head_dim):
    """Llama 2 and 3 (`LlamaAttention`): Llama 3.1's frequency ramp, or
    positions divided by a linear factor; no window, no biases."""
    position_factor = layer.rope_position_scaling_factor
    if layer.rope_low_freq_factor is None:
        rotary = RotaryEmbedding(
            max_wavelength=layer.rope_max_wavelength,
            scaling_factor=position_factor,
        )
    else:
        if position_factor != 1.0:
            raise ValueError(
                "keras-hub's Llama 3 rope scaling together with a linear "
                "position scaling has no equal in keras_attention's "
                "RotaryEmbedding (one `rope_type` at a time). Received: "
                f"rope_position_scaling_factor={position_factor}, "
                f"rope_frequency_adjustment_factor="
                f"{layer.rope_frequency_adjustment_factor}"
            )
        rotary = RotaryEmbedding(
            max_wavelength=layer.rope_max_wavelength,
            scaling_factor=layer.rope_frequency_adjustment_factor,
            rope_type="llama3",
            original_max_position_embeddings=(
                layer.rope_pretraining_sequence_length
            ),
            low_freq_factor=layer.rope_low_freq_factor,
            high_freq_factor=layer.rope_high_freq_factor,
        )
    return _options(layer.dropout, rotary, use_bias=False)


def _mistral_options(layer, head_dim):
    """Mistral (`CachedMistralAttention`): keras-hub's decoder masks keys
    `j > i - w` (the `w` most recent, itself included), our
    `sliding_window=w` with the causal mask."""
    config = layer.get_config()
    rotary = RotaryEmbedding(
        max_wavelength=config["rope_max_wavelength"],
        scaling_factor=config["rope_scaling_factor"],
    )
    options = _options(config["dropout"], rotary, use_bias=False)
    return {**options, "sliding_window": config["sliding_window"]}


def _gpt_oss_options(layer, head_dim):
    """gpt-oss (`GptOssAttention`): biases, sinks, YaRN with its
    correction range unrounded, and on every other layer a window that
    keeps keys `j >= i - w` (`w + 1` keys: our `sliding_window=w + 1`)."""
    config = layer.get_config()
    if head_dim % 2:
        raise ValueError(
            "gpt-oss with an odd head size rotates all but its last "
            "feature, which keras_attention's RotaryEmbedding does not "
            f"do. Received: head_dim={head_dim}"
        )
    factor = config["rope_scaling_factor"]
    rotary = RotaryEmbedding(
        max_wavelength=config["rope_max_wavelength"],
        scaling_factor=factor,
        rope_type="yarn",
        original_max_position_embeddings=4096,
        beta_fast=32.0,
        beta_slow=1.0,
        truncate=False,
        # keras-hub's factor, `0.1 · ln(s) + 1`, for every s (ours is 1
        # below s = 1).
        attention_factor=0.1 * math.log(factor) + 1.0,
    )
    window = config["sliding_window"]
    options = _options(config["dropout"], rotary, use_bias=True)
    return {
        **options,
        "use_sinks": True,
        "sliding_window": window + 1 if window else None,
    }


def _qwen3_options(layer, head_dim):
    """Qwen3 (`Qwen3Attention`): per-head RMSNorm of the queries and keys
    before the rotation (the attention's own epsilon, not the
    decoder's), no biases, keras-hub's window `|i - j| < w` (our
    `sliding_window=w`)."""
    config = layer.get_config()
    rotary = RotaryEmbedding(
        max_wavelength=config["rope_max_wavelength"],
        scaling_factor=config["rope_scaling_factor"],
    )
    options = _options(config["dropout"], rotary, use_bias=False)
    return {
        **options,
        "query_key_norm": "rms",
        "query_key_norm_epsilon": layer.layer_norm_epsilon,
        "sliding_window": config["sliding_window_size"] or None,
    }


def _options(dropout, rotary, use_bias):
    if dropout:
        # keras-hub drops the attention's output, ours its weights.
        raise ValueError(
            "keras-hub's attention dropout applies to the attention's "
            "output, keras_attention's to its weights: they are not the "
            f"same model in training. Received: dropout={dropout}"
        )
    return {"rotary_embedding": rotary, "use_bias": use_bias}


# The decoder's attribute that holds its attention layer, per family.
_FAMILIES = (
    _Family(
        "Llama 3",
        "LlamaBackbone",
        "LlamaAttention",
        "_self_attention_layer",
        _llama_options,
    ),
    _Family(
        "Mistral",
        "MistralBackbone",
        "CachedMistralAttention",
        "_self_attention_layer",
        _mistral_options,
    ),
    _Family(
        "gpt-oss",
        "GptOssBackbone",
        "GptOssAttention",
        "self_attention_layer",
        _gpt_oss_options,
    ),
    _Family(
        "Qwen3",
        "Qwen3Backbone",
        "Qwen3Attention",
        "_self_attention_layer",
        _qwen3_options,
    ),
)

# Families whose attention needs an option our layers do not have yet.
_MISSING = {
    "Gemma3Backbone": (
        "Gemma 3",
        "cache_update_mask (the per-token skipping of cache writes of its "
        "generate); query_key_norm and query_pre_attn_scalar are there",
    ),
    "Qwen3_5Backbone": (
        "Qwen3.5",
        "its gated output and the Gated DeltaNet layers (linear_attention)",
    ),
    "SmolLM3Backbone": (
        "SmolLM3",
        "its swap (layers without rotation in a rotating model, NoPE: "
        "rotary_embedding=None, not mapped yet)",
    ),
}


def _class_names(obj):
    return [cls.__name__ for cls in type(obj).__mro__]


def _supported():
    return ", ".join(family.name for family in _FAMILIES)


def _family(model, backbone):
    names = _class_names(backbone)
    for family in _FAMILIES:
        if family.backbone in names:
            return family
    for name, (title, missing) in _MISSING.items():
        if name in names:
            raise ValueError(
                f"swap_attention: {title} needs what keras_attention's "
                f"layers do not have yet: {missing}. Received: a "
                f"{type(model).__name__}"
            )
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
            head_dim)`.
        cache_update_index: Where the call's keys and values are written.
        training: Whether dropout is active.

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
        training=None,
    ):
        if attention_mask is not None:
            attention_mask = ops.cast(attention_mask, "bool")
        return self.attention(
            hidden_states,
            hidden_states,
            attention_mask=attention_mask,
            cache=cache,
            cache_update_index=cache_update_index,
            training=training,
        )

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "attention": keras.saving.serialize_keras_object(self.attention),
        }


def _variable_key(variable):
    """A variable by its name in the layer: `query/kernel`, `sinks`."""
    parts = variable.path.split("/")
    if len(parts) > 1 and parts[-2] in _PROJECTIONS:
        return "/".join(parts[-2:])
    if len(parts) > 1 and parts[-1] == "scale" and parts[-2] in _NORMS:
        return _NORMS[parts[-2]]
    return parts[-1]


def _ours(family, hub_layer):
    """Our layer with `hub_layer`'s settings and weights, in an adapter."""
    theirs = {_variable_key(v): v for v in hub_layer.weights}
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
    Llama 3 (and Llama 2), Mistral, gpt-oss and Qwen3 families is replaced
    by a `keras_attention.GroupedQueryAttention` with the same settings
    (its rotary embedding, window, biases, sinks and query/key norms) and
    the same weights,
    called through `KerasHubAttention`. The logits and `generate` stay
    keras-hub's within float32 rounding; the model saves to `.keras` and
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
        old = getattr(decoder, family.attribute)
        if family.attention in _class_names(old):
            _replace(decoder, family.attribute, old, _ours(family, old))
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
