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

# An argument of TINY that a family does not take.
DROP = object()

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
    # Six layers: five sliding (wavelength 10k, the local factor), one
    # global (1M, the global factor); norms `1 + scale`, soft-capped
    # logits, the post-norms.
    "gemma3": (
        "Gemma3Backbone",
        "Gemma3CausalLM",
        dict(
            num_layers=6,
            image_size=None,
            head_dim=8,
            use_post_ffw_norm=True,
            use_post_attention_norm=True,
            attention_logit_soft_cap=2.0,
            final_logit_soft_cap=30.0,
            use_sliding_window_attention=True,
            sliding_window_size=3,
            local_rope_scaling_factor=1.5,
            global_rope_scaling_factor=4.0,
        ),
        "attention",
    ),
    # SmolLM3's NoPE: the second layer does not rotate.
    "smollm3": (
        "SmolLM3Backbone",
        "SmolLM3CausalLM",
        dict(
            num_attention_heads=4,
            num_query_heads=DROP,
            attention_bias=False,
            attention_dropout=0.0,
            rope_layer_enabled_list=[True, False],
            layer_types=["attention", "attention"],
            mlp_bias=False,
            layer_norm_epsilon=1e-6,
            max_position_embeddings=64,
            rope_theta=500.0,
            partial_rotary_factor=1.0,
        ),
        "self_attn",
    ),
}


def _causal_lm(family, seed=0):
    backbone_name, causal_lm_name, options, _ = FAMILIES[family]
    options = {**TINY, **options}
    options = {k: v for k, v in options.items() if v is not DROP}
    backbone = getattr(keras_hub.models, backbone_name)(**options)
    rng = np.random.default_rng(seed)
    for variable in backbone.weights:
        if variable.path.endswith("inv_freq"):
            continue  # SmolLM3's frequencies, not a weight
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


def _generate(causal_lm, prompt):
    """Greedy `generate` without a preprocessor. keras-hub's Gemma 3
    returns `images: None` beside the tokens, which its own `generate`
    cannot gather without a preprocessor: its generate function then."""
    if type(causal_lm).__name__ != "Gemma3CausalLM":
        return causal_lm.generate(prompt, stop_token_ids=None)
    generate = causal_lm.make_generate_function()
    outputs = generate(prompt, stop_token_ids=None)
    return {"token_ids": to_np(outputs["token_ids"])}


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
    tokens = _generate(causal_lm, prompt)
    kept = causal_lm.generate_function
    hubs = _attentions(causal_lm, family)
    # SmolLM3's rotation keeps its frequencies as variables: ours does not.
    frequencies = [w for h in hubs for w in h.weights if "inv_freq" in w.path]
    weights = len(causal_lm.weights) - len(frequencies)

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
    assert len(calls) == len(hubs)
    swapped_tokens = _generate(causal_lm, prompt)
    assert causal_lm.generate_function is not kept
    assert len(calls) > len(hubs)
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


def test_gemma3_scaled_by_the_model_width_maps_to_query_pre_attn_scalar():
    # keras-hub's decoder always builds `query_head_dim_normalize=True`;
    # its attention reads the flag at each call: `(hidden_dim // heads)
    # ** -0.5` (16 // 4 = 4) in place of the head size's (8).
    causal_lm = _causal_lm("gemma3")
    for layer in _attentions(causal_lm, "gemma3"):
        layer.query_head_dim_normalize = False
    batch = _batch()
    want = _logits(causal_lm, batch)
    hub.swap_attention(causal_lm)
    ours = _attentions(causal_lm, "gemma3")
    assert {layer.attention.query_pre_attn_scalar for layer in ours} == {4}
    np.testing.assert_allclose(_logits(causal_lm, batch), want, atol=1e-5)


def _saved_weights(path):
    """`{path in the file: shape}` of a `.keras` file's model weights."""
    import io
    import zipfile

    h5py = pytest.importorskip("h5py")
    with zipfile.ZipFile(path) as archive:
        data = io.BytesIO(archive.read("model.weights.h5"))
    found = {}

    def visit(name, item):
        # h5py stops visiting at the first value returned: none is.
        if isinstance(item, h5py.Dataset) and not name.startswith("optim"):
            found[name] = item.shape

    with h5py.File(data, "r") as weights:
        weights.visititems(visit)
    return found


