"""keras-hub models on this package's attention: `swap_attention`, and
`language_model` for our generation.

A keras-hub `CausalLM` or `Backbone` writes one attention layer per
family; `swap_attention` replaces each by `GroupedQueryAttention` with
the same weights, through a thin adapter (`_hub_adapters`) that takes
keras-hub's call (`hidden_states`, `attention_mask`, `cache`,
`cache_update_index`). A
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
from keras_attention import _hub_generation
from keras_attention._hub_adapters import KerasHubAttention as KerasHubAttention
from keras_attention._hub_adapters import (
    KerasHubGatedDeltaNet as KerasHubGatedDeltaNet,
)
from keras_attention._hub_generation import KerasHubBlock as KerasHubBlock
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


def _family(model, backbone, caller="swap_attention"):
    names = _class_names(backbone)
    for family in _hub_families.FAMILIES:
        if family.backbone in names:
            return family
    raise ValueError(
        f"{caller} takes a keras-hub CausalLM or Backbone of the "
        f"families {_supported()}. Received: a {type(model).__name__}"
    )


def _backbone(model, caller="swap_attention"):
    names = _class_names(model)
    if "CausalLM" in names:
        return model.backbone
    if "Backbone" in names:
        return model
    raise ValueError(
        f"{caller} takes a keras-hub CausalLM or Backbone of the "
        f"families {_supported()}. Received: a {type(model).__name__}"
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
    saves under this name, with its keras-hub class in its config; its
    `attention_scores_layers()` is how
    `keras_attention.visualize.collect_attention` reads its attention."""

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        hub_class = config.pop("keras_hub_class")
        backbone = keras.saving.deserialize_keras_object(
            {**hub_class, "config": config}
        )
        return swap_attention(backbone)

    def attention_scores_layers(self):
        """`{decoder name: layer}`: for each decoder on our attention, a
        `KerasHubBlock` that `keras_attention.visualize.collect_attention`
        calls in its place, with the decoder's arguments, to read its
        attention weights (keras-hub's decoder returns none)."""
        return _hub_generation.scores_blocks(
            self, _family(self, self, "collect_attention")
        )

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


def language_model(model):
    """A swapped keras-hub model laid out for `models.Generator`.

    `keras_attention.models.Generator` decodes a model of
    `build_language_model`. This gives one of a swapped keras-hub
    `CausalLM` or `Backbone`, sharing its layers and weights: token ids
    `(batch, T)` -> logits `(batch, T, vocabulary)`, with the layers
    `token_embedding` (Gemma's scaled by `sqrt(hidden_dim)`), `block_0`,
    ... (`KerasHubBlock`: each keras-hub decoder, its attention's cache
    handed past it to our layer), `final_norm` and `logits` (the
    embedding reversed, with Gemma's final soft cap). So our compiled
    generation runs a keras-hub model with each of our caches: keras-hub's
    tensor, a `RollingCache` for its windowed layers, int8 entries
    (`cache_dtype="int8"`), a `GatedDeltaCache` for Qwen3.5's Gated
    DeltaNet; its blocks take a `PagedCache` too, with a position per
    sequence. Its calls with a cache use our causal mask, not keras-hub's
    padding mask: prompts of one length (as `Generator` takes), or a
    `PagedCache`'s own lengths.

    Args:
        model: A `CausalLM` or `Backbone` that `swap_attention` swapped.

    Returns:
        A functional `keras.Model`.

    Raises:
        ValueError: for a model `swap_attention` has not swapped.

    Example:

    ```python
    keras_attention.hub.swap_attention(causal_lm)
    generator = keras_attention.models.Generator(
        keras_attention.hub.language_model(causal_lm), cache_dtype="int8"
    )
    ids = generator.generate(prompt_ids, max_new_tokens=32)
    ```
    """
    backbone = _backbone(model, "language_model")
    if not isinstance(backbone, KerasHubBackbone):
        raise ValueError(
            "language_model takes a model that swap_attention swapped (its "
            "attention is ours). Received: a "
            f"{type(model).__name__} on keras-hub's attention"
        )
    return _hub_generation.language_model(
        backbone, _family(model, backbone, "language_model")
    )
