"""keras_attention.hub: keras-hub models on our attention.

Tiny random keras-hub models of each family (every weight random, the
norms' scales and the biases too), swapped in place: their logits and
greedy tokens are keras-hub's own, keras-hub's attention is never called
again, and the model saves and loads swapped.
"""

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention import hub
from tests.layer_basics import to_np

keras_hub = pytest.importorskip("keras_hub", reason="keras-hub is the model")

TINY = dict(
    vocabulary_size=40,
    num_layers=2,
    num_query_heads=4,
    num_key_value_heads=2,
    hidden_dim=16,
    intermediate_dim=24,
)

# A family: its backbone and causal LM, the tiny settings that exercise
# what the swap maps (Llama 3.1's rope scaling, Mistral's window,
# gpt-oss's sinks, biases, YaRN and windowed layers, Qwen3's query/key
# norms with random scales), the decoder's
# attribute that holds its attention.
FAMILIES = {
    "llama3": (
        "Llama3Backbone",
        "Llama3CausalLM",
        dict(
            rope_max_wavelength=500,
            rope_frequency_adjustment_factor=8.0,
            rope_low_freq_factor=1.0,
            rope_high_freq_factor=4.0,
            rope_pretraining_sequence_length=16,
        ),
        "_self_attention_layer",
    ),
    "mistral": (
        "MistralBackbone",
        "MistralCausalLM",
        dict(sliding_window=3, rope_scaling_factor=2.0),
        "_self_attention_layer",
    ),
    "gpt_oss": (
        "GptOssBackbone",
        "GptOssCausalLM",
        dict(
            head_dim=8,
            num_experts=2,
            top_k=1,
            sliding_window=2,
            rope_max_wavelength=150,
            rope_scaling_factor=32.0,
        ),
        "self_attention_layer",
    ),
    "qwen3": (
        "Qwen3Backbone",
        "Qwen3CausalLM",
        dict(head_dim=8, rope_max_wavelength=500, rope_scaling_factor=2.0),
        "_self_attention_layer",
    ),
}


def _causal_lm(family, seed=0):
    backbone_name, causal_lm_name, options, _ = FAMILIES[family]
    backbone = getattr(keras_hub.models, backbone_name)(**TINY, **options)
    rng = np.random.default_rng(seed)
    for variable in backbone.weights:
        scale = 1.0 if variable.path.endswith("sinks") else 0.3
        value = rng.normal(scale=scale, size=variable.shape)
        variable.assign(value.astype(variable.dtype))
    causal_lm = getattr(keras_hub.models, causal_lm_name)(
        backbone=backbone, preprocessor=None
    )
    causal_lm.compile(sampler="greedy")
    return causal_lm


