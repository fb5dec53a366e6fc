"""The keras-hub families `keras_attention.hub.swap_attention` knows
(private module): per family, its classes by name, how its attention's
settings map onto `GroupedQueryAttention`'s options, and how its weights
become ours. A setting our layers cannot reproduce exactly is refused
with a `ValueError` naming it, never approximated."""

import dataclasses
import math

from keras_attention.layers.rotary import RotaryEmbedding
from keras_attention.ops import mods


def _as_they_are(hub_layer, key, value):
    return value


@dataclasses.dataclass(frozen=True)
class Family:
    """One keras-hub family: its backbone and attention classes (names),
    the decoder's attribute that holds the attention, its attention
    layer's settings as `GroupedQueryAttention`'s arguments
    (`options(hub_layer, head_dim) -> dict`), its projections' names
    where they are not ours (`renames`) and how a weight becomes ours
    (`transform(hub_layer, our_name, array) -> array`, or `{our_name:
    array}` for a weight that is two of ours), and where its decoders hold
    a Gated DeltaNet layer (`linear`: attribute, class name)."""

    name: str
    backbone: str
    attention: str
    attribute: str
    options: object
    renames: dict = dataclasses.field(default_factory=dict)
    transform: object = _as_they_are
    # The decoder's attribute holding a Gated DeltaNet layer and its
    # class name (Qwen3.5's `linear_attention` layers), or `None`.
    linear: tuple = None
    # The backbone's attribute holding its final norm, and whether its
    # token embeddings are scaled by `sqrt(hidden_dim)` before the first
    # decoder (Gemma's): what `hub.language_model` runs around the
    # decoders, as the family's `CausalLM.call_with_cache` does.
    final_norm: str = "layer_norm"
    scales_embeddings: bool = False


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


def _gemma3_options(layer, head_dim):
    """Gemma 3 (`CachedGemma3Attention`): per-head RMSNorm `x̂ · (1 +
    scale)` (the `1 +` goes into the weights, `_gemma3_weights`), its
    rotation's wavelength and factor per layer, a window `|i - j| < w`
    on the sliding layers (our `sliding_window=w`), the logits soft-capped
    after the scale, the attention's dropout on its weights (as ours), and
    `query_head_dim_normalize=False` as `query_pre_attn_scalar`."""
    if layer.use_bidirectional_attention:
        raise ValueError(
            "keras-hub's bidirectional Gemma 3 (EmbeddingGemma) windows "
            "its keys unevenly around each query, which keras_attention's "
            "sliding_window does not do. Received: "
            "use_bidirectional_attention=True"
        )
    rotary = RotaryEmbedding(
        max_wavelength=layer.rope_wavelength,
        scaling_factor=layer.rope_scaling_factor,
    )
    options = {
        "rotary_embedding": rotary,
        "use_bias": False,
        "dropout": layer.dropout,
    }
    if layer.use_query_key_norm:
        options["query_key_norm"] = "rms"
        options["query_key_norm_epsilon"] = layer.layer_norm_epsilon
    if not layer.query_head_dim_normalize:
        scalar = layer.hidden_dim // layer.num_query_heads
        options["query_pre_attn_scalar"] = scalar
    if layer.logit_soft_cap:
        options["score_mod"] = mods.soft_cap(layer.logit_soft_cap)
    if layer.use_sliding_window_attention:
        options["sliding_window"] = layer.sliding_window_size
    return options


def _gemma3_weights(hub_layer, key, value):
    """Gemma's projections are `(heads, hidden_dim, head_dim)`, ours
    `(hidden_dim, heads, head_dim)`; its norms multiply by `1 + scale`."""
    if key in ("query/kernel", "key/kernel", "value/kernel"):
        return value.transpose(1, 0, 2)
    if key in ("query_norm", "key_norm"):
        return 1.0 + value
    return value


