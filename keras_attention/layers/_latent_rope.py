"""The decoupled rotary part of `MultiHeadLatentAttention`, from its
`rope_*` options (private module): the `RotaryEmbedding` they make, their
config, and YaRN's factor, which DeepSeek puts on the logits instead of
on the rotated features."""

from keras_attention import _validation
from keras_attention.layers.rotary import RotaryEmbedding
from keras_attention.ops.rotary import yarn_attention_factor


def attention_factor_arg(rope_type, attention_factor):
    """`rope_attention_factor`, checked where YaRN reads it."""
    if rope_type == "yarn" and attention_factor is not None:
        _validation.positive_number("rope_attention_factor", attention_factor)
    return attention_factor


def rotary(options, attention_factor, dtype):
    """The `RotaryEmbedding` of the `rope_*` options (without their
    prefix). With YaRN the features are not scaled: DeepSeek puts YaRN's
    factor in the softmax scale (`logit_factor`)."""
    yarn = options["rope_type"] == "yarn"
    return RotaryEmbedding(
        **options,
        attention_factor=1.0 if yarn else attention_factor,
        dtype=dtype,
        name="rotary_embedding",
    )


def config(rotary_embedding, attention_factor):
    """The `rope_*` options of `rotary_embedding`, for `get_config`."""
    return {
        "rope_max_wavelength": rotary_embedding.max_wavelength,
        "rope_scaling_factor": rotary_embedding.scaling_factor,
        **{
            f"rope_{name}".replace("rope_rope_", "rope_"): value
            for name, value in rotary_embedding.scaling.items()
        },
        "rope_attention_factor": attention_factor,
        "rope_interleaved": rotary_embedding.interleaved,
    }


def logit_factor(rotary_embedding, attention_factor):
    """YaRN's `m²` on every logit (DeepSeek's softmax scale), `1.0`
    without YaRN; `m` is `attention_factor`, or YaRN's `0.1 · ln(s) + 1`."""
    if rotary_embedding.rope_type != "yarn":
        return 1.0
    if attention_factor is not None:
        return float(attention_factor) ** 2
    return yarn_attention_factor(rotary_embedding.scaling_factor) ** 2
