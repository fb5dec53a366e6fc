"""layers/_query_key_norm.py: `query_key_norm="rms"`, every lane.

The per-head RMSNorm of the projected queries and keys, before the
rotation, is keras-hub's Qwen3 attention with the weights copied (norm
scales random, not ones) on MultiHeadAttention, SelfAttention and
GroupedQueryAttention; a cached decode is the full pass; the option and
its weights save and load; MLA refuses it.
"""

import keras
import numpy as np
import pytest

import keras_attention
from tests.layer_basics import randomize_weights
from tests.layer_basics import to_np

HEADS, KV_HEADS, HEAD_DIM, DIM, T = 4, 2, 8, 16, 6


def _qwen3(keras_hub, kv_heads, rng):
    from keras_hub.src.models.qwen3 import qwen3_attention

    theirs = qwen3_attention.Qwen3Attention(
        num_query_heads=HEADS,
        num_key_value_heads=kv_heads,
        head_dim=HEAD_DIM,
        rope_max_wavelength=100,
        layer_norm_epsilon=1e-5,
    )
    theirs.build((2, T, DIM))
    for variable in theirs.weights:
        value = rng.normal(scale=0.5, size=variable.shape)
        if variable.path.endswith("scale"):
            value = 1.0 + value  # random scales, far from the ones
        variable.assign(value.astype("float32"))
    return theirs


def _copy(ours, theirs):
    """Qwen3's weights by name into ours (its norms are `scale` of its
    `query_dense_layernorm` and `key_dense_layernorm`)."""
    named = {v.path.split("/")[-2]: v for v in theirs.weights}
    ours.query_dense.kernel.assign(named["query"])
    ours.key_dense.kernel.assign(named["key"])
    ours.value_dense.kernel.assign(named["value"])
    ours.output_dense.kernel.assign(named["attention_output"])
    ours.query_norm.assign(named["query_dense_layernorm"])
    ours.key_norm.assign(named["key_dense_layernorm"])


def _rotary():
    return keras_attention.RotaryEmbedding(max_wavelength=100)


OPTIONS = dict(
    use_bias=False, query_key_norm="rms", query_key_norm_epsilon=1e-5
)