def _smollm3_options(layer, head_dim):
    """SmolLM3 (`SmolLM3Attention`): no biases, a rotation on the layers
    whose `rope_layer_enabled_list` entry is true and none on the others
    (NoPE: `rotary_embedding=None`). keras-hub applies neither its
    `attention_dropout` nor a window of `layer_types`: neither do we."""
    if layer.attention_bias:
        raise ValueError(
            "SmolLM3's attention biases are on the query, key and value "
            "but not the output, and keras_attention's `use_bias` is on "
            "all four. Received: attention_bias=True"
        )
    if layer.partial_rotary_factor != 1.0:
        raise ValueError(
            "keras-hub's SmolLM3 rotation with a partial factor does not "
            "run (its angles cover part of the head, its product the "
            "whole), so there is nothing to reproduce. Received: "
            f"partial_rotary_factor={layer.partial_rotary_factor}"
        )
    rotary = None
    if layer.use_rope:
        rotary = RotaryEmbedding(max_wavelength=layer.rope_theta)
    return {"rotary_embedding": rotary, "use_bias": False}


def _smollm3_weights(hub_layer, key, value):
    """SmolLM3's `Dense` query/key/value kernels `(hidden_dim, heads ·
    head_dim)` as heads."""
    if key.split("/")[0] in ("query", "key", "value"):
        head_dim = hub_layer.head_dim
        return value.reshape(value.shape[:-1] + (-1, head_dim))
    return value


def _qwen3_5_options(layer, head_dim):
    """Qwen3.5's full attention (`Qwen3_5Attention`): a sigmoid gate of
    the query per head (`use_gate=True`), per-head RMSNorm `x̂ · (1 +
    scale)` before the rotation, the first `partial_rotary_factor` of each
    head rotated, no biases; keras-hub's unfused window `|i - j| < w` (our
    `sliding_window=w`). M-RoPE (`position_ids`, the vision model's) is
    refused by the adapter at the call."""
    rotary = RotaryEmbedding(
        max_wavelength=layer.rope_max_wavelength,
        scaling_factor=layer.rope_scaling_factor,
        partial_rotary_factor=layer.partial_rotary_factor,
    )
    if layer.rotary_dim % 2:
        raise ValueError(
            "Qwen3.5 rotating an odd number of features per head has no "
            "equal in keras_attention's RotaryEmbedding. Received: "
            f"head_dim={head_dim}, "
            f"partial_rotary_factor={layer.partial_rotary_factor}"
        )
    options = _options(layer.dropout, rotary, use_bias=False)
    return {
        **options,
        "use_gate": True,
        "query_key_norm": "rms",
        "query_key_norm_epsilon": layer.layer_norm_epsilon,
        "sliding_window": layer.sliding_window_size or None,
    }


def _qwen3_5_weights(hub_layer, key, value):
    """Qwen3.5's query kernel is each head's query and gate side by side,
    `(hidden_dim, heads, 2 · head_dim)`: our `query` and `gate` kernels;
    its norms multiply by `1 + scale`."""
    if key == "query/kernel":
        head_dim = value.shape[-1] // 2
        return {
            "query/kernel": value[..., :head_dim],
            "gate/kernel": value[..., head_dim:],
        }
    if key in ("query_norm", "key_norm"):
        return value + 1.0
    return value


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
FAMILIES = (
    Family(
        "Llama 3",
        "LlamaBackbone",
        "LlamaAttention",
        "_self_attention_layer",
        _llama_options,
    ),
    Family(
        "Mistral",
        "MistralBackbone",
        "CachedMistralAttention",
        "_self_attention_layer",
        _mistral_options,
    ),
    Family(
        "gpt-oss",
        "GptOssBackbone",
        "GptOssAttention",
        "self_attention_layer",
        _gpt_oss_options,
    ),
    Family(
        "Qwen3",
        "Qwen3Backbone",
        "Qwen3Attention",
        "_self_attention_layer",
        _qwen3_options,
    ),
    Family(
        "Gemma 3",
        "Gemma3Backbone",
        "CachedGemma3Attention",
        "attention",
        _gemma3_options,
        transform=_gemma3_weights,
        scales_embeddings=True,
    ),
    Family(
        "SmolLM3",
        "SmolLM3Backbone",
        "SmolLM3Attention",
        "self_attn",
        _smollm3_options,
        renames={
            "q_proj": "query",
            "k_proj": "key",
            "v_proj": "value",
            "o_proj": "attention_output",
        },
        transform=_smollm3_weights,
        final_norm="norm",
    ),
    Family(
        "Qwen3.5",
        "Qwen3_5Backbone",
        "Qwen3_5Attention",
        "_self_attention_layer",
        _qwen3_5_options,
        transform=_qwen3_5_weights,
        linear=("_linear_attn", "Qwen3_5GatedDeltaNet"),
    ),
)
