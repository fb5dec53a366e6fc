"""MultiHeadLatentAttention: DeepSeek-V2's equations in NumPy, the absorbed
and the plain form, DeepSeek-V3's rotary conventions (adjacent pairs, YaRN
with its `mscale` in the softmax scale), cached decoding against the full
causal pass, blocks against dense, masks, mods, saving and mixed
precision."""

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention.ops import mods
from tests import rotary_references as refs
from tests.autodiff import gradients
from tests.layer_basics import check_layer_basics
from tests.layer_basics import to_np

CONFIG = dict(
    num_heads=4,
    kv_lora_rank=12,
    qk_nope_head_dim=6,
    qk_rope_head_dim=4,
    v_head_dim=5,
)


def _layer(rng, q_lora_rank=None, **kwargs):
    """A built layer with random weights (RMS scales included)."""
    layer = keras_attention.MultiHeadLatentAttention(
        **CONFIG, q_lora_rank=q_lora_rank, **kwargs
    )
    layer.build((None, None, 16))
    layer.set_weights(
        [rng.normal(0.0, 0.4, w.shape).astype("float32") for w in layer.weights]
    )
    return layer


def _weights(layer):
    return {w.path.split("/", 1)[1]: to_np(w) for w in layer.weights}


def _rope(x, start=0, wavelength=10000.0):
    """RoFormer's rotation of the two halves of the last axis, positions
    on axis 1 from `start`."""
    d, length = x.shape[-1], x.shape[1]
    angles = (np.arange(length) + start)[:, None] * wavelength ** (
        -np.arange(0, d, 2) / d
    )
    shape = (1, length) + (1,) * (x.ndim - 3) + (d // 2,)
    cos, sin = np.cos(angles).reshape(shape), np.sin(angles).reshape(shape)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)


def _rms(x, scale, eps=1e-6):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * scale


