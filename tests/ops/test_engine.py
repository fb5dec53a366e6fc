"""ops/engine.py: one call record, planned once, and attention sinks.

- One plan per call: `keras_attention.ops.plan_attention` is counted on
  every path of `flex_attention`, `chunked_attention` and every
  multi-head layer (uncached and cached, a subclass's hook, N-D inputs).
- Attention sinks through the log-sum-exp: every kernel against a NumPy
  transcription of gpt-oss's `sdpa` (its `S`), the sinks' gradient
  against finite differences, a fully masked row still zero.
"""

import dataclasses

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention.ops import engine
from keras_attention.ops import mods
from keras_attention.ops import plan as plan_lib
from tests.autodiff import gradients


def _flex_calls(rand):
    q, kv = rand(1, 8, 4, 4), rand(1, 8, 2, 4)
    block_mask = keras_attention.ops.create_block_mask(
        mods.causal(), None, None, 8, 8, 4
    )
    flex = keras_attention.ops.flex_attention
    return {
        "fused": lambda: flex(q, kv, kv),
        "dense": lambda: flex(q, kv, kv, mask_mod=mods.causal()),
        "weights": lambda: flex(q, kv, kv, return_attention_scores=True),
        "blocks": lambda: flex(q, kv, kv, chunk_size=4),
        "block mask": lambda: flex(q, kv, kv, block_mask=block_mask),
        "chunked": lambda: keras_attention.ops.chunked_attention(
            q, kv, kv, chunk_size=4
        ),
    }


def test_each_op_call_is_planned_once(plans, rand):
    for name, call in _flex_calls(rand).items():
        plans.clear()
        call()
        assert len(plans) == 1, name


class _Halving(keras_attention.MultiHeadAttention):
    def _compute_attention(self, query, key, value, *args, **kwargs):
        out, weights = super()._compute_attention(
            query, key, value, *args, **kwargs
        )
        return out * 0.5, weights


def _layers():
    ka = keras_attention
    return {
        "mha fused": (ka.MultiHeadAttention(2, 4), {}),
        "mha dense": (
            ka.MultiHeadAttention(2, 4),
            {"return_attention_scores": True},
        ),
        "mha blocks": (ka.MultiHeadAttention(2, 4, chunk_size=4), {}),
        "mha mods": (
            ka.MultiHeadAttention(2, 4, score_mod=mods.alibi(2)),
            {"use_causal_mask": True},
        ),
        "mha hook": (_Halving(2, 4), {}),
        "mha n-d": (ka.MultiHeadAttention(2, 4, attention_axes=(1,)), {}),
        "self": (ka.SelfAttention(2, attention_width=3, use_sinks=True), {}),
        "gqa": (ka.GroupedQueryAttention(4, 4, 2, chunk_size=4), {}),
        "gqa additive": (
            ka.GroupedQueryAttention(4, 4, 2, score="additive"),
            {},
        ),
        "mla": (
            ka.MultiHeadLatentAttention(
                2,
                kv_lora_rank=4,
                qk_nope_head_dim=4,
                qk_rope_head_dim=2,
                v_head_dim=4,
            ),
            {},
        ),
    }


def test_each_layer_call_is_planned_once(plans, rand):
    x = rand(2, 8, 8)
    for name, (layer, kwargs) in _layers().items():
        args = (x,) if name in ("self", "mla") else (x, x)
        layer(*args, **kwargs)  # built
        plans.clear()
        layer(*args, **kwargs)
        assert len(plans) == 1, name


def test_a_flash_call_is_planned_once(plans, rand):
    """Keras's flash kernel raises on this CPU, after the one plan."""
    layer = keras_attention.MultiHeadAttention(2, 4, flash_attention=True)
    x = rand(1, 3, 8)
    plans.clear()
    with pytest.raises((ValueError, RuntimeError, ImportError)):
        layer(x, x)
    assert [p.path for p in plans] == ["flash"]


def test_each_cached_step_is_planned_once(plans, rand):
    x = rand(2, 4, 8)
    layer = keras_attention.GroupedQueryAttention(4, 4, 2)
    layer(x, x)
    cache = np.zeros((2, 2, 4, 2, 4), "float32")
    for i in range(4):
        plans.clear()
        _, cache = layer(
            x[:, i : i + 1],
            x[:, i : i + 1],
            cache=cache,
            cache_update_index=i,
            use_causal_mask=True,
        )
        assert len(plans) == 1, i


def gpt_oss_sdpa(q, k, v, sinks, scale, sliding_window=0):
    """NumPy transcription of gpt-oss's `sdpa` (openai/gpt-oss, torch
    reference): per example, `Q (T, H_kv, G, D)`, `K`, `V (T, H_kv, D)`,
    `S (H_kv · G,)`; causal, optionally a window; the sink is one more
    logit per head whose weight is dropped before the values."""
    n, kv_heads, groups, _ = q.shape
    k = np.broadcast_to(k[:, :, None], q.shape)
    v = np.broadcast_to(v[:, :, None], (n, kv_heads, groups, v.shape[-1]))
    s = np.broadcast_to(
        sinks.reshape(kv_heads, groups, 1, 1), (kv_heads, groups, n, 1)
    )
    mask = np.triu(np.full((n, n), -np.inf), 1)
    if sliding_window > 0:
        mask += np.tril(np.full((n, n), -np.inf), -sliding_window)
    qk = np.einsum("qhmd,khmd->hmqk", q, k) * scale + mask
    qk = np.concatenate([qk, s], -1)
    w = np.exp(qk - qk.max(-1, keepdims=True))
    w = (w / w.sum(-1, keepdims=True))[..., :-1]
    return np.einsum("hmqk,khmd->qhmd", w, v), w


