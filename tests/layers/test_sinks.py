"""`use_sinks=True` on the multi-head layers (gpt-oss's attention sinks).

The engine's correction is checked kernel by kernel against gpt-oss's own
function in tests/ops/test_engine.py; here the layers: the weight, the
paths (fused, dense, blocks) against a NumPy reference of the projected
heads, cached decoding against the full causal pass, a fully masked row,
and the config and `.keras` round trips.
"""

import keras
import numpy as np
import pytest

import keras_attention
from tests.layer_basics import np_softmax
from tests.layer_basics import to_np

ka = keras_attention


def _layers():
    return {
        "mha": lambda **k: ka.MultiHeadAttention(4, 3, use_sinks=True, **k),
        "self": lambda **k: ka.SelfAttention(4, use_sinks=True, **k),
        "gqa": lambda **k: ka.GroupedQueryAttention(
            4, 4, 2, use_sinks=True, **k
        ),
        "mla": lambda **k: ka.MultiHeadLatentAttention(
            4,
            kv_lora_rank=6,
            qk_nope_head_dim=3,
            qk_rope_head_dim=2,
            v_head_dim=3,
            use_sinks=True,
            **k,
        ),
    }


def _call(name, layer, x, **kwargs):
    if name in ("self", "mla"):
        return layer(x, **kwargs)
    return layer(x, x, **kwargs)


@pytest.mark.parametrize("name", ["mha", "self", "gqa", "mla"])
def test_a_sinks_weight_per_query_head_after_the_others(name, rand):
    layer = _layers()[name]()
    _call(name, layer, rand(2, 5, 8))
    assert layer.weights[-1].name == "sinks"
    assert tuple(layer.sinks.shape) == (4,)
    assert layer.get_config()["use_sinks"] is True
    without = type(layer).from_config(
        {**layer.get_config(), "use_sinks": False}
    )
    _call(name, without, rand(2, 5, 8))
    assert len(without.weights) == len(layer.weights) - 1
    assert without.sinks is None


def _numpy_sinks(q, k, v, sinks, scale, mask):
    """gpt-oss's softmax with a sink per query head, on projected heads
    `(B, T, H, D)` (K/V heads repeated for the groups)."""
    groups = q.shape[2] // k.shape[2]
    k, v = (np.repeat(t, groups, axis=2) for t in (k, v))
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    logits = np.where(mask, logits, -np.inf)
    sink = np.broadcast_to(sinks[None, :, None, None], logits.shape[:3] + (1,))
    weights = np_softmax(np.concatenate([logits, sink], -1))[..., :-1]
    return np.einsum("bhqk,bkhd->bqhd", weights, v), weights


@pytest.mark.parametrize("name", ["mha", "gqa"])
@pytest.mark.parametrize("chunk_size", [None, 0, 2])
def test_every_path_equals_numpy_of_the_projected_heads(name, chunk_size, rand):
    layer = _layers()[name](chunk_size=chunk_size)
    x = rand(2, 5, 8)
    mask = np.tril(np.ones((5, 5), bool))
    layer(x, x)
    layer.sinks.assign(np.array([-1.0, 0.5, 2.0, 0.0], "float32"))
    q, k, v = (
        to_np(dense(x))
        for dense in (layer.query_dense, layer.key_dense, layer.value_dense)
    )
    scale = 3**-0.5 if name == "mha" else 0.5
    context, weights = _numpy_sinks(q, k, v, to_np(layer.sinks), scale, mask)
    want = to_np(layer.output_dense(context))
    got = to_np(layer(x, x, use_causal_mask=True))
    np.testing.assert_allclose(got, want, atol=1e-5)
    if chunk_size != 2:  # the blocks never hold the weights
        _, got_weights = layer(
            x, x, use_causal_mask=True, return_attention_scores=True
        )
        got_weights = to_np(got_weights)
        np.testing.assert_allclose(got_weights, weights, atol=1e-6)
        assert np.all(got_weights.sum(-1) < 1)


def test_a_fully_masked_query_still_gets_zeros(rand):
    layer = ka.MultiHeadAttention(2, 4, use_sinks=True)
    x = rand(2, 4, 8)
    mask = np.ones((2, 4), bool)
    mask[1] = False
    _, weights = layer(x, x, value_mask=mask, return_attention_scores=True)
    assert np.all(np.isfinite(to_np(weights)))
    assert np.all(to_np(weights)[1] == 0)


@pytest.mark.parametrize("name", ["gqa", "mla"])
def test_cached_decoding_equals_the_full_causal_pass(name, rand):
    kwargs = {}
    if name == "gqa":
        kwargs["rotary_embedding"] = ka.RotaryEmbedding()
    layer = _layers()[name](**kwargs)
    x = rand(2, 6, 8)
    full = to_np(_call(name, layer, x, use_causal_mask=True))
    if name == "gqa":
        cache = np.zeros((2, 2, 6, 2, 4), "float32")
    else:
        cache = np.zeros((2, 6, layer.cache_dim), "float32")
    for i in range(6):
        step = x[:, i : i + 1]
        out, cache = _call(
            name,
            layer,
            step,
            cache=cache,
            cache_update_index=i,
            use_causal_mask=True,
        )
        np.testing.assert_allclose(to_np(out)[:, 0], full[:, i], atol=1e-5)


@pytest.mark.parametrize("name", ["mha", "self", "gqa", "mla"])
def test_sinks_survive_save_and_load(name, rand, tmp_path):
    inputs = keras.Input((5, 8))
    layer = _layers()[name]()
    outputs = _call(name, layer, inputs, use_causal_mask=True)
    model = keras.Model(inputs, outputs)
    layer.sinks.assign(np.array([1.0, -2.0, 0.3, 0.0], "float32"))
    path = tmp_path / "sinks.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    x = rand(2, 5, 8)
    np.testing.assert_allclose(
        loaded.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6
    )
    np.testing.assert_allclose(
        to_np(loaded.layers[1].sinks), [1.0, -2.0, 0.3, 0.0]
    )