LAYERS = {
    "MultiHeadAttention": (
        HEADS,
        lambda: keras_attention.MultiHeadAttention(
            HEADS, HEAD_DIM, rotary_embedding=_rotary(), **OPTIONS
        ),
        lambda layer, x, **kw: layer(x, x, use_causal_mask=True, **kw),
    ),
    "SelfAttention": (
        HEADS,
        lambda: keras_attention.SelfAttention(
            HEADS, HEAD_DIM, rotary_embedding=_rotary(), **OPTIONS
        ),
        lambda layer, x, **kw: layer(x, use_causal_mask=True, **kw),
    ),
    "GroupedQueryAttention": (
        KV_HEADS,
        lambda: keras_attention.GroupedQueryAttention(
            HEAD_DIM, HEADS, KV_HEADS, rotary_embedding=_rotary(), **OPTIONS
        ),
        lambda layer, x, **kw: layer(x, x, use_causal_mask=True, **kw),
    ),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_equals_keras_hubs_qwen3_attention_with_copied_weights(name, rng):
    keras_hub = pytest.importorskip("keras_hub", reason="Qwen3 is the model")
    kv_heads, make, call = LAYERS[name]
    theirs = _qwen3(keras_hub, kv_heads, rng)
    x = rng.normal(size=(2, T, DIM)).astype("float32")
    causal = np.tril(np.ones((T, T), "bool"))[None].repeat(2, 0)
    ours = make()
    call(ours, x)
    _copy(ours, theirs)
    np.testing.assert_allclose(
        to_np(call(ours, x)),
        to_np(theirs(x, attention_mask=causal)),
        atol=1e-5,
    )


def test_cached_decoding_equals_the_full_pass(rng):
    _, make, call = LAYERS["GroupedQueryAttention"]
    layer = make()
    x = rng.normal(size=(2, T, DIM)).astype("float32")
    full = to_np(call(layer, x))
    for variable in layer.weights:
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    full = to_np(call(layer, x))
    cache = np.zeros((2, 2, T, KV_HEADS, HEAD_DIM), "float32")
    for i in range(T):
        out, cache = layer(
            x[:, i : i + 1],
            x[:, i : i + 1],
            cache=cache,
            cache_update_index=keras.ops.convert_to_tensor(i, "int32"),
            use_causal_mask=True,
        )
        np.testing.assert_allclose(to_np(out)[:, 0], full[:, i], atol=1e-5)


def test_weights_follow_the_projections_and_save_and_load(rng, tmp_path):
    _, make, call = LAYERS["GroupedQueryAttention"]
    layer = make()
    inputs = keras.Input((T, DIM))
    model = keras.Model(inputs, layer(inputs, inputs, use_causal_mask=True))
    for variable in model.weights:
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    names = [v.path.split("/")[-1] for v in layer.weights]
    assert names[-2:] == ["query_norm", "key_norm"]
    assert tuple(layer.query_norm.shape) == (HEAD_DIM,)
    config = layer.get_config()
    assert config["query_key_norm"] == "rms"
    assert config["query_key_norm_epsilon"] == 1e-5
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    x = rng.normal(size=(2, T, DIM)).astype("float32")
    np.testing.assert_allclose(to_np(loaded(x)), to_np(model(x)), atol=1e-6)


def test_no_norm_has_no_weights():
    layer = keras_attention.MultiHeadAttention(2, 4)
    layer(np.ones((1, 3, 8), "float32"), np.ones((1, 3, 8), "float32"))
    assert layer.query_norm is None and layer.key_norm is None
    assert len(layer.weights) == 8


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(query_key_norm="l2"), "Received: query_key_norm='l2'"),
        (
            dict(query_key_norm="rms", query_key_norm_epsilon=0),
            "Received: query_key_norm_epsilon=0",
        ),
    ],
)
def test_bad_options_are_refused_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_attention.MultiHeadAttention(2, 4, **kwargs)


def test_latent_attention_refuses_it():
    with pytest.raises(ValueError, match="does not take `query_key_norm`"):
        keras_attention.MultiHeadLatentAttention(
            2,
            kv_lora_rank=4,
            qk_nope_head_dim=4,
            qk_rope_head_dim=2,
            v_head_dim=4,
            query_key_norm="rms",
        )


def _gemma3(rng, **options):
    from keras_hub.src.models.gemma3 import gemma3_attention

    theirs = gemma3_attention.CachedGemma3Attention(
        head_dim=HEAD_DIM,
        num_query_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        query_head_dim_normalize=False,
        **options,
    )
    theirs.build((2, T, 24))
    randomize_weights(theirs, rng)
    return theirs


@pytest.mark.parametrize("query_key_norm", [None, "rms"])
def test_query_pre_attn_scalar_equals_keras_hubs_gemma3_attention(
    query_key_norm, rng
):
    # keras-hub's Gemma 3 scales its queries by (hidden_dim // heads)**-0.5
    # (here 6, not the head size 8); its norms are `1 + scale`.
    pytest.importorskip("keras_hub", reason="Gemma 3 is the model")
    theirs = _gemma3(rng, use_query_key_norm=query_key_norm is not None)
    ours = keras_attention.GroupedQueryAttention(
        HEAD_DIM,
        HEADS,
        KV_HEADS,
        use_bias=False,
        rotary_embedding=keras_attention.RotaryEmbedding(),
        query_key_norm=query_key_norm,
        query_pre_attn_scalar=24 // HEADS,
    )
    x = rng.normal(size=(2, T, 24)).astype("float32")
    ours(x, x)
    named = {"/".join(v.path.split("/")[-2:]): v for v in theirs.weights}
    for name in ("query", "key", "value"):
        kernel = keras.ops.transpose(named[f"{name}/kernel"], (1, 0, 2))
        getattr(ours, f"{name}_dense").kernel.assign(kernel)
    ours.output_dense.kernel.assign(named["attention_output/kernel"])
    if query_key_norm:
        ours.query_norm.assign(1.0 + named["query_norm/scale"])
        ours.key_norm.assign(1.0 + named["key_norm/scale"])
    causal = np.tril(np.ones((T, T), "int32"))[None].repeat(2, 0)
    np.testing.assert_allclose(
        to_np(ours(x, x, use_causal_mask=True)),
        to_np(theirs(x, attention_mask=causal)),
        atol=1e-5,
    )