def _sink_call(rng, window=0, weights=False, lse=False):
    q = rng.normal(size=(2, 7, 4, 3)).astype("float32")
    k = rng.normal(size=(2, 7, 2, 3)).astype("float32")
    v = rng.normal(size=(2, 7, 2, 5)).astype("float32")
    sinks = rng.normal(size=(4,)).astype("float32")
    band = (window - 1, None) if window else None
    masks = keras_attention.ops.masks.attention_masks(
        use_causal_mask=True, band=band
    )
    call = engine.AttentionCall(
        q,
        k,
        v,
        engine.ScaledDot(0.5),
        masks=masks,
        sinks=sinks,
        weights=weights,
        lse=lse,
    )
    return call, (q, k, v, sinks)


def _reference(q, k, v, sinks, window=0):
    outs, weights = [], []
    for b in range(q.shape[0]):
        qb = q[b].reshape(q.shape[1], k.shape[2], -1, q.shape[-1])
        out, w = gpt_oss_sdpa(qb, k[b], v[b], sinks, 0.5, window)
        outs.append(out.reshape(q.shape[1], q.shape[2], -1))
        weights.append(w.reshape(q.shape[2], q.shape[1], -1))
    return np.stack(outs), np.stack(weights)


@pytest.mark.parametrize("path", ["dense", "fused", "blocks"])
@pytest.mark.parametrize("window", [0, 3])
def test_sinks_equal_gpt_oss_on_every_kernel(path, window, rng):
    call, (q, k, v, sinks) = _sink_call(rng, window, path == "dense", True)
    plan = plan_lib.Plan(path, (2, 3) if path == "blocks" else None)
    result = engine.run(call, plan)
    want_out, want_weights = _reference(q, k, v, sinks, window)
    np.testing.assert_allclose(
        ops.convert_to_numpy(result.output), want_out, atol=1e-5
    )
    if path == "dense":
        weights = ops.convert_to_numpy(result.weights)
        np.testing.assert_allclose(weights, want_weights, atol=1e-6)
        assert np.all(weights.sum(-1) < 1)
    # The lse counts the sink: the log of the softmax's whole denominator.
    plain = engine.run(
        engine.AttentionCall(q, k, v, call.score, masks=call.masks, lse=True),
        plan,
    )
    want_lse = np.logaddexp(
        ops.convert_to_numpy(plain.lse), sinks[None, :, None]
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(result.lse), want_lse, atol=1e-5
    )


def test_a_fully_masked_row_with_sinks_gives_zeros(rng):
    call, (q, k, v, _) = _sink_call(rng, weights=True)
    key_mask = np.ones((2, 7), bool)
    key_mask[1] = False
    masks = keras_attention.ops.masks.attention_masks(key_mask=key_mask)
    for path in ("dense", "fused", "blocks"):
        plan = plan_lib.Plan(path, (2, 3) if path == "blocks" else None)
        result = engine.run(
            engine.AttentionCall(
                q, k, v, call.score, masks=masks, sinks=call.sinks
            ),
            plan,
        )
        out = ops.convert_to_numpy(result.output)
        assert np.all(np.isfinite(out)) and np.all(out[1] == 0), path


@pytest.mark.parametrize("path", ["dense", "fused", "blocks"])
def test_the_sinks_gradient_matches_finite_differences(path, rng):
    call, (q, k, v, sinks) = _sink_call(rng)
    upstream = rng.normal(size=(2, 7, 4, 5)).astype("float32")
    upstream_tensor = ops.convert_to_tensor(upstream)
    plan = plan_lib.Plan(path, (2, 3) if path == "blocks" else None)

    def loss(s, query):
        result = engine.run(
            dataclasses.replace(call, query=query, sinks=s), plan
        )
        return ops.sum(ops.multiply(result.output, upstream_tensor))

    _, (d_sinks, d_query) = gradients(loss, [sinks, q])
    eps = 1e-3
    for h in range(4):
        bump = np.eye(4, dtype="float64")[h] * eps
        up = (_reference(q, k, v, sinks + bump)[0] * upstream).sum()
        down = (_reference(q, k, v, sinks - bump)[0] * upstream).sum()
        np.testing.assert_allclose(
            d_sinks[h], (up - down) / (2 * eps), rtol=1e-3, atol=1e-4
        )
    # The query's gradient, which flows through the lse into the kernel
    # too, at a few entries.
    q64 = q.astype("float64")
    for index in [(0, 3, 1, 2), (1, 6, 3, 0), (1, 0, 0, 1)]:
        bump = np.zeros_like(q64)
        bump[index] = eps
        up = (_reference(q64 + bump, k, v, sinks)[0] * upstream).sum()
        down = (_reference(q64 - bump, k, v, sinks)[0] * upstream).sum()
        np.testing.assert_allclose(
            d_query[index], (up - down) / (2 * eps), rtol=1e-3, atol=1e-4
        )


def test_a_score_layer_takes_the_logits_dtype_and_the_ops_score_the_heads():
    half = np.ones((1, 3, 2, 4), "float16")
    layer_score = keras_attention.scores.DotScore()
    q, k, _ = engine.AttentionCall(
        half, half, half, layer_score
    ).dot_product_form()
    assert (_dtype(q), _dtype(k)) == ("float32", "float32")
    # `flex_attention`'s score leaves the heads as given (a GPU kernel
    # takes half precision; no float32 copies of them).
    q, k, scale = engine.AttentionCall(
        half, half, half, engine.ScaledDot(0.5)
    ).dot_product_form()
    assert (_dtype(q), _dtype(k)) == ("float16", "float16")
    assert scale == 0.5


def _dtype(x):
    return keras.backend.standardize_dtype(x.dtype)