def _reference(layer, h, mask=None, rope=_rope, mscale=1.0):
    """DeepSeek-V2 (arXiv 2405.04434) eqs. 9-19 with the latents' RMSNorm:
    the output and the weights `(B, H, Tq, Tk)`. `rope` rotates the
    rotary parts, `mscale²` multiplies the softmax scale (DeepSeek-V3's
    `inference/model.py` with YaRN)."""
    w = _weights(layer)
    n, r, c = CONFIG["qk_nope_head_dim"], CONFIG["qk_rope_head_dim"], 12
    if layer.q_lora_rank is None:
        q = np.einsum("btd,dhk->bthk", h, w["query/kernel"])
    else:
        c_q = _rms(h @ w["query_down/kernel"], w["query_norm/scale"])
        q = np.einsum("btr,rhk->bthk", c_q, w["query/kernel"])
    q_c, q_r = q[..., :n], rope(q[..., n:])
    down = h @ w["kv_down/kernel"]
    c_kv, k_r = _rms(down[..., :c], w["kv_norm/scale"]), rope(down[..., c:])
    k_c = np.einsum("bsr,rhn->bshn", c_kv, w["key_up_kernel"])
    v = np.einsum("bsr,rhv->bshv", c_kv, w["value_up_kernel"])
    logits = np.einsum("bthn,bshn->bhts", q_c, k_c)
    logits += np.einsum("bthr,bsr->bhts", q_r, k_r)
    logits *= mscale**2 / np.sqrt(n + r)
    if mask is not None:
        logits = np.where(mask[:, None], logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    out = np.einsum("bhts,bshv->bthv", weights, v)
    return np.einsum(
        "bthv,hvd->btd", out, w["attention_output/kernel"]
    ), weights


def _causal(length):
    return np.tril(np.ones((length, length), bool))[None]


# Each form once, and each query projection once (the forms are equal
# everywhere by the cached tests below).
@pytest.mark.parametrize("q_lora_rank, absorb", [(None, False), (8, True)])
def test_equals_the_papers_equations(q_lora_rank, absorb, rand, rng):
    layer = _layer(rng, q_lora_rank)
    h = rand(2, 7, 16)
    out, weights = layer(
        h, use_causal_mask=True, return_attention_scores=True, absorb=absorb
    )
    want, want_weights = _reference(layer, h, _causal(7))
    np.testing.assert_allclose(to_np(out), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(to_np(weights), want_weights, atol=1e-5)


def _deepseek_v3_rope(x):
    """DeepSeek-V3's rotation: adjacent pairs, YaRN's frequencies (factor
    40 over 4,096 positions), positions on axis 1."""
    frequencies = refs.yarn_frequencies(x.shape[-1], 10000, 40.0, 4096)
    angles = np.arange(x.shape[1])[:, None] * frequencies
    angles = angles.reshape((1, x.shape[1]) + (1,) * (x.ndim - 3) + (-1,))
    return refs.rotate(x, angles, interleaved=True)


DEEPSEEK_V3_ROPE = dict(
    rope_interleaved=True,
    rope_type="yarn",
    rope_scaling_factor=40.0,
    rope_original_max_position_embeddings=4096,
)


@pytest.mark.parametrize("absorb", [False, True])
def test_deepseek_v3s_rope_pairs_yarn_and_mscale(absorb, rand, rng):
    # DeepSeek-V3 rotates adjacent pairs by YaRN's frequencies and puts
    # YaRN's m = 0.1 ln 40 + 1 into its softmax scale as m².
    layer = _layer(rng, **DEEPSEEK_V3_ROPE)
    h = rand(2, 7, 16)
    out, weights = layer(
        h, use_causal_mask=True, return_attention_scores=True, absorb=absorb
    )
    mscale = 0.1 * np.log(40.0) + 1
    want, want_weights = _reference(
        layer, h, _causal(7), rope=_deepseek_v3_rope, mscale=mscale
    )
    np.testing.assert_allclose(to_np(out), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(to_np(weights), want_weights, atol=1e-5)
    # An explicit factor replaces the default (DeepSeek's mscale 0.707).
    explicit = _layer(rng, **DEEPSEEK_V3_ROPE, rope_attention_factor=1.2)
    want, _ = _reference(explicit, h, rope=_deepseek_v3_rope, mscale=1.2)
    np.testing.assert_allclose(to_np(explicit(h)), want, rtol=1e-4, atol=1e-5)


def test_deepseek_weights_load_de_interleaved_into_the_half_split(rand, rng):
    # Instead of rope_interleaved=True: the rotary output columns of W_Q
    # (per head) and of kv_down (its last qk_rope_head_dim) de-interleaved.
    interleaved = _layer(rng, rope_interleaved=True)
    halves = keras_attention.MultiHeadLatentAttention(**CONFIG)
    halves.build((None, None, 16))
    n, r, c = CONFIG["qk_nope_head_dim"], CONFIG["qk_rope_head_dim"], 12
    query_order = np.concatenate([np.arange(n), n + refs.deinterleave(r)])
    down_order = np.concatenate([np.arange(c), c + refs.deinterleave(r)])
    weights = []
    for variable in interleaved.weights:
        value = to_np(variable)
        name = variable.path.split("/", 1)[1]
        if name == "query/kernel":
            value = value[..., query_order]
        elif name == "kv_down/kernel":
            value = value[..., down_order]
        weights.append(value)
    halves.set_weights(weights)
    h = rand(2, 6, 16)
    np.testing.assert_allclose(
        to_np(halves(h, use_causal_mask=True)),
        to_np(interleaved(h, use_causal_mask=True)),
        rtol=1e-4,
        atol=1e-5,
    )


def test_hand_case_one_key_gets_all_the_weight(rng):
    # With one position the weights are 1 and the output is W_O W_UV c.
    layer = _layer(rng)
    h = rng.normal(size=(1, 1, 16)).astype("float32")
    out, weights = layer(h, return_attention_scores=True)
    np.testing.assert_array_equal(to_np(weights), np.ones((1, 4, 1, 1)))
    w = _weights(layer)
    c = _rms((h @ w["kv_down/kernel"])[..., :12], w["kv_norm/scale"])
    v = np.einsum("bsr,rhv->bshv", c, w["value_up_kernel"])
    want = np.einsum("bthv,hvd->btd", v, w["attention_output/kernel"])
    np.testing.assert_allclose(to_np(out), want, rtol=1e-4, atol=1e-5)


def test_padding_masks_and_an_attention_mask(rand, rng):
    layer = _layer(rng)
    h = rand(2, 6, 16)
    value_mask = np.ones((2, 6), bool)
    value_mask[0, 4:] = False
    explicit = rng.random((2, 6, 6)) > 0.3
    explicit[..., 0] = True
    out, weights = layer(
        h,
        value_mask=value_mask,
        attention_mask=explicit,
        return_attention_scores=True,
    )
    mask = explicit & value_mask[:, None, :]
    want, want_weights = _reference(layer, h, mask)
    np.testing.assert_allclose(to_np(out), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(to_np(weights), want_weights, atol=1e-5)


@pytest.mark.parametrize("absorb", [False, True])
def test_cached_decoding_equals_the_full_causal_pass(absorb, rand, rng):
    layer = _layer(rng, q_lora_rank=8)
    h = rand(2, 6, 16)
    full = to_np(layer(h, use_causal_mask=True))
    cache = np.zeros((2, 6, layer.cache_dim), "float32")
    # A prompt of 3 in one call, then one position a call.
    out, cache = layer(
        h[:, :3],
        cache=cache,
        cache_update_index=0,
        use_causal_mask=True,
        absorb=absorb,
    )
    steps = [to_np(out)]
    for t in range(3, 6):
        out, cache = layer(
            h[:, t : t + 1],
            cache=cache,
            cache_update_index=t,
            use_causal_mask=True,
            absorb=absorb,
        )
        steps.append(to_np(out))
    np.testing.assert_allclose(
        np.concatenate(steps, 1), full, rtol=1e-4, atol=1e-5
    )
    # The cache holds the normalised latent and the rotated key only.
    w = _weights(layer)
    down = to_np(h) @ w["kv_down/kernel"]
    latent = _rms(down[..., :12], w["kv_norm/scale"])
    want = np.concatenate([latent, _rope(down[..., 12:])], -1)
    np.testing.assert_allclose(to_np(cache), want, rtol=1e-4, atol=1e-5)


def test_a_cache_without_an_update_index_is_attended_as_it_is(rand, rng):
    layer = _layer(rng)
    h = rand(1, 4, 16)
    _, cache = layer(
        h, cache=np.zeros((1, 4, 16), "float32"), cache_update_index=0
    )
    again, same = layer(h[:, -1:], cache=cache)
    np.testing.assert_array_equal(to_np(same), to_np(cache))
    # The query at position 0 (no index), over every slot.
    want = to_np(layer(h[:, -1:], h, absorb=False))
    np.testing.assert_allclose(to_np(again), want, rtol=1e-4, atol=1e-5)


def test_mods_decode_as_the_full_pass_attends(rand, rng):
    layer = _layer(rng, mask_mod=mods.sliding_window(2))
    h = rand(1, 5, 16)
    full = to_np(layer(h, use_causal_mask=True, score_mod=mods.alibi(4)))
    cache = np.zeros((1, 5, layer.cache_dim), "float32")
    steps = []
    for t in range(5):
        out, cache = layer(
            h[:, t : t + 1],
            cache=cache,
            cache_update_index=t,
            use_causal_mask=True,
            score_mod=mods.alibi(4),
        )
        steps.append(to_np(out))
    np.testing.assert_allclose(
        np.concatenate(steps, 1), full, rtol=1e-4, atol=1e-5
    )
    # The window as a mask: query i sees i - 1 and i.
    window = _causal(5) & ~np.tril(np.ones((5, 5), bool), -2)[None]
    plain = _layer(np.random.default_rng(0))
    plain.set_weights(layer.get_weights())
    want = plain(h, attention_mask=window, score_mod=mods.alibi(4))
    np.testing.assert_allclose(full, to_np(want), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("absorb", [False, True])
def test_blocks_equal_dense_with_gradients(absorb, rand, rng):
    dense = _layer(rng, chunk_size=0)
    blocks = _layer(np.random.default_rng(1), chunk_size=3)
    blocks.set_weights(dense.get_weights())
    h = rand(2, 8, 16)
    results = []
    for layer in (dense, blocks):

        def loss(x, *variables, layer=layer):
            out = layer(x, use_causal_mask=True, absorb=absorb)
            return keras.ops.sum(keras.ops.square(out))

        results.append(gradients(loss, [h, *layer.trainable_variables]))
    (value, grads), (want_value, want_grads) = results[1], results[0]
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for got, want in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(
            got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max()
        )


def test_saves_and_loads_in_a_functional_model(rand, rng, tmp_path):
    inputs = keras.Input((None, 16))
    layer = keras_attention.MultiHeadLatentAttention(
        **CONFIG, q_lora_rank=8, score_mod=mods.alibi(4)
    )
    model = keras.Model(inputs, layer(inputs, use_causal_mask=True))
    h = rand(2, 5, 16)
    want = model.predict(h, verbose=0)
    path = str(tmp_path / "mla.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(loaded.predict(h, verbose=0), want, atol=1e-6)
    config = loaded.layers[-1].get_config()
    assert config["kv_lora_rank"] == 12 and config["q_lora_rank"] == 8


def test_mixed_bfloat16_is_close_to_float32(rand, rng):
    full = _layer(rng)
    mixed = keras_attention.MultiHeadLatentAttention(
        **CONFIG, dtype="mixed_bfloat16"
    )
    mixed.build((None, None, 16))
    mixed.set_weights(full.get_weights())
    h = rand(2, 6, 16)
    out = mixed(h, use_causal_mask=True)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    want = to_np(full(h, use_causal_mask=True))
    scale = np.abs(want).max()
    np.testing.assert_allclose(
        to_np(out).astype("float32"), want, atol=0.05 * scale
    )


def test_bad_arguments_are_named(rand):
    with pytest.raises(ValueError, match="qk_rope_head_dim=3"):
        keras_attention.MultiHeadLatentAttention(
            **{**CONFIG, "qk_rope_head_dim": 3}
        )
    with pytest.raises(ValueError, match="kv_lora_rank=0"):
        keras_attention.MultiHeadLatentAttention(
            **{**CONFIG, "kv_lora_rank": 0}
        )
    layer = keras_attention.MultiHeadLatentAttention(**CONFIG)
    h = rand(2, 3, 16)
    with pytest.raises(ValueError, match=r"cache.shape=\(2, 4, 15\)"):
        layer(h, cache=np.zeros((2, 4, 15), "float32"), cache_update_index=0)
    with pytest.raises(ValueError, match="cache_update_index"):
        layer(h, cache_update_index=0)
    with pytest.raises(ValueError, match=r"query.shape=\(2, 16\)"):
        layer(rand(2, 16))
    with pytest.raises(TypeError, match="query"):
        layer(np.ones((2, 3, 16), "int32"))
    with pytest.raises(ValueError, match="rope_attention_factor=-1"):
        keras_attention.MultiHeadLatentAttention(
            **CONFIG, **DEEPSEEK_V3_ROPE, rope_attention_factor=-1
        )
    with pytest.raises(ValueError, match="original_max_position_embeddings"):
        keras_attention.MultiHeadLatentAttention(**CONFIG, rope_type="yarn")


def test_basics(rand):
    check_layer_basics(
        keras_attention.MultiHeadLatentAttention,
        {**CONFIG, "q_lora_rank": 8, **DEEPSEEK_V3_ROPE},
        [rand(2, 5, 16)],
        {"use_causal_mask": True},
        expected_output_shape=(2, 5, 16),
        expected_num_trainable_weights=8,
    )
