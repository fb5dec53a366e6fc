"""keras_attention.hub on Qwen3.5 (text): its full attention on our
`GroupedQueryAttention`, its Gated DeltaNet layers on our `GatedDeltaNet`.

A tiny random Qwen3.5 (every weight random: the norms' scales, `A_log`,
`dt_bias`, the convolution), swapped in place: its logits are keras-hub's
own on a right-padded batch, its `generate` is greedy decoding by full
forward passes (keras-hub's own is not: docs/hub.md), and so is our
compiled generation on it (`hub.language_model`), keras-hub's layers are
never called again, and the model saves and loads swapped.
"""

import functools

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention import hub
from keras_attention.models import Generator
from tests.layer_basics import to_np

keras_hub = pytest.importorskip("keras_hub", reason="keras-hub is the model")
hub_gdn = pytest.importorskip(
    "keras_hub.src.models.qwen3_5.qwen3_5_gated_delta_net"
)

VOCABULARY = 40
LAYER_TYPES = ["linear_attention", "full_attention", "linear_attention"]


@pytest.fixture(autouse=True)
def small_keras_hub_chunks(monkeypatch):
    # keras-hub's chunked Gated DeltaNet unrolls `chunk_size - 1` steps of
    # Python per chunk (64 by default: a minute per forward pass on JAX).
    # The chunk size is the blocking only, not the model: 4 here.
    chunked = hub_gdn._chunk_gated_delta_rule
    monkeypatch.setattr(
        hub_gdn,
        "_chunk_gated_delta_rule",
        functools.partial(chunked, chunk_size=4),
    )


def _causal_lm(seed=0, dtype=None):
    backbone = keras_hub.models.Qwen3_5Backbone(
        dtype=dtype,
        vocabulary_size=VOCABULARY,
        num_layers=len(LAYER_TYPES),
        num_query_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        hidden_dim=16,
        intermediate_dim=24,
        layer_types=LAYER_TYPES,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=4,
        linear_value_head_dim=4,
        linear_conv_kernel_dim=3,
        rope_max_wavelength=100,
        rope_scaling_factor=2.0,
    )
    rng = np.random.default_rng(seed)
    for variable in backbone.weights:
        # Drawn in float32 whatever the model's dtype: a float64 model
        # carries the same weights as the float32 one.
        value = rng.normal(scale=0.3, size=variable.shape).astype("float32")
        variable.assign(value.astype(variable.dtype))
    causal_lm = keras_hub.models.Qwen3_5CausalLM(
        backbone=backbone, preprocessor=None
    )
    causal_lm.compile(sampler="greedy")
    return causal_lm


def _right_padded(seed, length, lengths):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCABULARY, size=(len(lengths), length))
    mask = np.arange(length)[None] < np.array(lengths)[:, None]
    return {"token_ids": ids * mask, "padding_mask": mask}


def _logits(causal_lm, batch):
    return to_np(causal_lm(batch))[batch["padding_mask"]]


def _layers(causal_lm):
    """`(full attentions, Gated DeltaNets)` of the decoders."""
    decoders = causal_lm.backbone.transformer_layers
    full = [d._self_attention_layer for d in decoders[1::2]]
    return full, [d._linear_attn for d in decoders[::2]]


def _check_greedy_by_full_passes(causal_lm, prompt, tokens):
    """`tokens` are greedy decoding by full forward passes from `prompt`
    (keras-hub's sampler's: from the shortest prompt's end, the rows still
    in their prompt keeping it): each generated token is the argmax of a
    full pass over the tokens before it. The model is causal, so one
    full pass over `tokens` gives each position's logits from the tokens
    before it alone: one pass checks every step."""
    in_prompt = np.array(prompt["padding_mask"])
    np.testing.assert_array_equal(
        tokens[in_prompt], np.array(prompt["token_ids"])[in_prompt]
    )
    everything = np.ones_like(in_prompt)
    logits = to_np(causal_lm({"token_ids": tokens, "padding_mask": everything}))
    chosen = logits[:, :-1].argmax(axis=-1)
    generated = ~in_prompt[:, 1:]
    generated[:, : in_prompt.sum(axis=1).min() - 1] = False
    assert generated.any()
    np.testing.assert_array_equal(tokens[:, 1:][generated], chosen[generated])


def _refuse_keras_hubs_layers(monkeypatch, layers):
    def refused(self, *args, **kwargs):
        raise AssertionError(f"keras-hub's {type(self).__name__} was called")

    for layer in layers:
        monkeypatch.setattr(type(layer), "call", refused)