def _batch(seed=1, length=9, lengths=(9, 5)):
    """A right-padded batch."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, TINY["vocabulary_size"], size=(2, length))
    mask = np.arange(length)[None] < np.array(lengths)[:, None]
    return {"token_ids": ids * mask, "padding_mask": mask}


def _attentions(causal_lm, family):
    attribute = FAMILIES[family][3]
    return [
        getattr(decoder, attribute)
        for decoder in causal_lm.backbone.transformer_layers
    ]


def _logits(causal_lm, batch):
    # keras-hub gives a query whose keys are all masked (a padded query
    # past Mistral's window) uniform weights, ours zeros: only the real
    # tokens' logits are a model's output.
    return to_np(causal_lm(batch))[batch["padding_mask"]]


@pytest.fixture(params=sorted(FAMILIES))
def family(request):
    return request.param


def _refuse_keras_hubs_attention(monkeypatch, layers):
    def refused(self, *args, **kwargs):
        raise AssertionError(f"keras-hub's {type(self).__name__} was called")

    for layer in layers:
        monkeypatch.setattr(type(layer), "call", refused)


def _count_our_calls(monkeypatch):
    calls = []
    call = hub.KerasHubAttention.call

    def counted(self, *args, **kwargs):
        calls.append(self.name)
        return call(self, *args, **kwargs)

    monkeypatch.setattr(hub.KerasHubAttention, "call", counted)
    return calls


def test_logits_and_greedy_tokens_are_keras_hubs(family, monkeypatch):
    causal_lm = _causal_lm(family)
    batch = _batch()
    prompt = _batch(seed=2, length=8, lengths=(3, 5))
    want = _logits(causal_lm, batch)
    tokens = causal_lm.generate(prompt, stop_token_ids=None)
    kept = causal_lm.generate_function
    hubs = _attentions(causal_lm, family)
    weights = len(causal_lm.weights)

    assert hub.swap_attention(causal_lm) is causal_lm
    ours = _attentions(causal_lm, family)
    assert all(isinstance(layer, hub.KerasHubAttention) for layer in ours)
    assert len(causal_lm.weights) == weights
    assert not any(
        w is v for w in causal_lm.weights for h in hubs for v in h.weights
    )
    _refuse_keras_hubs_attention(monkeypatch, hubs)
    calls = _count_our_calls(monkeypatch)

    got = _logits(causal_lm, batch)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert len(calls) == TINY["num_layers"]
    swapped_tokens = causal_lm.generate(prompt, stop_token_ids=None)
    assert causal_lm.generate_function is not kept
    assert len(calls) > TINY["num_layers"]
    np.testing.assert_array_equal(
        swapped_tokens["token_ids"], tokens["token_ids"]
    )


def test_saves_and_loads_swapped_in_safe_mode(family, tmp_path, monkeypatch):
    causal_lm = _causal_lm(family)
    hubs = _attentions(causal_lm, family)
    hub.swap_attention(causal_lm)
    batch = _batch()
    want = _logits(causal_lm, batch)
    path = str(tmp_path / "swapped.keras")
    causal_lm.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded).__name__ == FAMILIES[family][1]
    attentions = _attentions(loaded, family)
    assert all(isinstance(a, hub.KerasHubAttention) for a in attentions)
    assert all(
        isinstance(a.attention, keras_attention.GroupedQueryAttention)
        for a in attentions
    )
    _refuse_keras_hubs_attention(monkeypatch, hubs)
    np.testing.assert_allclose(_logits(loaded, batch), want, atol=1e-6)


def test_a_swapped_model_swaps_again_as_it_is():
    causal_lm = hub.swap_attention(_causal_lm("llama3"))
    layers = _attentions(causal_lm, "llama3")
    assert hub.swap_attention(causal_lm.backbone) is causal_lm.backbone
    assert _attentions(causal_lm, "llama3") == layers


def _tiny(name, **options):
    heads = {} if "num_attention_heads" in options else {"num_query_heads": 2}
    return getattr(keras_hub.models, name)(
        vocabulary_size=16,
        num_layers=1,
        num_key_value_heads=1,
        hidden_dim=8,
        intermediate_dim=8,
        **heads,
        **options,
    )


@pytest.mark.parametrize(
    "name, options, match",
    [
        (
            "Gemma3Backbone",
            dict(head_dim=4, image_size=None, vision_encoder=None),
            "Gemma 3 needs .*cache_update_mask",
        ),
        (
            "SmolLM3Backbone",
            dict(
                num_attention_heads=2,
                attention_bias=False,
                attention_dropout=0.0,
                rope_layer_enabled_list=[False],
                layer_types=["full_attention"],
                mlp_bias=False,
                layer_norm_epsilon=1e-6,
                max_position_embeddings=16,
                rope_theta=10000,
                partial_rotary_factor=1.0,
            ),
            "SmolLM3 needs .*NoPE",
        ),
    ],
)
def test_families_our_layers_cannot_reproduce_are_named(name, options, match):
    with pytest.raises(ValueError, match=match):
        hub.swap_attention(_tiny(name, **options))


def test_other_models_are_refused_naming_the_families():
    gpt2 = keras_hub.models.GPT2Backbone(
        vocabulary_size=16,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=8,
        max_sequence_length=8,
    )
    families = "Llama 3, Mistral, gpt-oss, Qwen3. Received: a GPT2Backbone"
    with pytest.raises(ValueError, match=families):
        hub.swap_attention(gpt2)
    with pytest.raises(ValueError, match="Received: a Sequential"):
        hub.swap_attention(keras.Sequential())


@pytest.mark.parametrize(
    "name, options, match",
    [
        (
            "LlamaBackbone",
            dict(
                rope_position_scaling_factor=2.0,
                rope_frequency_adjustment_factor=8.0,
                rope_low_freq_factor=1.0,
                rope_high_freq_factor=4.0,
                rope_pretraining_sequence_length=16,
            ),
            "Received: rope_position_scaling_factor=2.0",
        ),
        ("MistralBackbone", dict(dropout=0.1), "Received: dropout=0.1"),
        (
            "GptOssBackbone",
            dict(head_dim=5, num_experts=2, top_k=1),
            "Received: head_dim=5",
        ),
    ],
)
def test_settings_our_layers_cannot_reproduce_are_named(name, options, match):
    with pytest.raises(ValueError, match=match):
        hub.swap_attention(_tiny(name, **options))


def test_the_adapter_needs_a_layer():
    with pytest.raises(ValueError, match="Received: attention='gqa'"):
        hub.KerasHubAttention("gqa")