def test_query_pre_attn_scalar_is_the_logits_scale(rng):
    # Against the same layer with an unscaled dot score and the queries'
    # kernel times s**-0.5.
    x = rng.normal(size=(2, T, DIM)).astype("float32")
    scaled = keras_attention.MultiHeadAttention(
        HEADS, HEAD_DIM, use_bias=False, query_pre_attn_scalar=3.0
    )
    plain = keras_attention.MultiHeadAttention(
        HEADS, HEAD_DIM, use_bias=False, score="dot"
    )
    scaled(x, x), plain(x, x)
    plain.set_weights(scaled.get_weights())
    plain.query_dense.kernel.assign(scaled.query_dense.kernel * 3.0**-0.5)
    np.testing.assert_allclose(
        to_np(scaled(x, x, use_causal_mask=True)),
        to_np(plain(x, x, use_causal_mask=True)),
        atol=1e-5,
    )
    assert scaled.get_config()["query_pre_attn_scalar"] == 3.0
    again = keras_attention.MultiHeadAttention.from_config(scaled.get_config())
    assert again.query_pre_attn_scalar == 3.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(query_pre_attn_scalar=0), "Received: query_pre_attn_scalar=0"),
        (
            dict(query_pre_attn_scalar=4, score="dot"),
            'needs score="scaled_dot"',
        ),
    ],
)
def test_bad_query_pre_attn_scalar_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_attention.GroupedQueryAttention(4, 2, 1, **kwargs)


def test_qwen3_5_full_attention_is_a_gated_partially_rotated_gqa(rng):
    # Qwen3.5's full attention (the map swap_attention will need): its
    # query kernel is the query's and the gate's side by side per head
    # (`(dim, heads, 2 · head_dim)`), its norms `1 + scale`, a quarter of
    # each head rotated; ours is `use_gate=True`, `query_key_norm="rms"`
    # and `RotaryEmbedding(partial_rotary_factor=0.25)`.
    pytest.importorskip("keras_hub", reason="Qwen3.5 is the model")
    from keras_hub.src.models.qwen3_5 import qwen3_5_attention

    theirs = qwen3_5_attention.Qwen3_5Attention(
        num_query_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        partial_rotary_factor=0.25,
        rope_max_wavelength=100,
    )
    theirs.build((2, T, DIM))
    randomize_weights(theirs, rng)
    ours = keras_attention.GroupedQueryAttention(
        HEAD_DIM,
        HEADS,
        KV_HEADS,
        use_bias=False,
        use_gate=True,
        query_key_norm="rms",
        rotary_embedding=keras_attention.RotaryEmbedding(
            max_wavelength=100, partial_rotary_factor=0.25
        ),
    )
    x = rng.normal(size=(2, T, DIM)).astype("float32")
    ours(x, x)
    named = {"/".join(v.path.split("/")[-2:]): v for v in theirs.weights}
    query_and_gate = to_np(named["query/kernel"])
    ours.query_dense.kernel.assign(query_and_gate[..., :HEAD_DIM])
    (gate,) = [v for v in ours.weights if v.path.endswith("gate/kernel")]
    gate.assign(query_and_gate[..., HEAD_DIM:])
    ours.key_dense.kernel.assign(named["key/kernel"])
    ours.value_dense.kernel.assign(named["value/kernel"])
    ours.output_dense.kernel.assign(named["attention_output/kernel"])
    ours.query_norm.assign(1.0 + named["query_norm/scale"])
    ours.key_norm.assign(1.0 + named["key_norm/scale"])
    causal = np.tril(np.ones((T, T), "int32"))[None].repeat(2, 0)
    np.testing.assert_allclose(
        to_np(ours(x, x, use_causal_mask=True)),
        to_np(theirs(x, attention_mask=causal)),
        atol=1e-5,
    )