def test_logits_are_keras_hubs_and_generate_is_greedy(monkeypatch):
    causal_lm = _causal_lm()
    batch = _right_padded(1, 9, (9, 5))
    want = to_np(causal_lm.predict_on_batch(batch))[batch["padding_mask"]]
    # On TensorFlow the reference is keras-hub's model in float64, the
    # same weights: its float32 logits strayed by up to 9.8e-6 from them
    # on an AVX-512 CPU (ours 3.1e-6; 2026-12-07), so the bound below is
    # on ours, not on the rounding of both. (JAX computes float64 only
    # with x64 enabled; keras-hub's Gated DeltaNet fails in float64 on
    # PyTorch. There its float32 logits are the reference.)
    want_exact = want
    if keras.backend.backend() == "tensorflow":
        exact = _causal_lm(dtype="float64").predict_on_batch(batch)
        want_exact = to_np(exact)[batch["padding_mask"]]
        np.testing.assert_allclose(want, want_exact, rtol=0, atol=1e-4)
    full, linear = _layers(causal_lm)
    weights = len(causal_lm.weights)

    assert hub.swap_attention(causal_lm) is causal_lm
    ours_full, ours_linear = _layers(causal_lm)
    assert all(isinstance(a, hub.KerasHubAttention) for a in ours_full)
    assert all(isinstance(a, hub.KerasHubGatedDeltaNet) for a in ours_linear)
    # Qwen3.5's query kernel is two of ours (the query's and the gate's).
    assert len(causal_lm.weights) == weights + len(full)
    _refuse_keras_hubs_layers(monkeypatch, full + linear)

    got = _logits(causal_lm, batch)
    np.testing.assert_allclose(got, want_exact, rtol=0, atol=1e-5)
    # The views of the CausalLM itself: the full attention layer's weights
    # (the Gated DeltaNet layers have none), the padded keys at 0.
    maps = keras_attention.visualize.collect_attention(causal_lm, batch)
    assert list(maps) == ["qwen3_5_backbone/transformer_layer_1"]
    weights = maps["qwen3_5_backbone/transformer_layer_1"]
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert (weights[1, ..., 5:] == 0).all() and (weights[0, ..., 5:] > 0).any()
    prompt = _right_padded(2, 8, (3, 5))
    tokens = to_np(causal_lm.generate(prompt, stop_token_ids=None)["token_ids"])
    _check_greedy_by_full_passes(causal_lm, prompt, tokens)

    # Our compiled generation on the same model (hub.language_model): the
    # Gated DeltaNet layers on a GatedDeltaCache, the attention on a
    # RollingCache (keras-hub's default window, 32768); greedy decoding by
    # full passes again.
    generator = Generator(hub.language_model(causal_lm))
    kinds = [type(cache).__name__ for cache in generator.caches(2, 9)]
    assert kinds == ["GatedDeltaCache", "RollingCache", "GatedDeltaCache"]
    ids = generator.generate(np.array([[5, 9, 2, 7], [3, 1, 1, 20]]), 5)
    in_prompt = np.arange(9)[None].repeat(2, axis=0) < 4
    prompt = {"token_ids": ids * in_prompt, "padding_mask": in_prompt}
    _check_greedy_by_full_passes(causal_lm, prompt, ids)


def test_saves_and_loads_swapped_in_safe_mode(tmp_path, monkeypatch):
    causal_lm = _causal_lm()
    full, linear = _layers(causal_lm)
    hub.swap_attention(causal_lm)
    batch = _right_padded(1, 9, (9, 5))
    want = _logits(causal_lm, batch)
    path = str(tmp_path / "swapped.keras")
    causal_lm.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    ours_full, ours_linear = _layers(loaded)
    assert all(
        isinstance(a.attention, keras_attention.GroupedQueryAttention)
        for a in ours_full
    )
    assert all(
        isinstance(a.layer, keras_attention.GatedDeltaNet) for a in ours_linear
    )
    _refuse_keras_hubs_layers(monkeypatch, full + linear)
    np.testing.assert_allclose(_logits(loaded, batch), want, atol=1e-6)


def test_the_adapters_refuse_what_they_cannot_run():
    with pytest.raises(ValueError, match="Received: layer='gdn'"):
        hub.KerasHubGatedDeltaNet("gdn")
    gqa = keras_attention.GroupedQueryAttention(4, 2, 1)
    adapter = hub.KerasHubAttention(gqa)
    x = np.ones((1, 2, 8), "float32")
    with pytest.raises(ValueError, match="M-RoPE"):
        adapter(x, position_ids=np.zeros((1, 4, 2), "int32"))