@pytest.mark.parametrize("family", ["qwen3", "smollm3"])
def test_the_saved_file_holds_our_attention_weights_only(family, tmp_path):
    # The swap untracks keras-hub's attention: its variables (SmolLM3's
    # `q_proj` and `inv_freq`, Qwen3's norms' `scale`) leave the model and
    # its file, ours join them, one entry each.
    causal_lm = hub.swap_attention(_causal_lm(family))
    path = str(tmp_path / "swapped.keras")
    causal_lm.save(path)
    saved = _saved_weights(path)
    assert sorted(saved.values()) == sorted(
        tuple(w.shape) for w in causal_lm.weights
    )
    attention = {
        name.split("/")[-3]
        for name in saved
        if f"/{FAMILIES[family][3]}/" in name
    }
    ours = {"query_dense", "key_dense", "value_dense", "output_dense"}
    norms = {"_query_key_norm"} if family == "qwen3" else set()
    assert attention == ours | norms


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


def test_other_models_are_refused_naming_the_families():
    gpt2 = keras_hub.models.GPT2Backbone(
        vocabulary_size=16,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=8,
        max_sequence_length=8,
    )
    families = (
        "Llama 3, Mistral, gpt-oss, Qwen3, Gemma 3, SmolLM3, Qwen3.5. "
        "Received: a GPT2Backbone"
    )
    with pytest.raises(ValueError, match=families):
        hub.swap_attention(gpt2)
    with pytest.raises(ValueError, match="Received: a Sequential"):
        hub.swap_attention(keras.Sequential())
    # language_model names itself, not swap_attention.
    with pytest.raises(ValueError, match="^language_model takes.*Sequential"):
        hub.language_model(keras.Sequential())


# A one-layer SmolLM3's settings (`_tiny`'s sizes).
SMOLLM3 = dict(
    num_attention_heads=2,
    attention_bias=False,
    attention_dropout=0.0,
    rope_layer_enabled_list=[True],
    layer_types=["attention"],
    mlp_bias=False,
    layer_norm_epsilon=1e-6,
    max_position_embeddings=16,
    rope_theta=10000.0,
    partial_rotary_factor=1.0,
)


# A one-layer Qwen3.5's settings (`_tiny`'s sizes).
QWEN3_5 = dict(
    layer_types=["full_attention"],
    linear_num_key_heads=1,
    linear_num_value_heads=1,
    linear_key_head_dim=4,
    linear_value_head_dim=4,
)


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
        (
            "Gemma3Backbone",
            dict(image_size=None, head_dim=4, use_bidirectional_attention=True),
            "Received: use_bidirectional_attention=True",
        ),
        (
            "SmolLM3Backbone",
            dict(SMOLLM3, attention_bias=True),
            "Received: attention_bias=True",
        ),
        (
            "SmolLM3Backbone",
            dict(SMOLLM3, partial_rotary_factor=0.5),
            "Received: partial_rotary_factor=0.5",
        ),
        (
            "Qwen3_5Backbone",
            dict(QWEN3_5, head_dim=4),
            "Received: head_dim=4, partial_rotary_factor=0.25",
        ),
    ],
)
def test_settings_our_layers_cannot_reproduce_are_named(name, options, match):
    with pytest.raises(ValueError, match=match):
        hub.swap_attention(_tiny(name, **options))


def test_the_adapter_needs_a_layer():
    with pytest.raises(ValueError, match="Received: attention='gqa'"):
        hub.KerasHubAttention("gqa")


def test_the_adapter_refuses_arguments_keras_hub_does_not_pass():
    gqa = keras_attention.GroupedQueryAttention(4, 2, 1)
    adapter = hub.KerasHubAttention(gqa)
    x = np.ones((1, 2, 8), "float32")
    # SmolLM3's backbone passes its constructor's keywords down: ignored.
    adapter(x, name="backbone", dtype="float32", trainable=True)
    with pytest.raises(TypeError, match=r"arguments \['positions'\]"):
        adapter(x, positions=np.arange(2))
