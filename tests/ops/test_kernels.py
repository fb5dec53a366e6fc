"""ops/_kernels.py: every kernel of the engine on one call, against NumPy
with the key/value heads repeated (what the kernels avoid doing).

One call of grouped heads with every kind of mask the record carries: a
padding mask, a per-head explicit mask, a band and a mask mod at a query
offset (a cache's), a score mod and a bias. The dense and block kernels
take all of it; the fused kernel the tensor masks.
"""

import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention.ops import _kernels
from keras_attention.ops import _registry
from keras_attention.ops import engine
from keras_attention.ops import mods
from keras_attention.ops import plan as plan_lib
from tests.layer_basics import np_softmax

B, TQ, TK, H, HKV, D = 2, 5, 9, 4, 2, 3
OFFSET = 3  # the queries are positions 3..7 of the keys


def _inputs(rng):
    q = rng.normal(size=(B, TQ, H, D)).astype("float32")
    k = rng.normal(size=(B, TK, HKV, D)).astype("float32")
    v = rng.normal(size=(B, TK, HKV, D + 1)).astype("float32")
    key_mask = np.arange(TK)[None].repeat(B, 0) < [[TK], [7]]
    per_head = rng.random((B, H, TQ, TK)) > 0.2
    return q, k, v, key_mask, per_head


def _numpy(q, k, v, mask, scale, bias=None, alibi=False):
    """Output, weights and lse of attention with repeated K/V heads."""
    groups = q.shape[2] // k.shape[2]
    k, v = (np.repeat(t, groups, axis=2) for t in (k, v))
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if alibi:
        slopes = np.array(mods.alibi_slopes(H))[:, None, None]
        rows = np.arange(TQ)[:, None] + OFFSET
        logits = logits - slopes * np.abs(rows - np.arange(TK)[None])
    if bias is not None:
        logits = logits + bias
    masked = np.where(mask, logits, -np.inf)
    weights = np.nan_to_num(np_softmax(masked))
    top = np.max(masked, -1, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0)
    with np.errstate(divide="ignore"):
        lse = np.log(np.exp(masked - safe).sum(-1)) + safe[..., 0]
    out = np.einsum("bhqk,bkhd->bqhd", weights, v)
    return out, weights, lse


def _positions(causal_window):
    rows = np.arange(TQ)[:, None] + OFFSET
    cols = np.arange(TK)[None]
    return (rows >= cols) & (rows - cols < causal_window)


def _call(rng, **fields):
    q, k, v, key_mask, per_head = _inputs(rng)
    masks = keras_attention.ops.masks.attention_masks(
        key_mask=key_mask,
        attention_mask=per_head,
        use_causal_mask=True,
        band=(3, None),
        mask_mods=fields.pop("mask_mods", ()),
    )
    call = engine.AttentionCall(
        q,
        k,
        v,
        engine.ScaledDot(0.5),
        masks=masks,
        query_offset=OFFSET,
        lse=True,
        **fields,
    )
    mask = per_head & key_mask[:, None, None, :] & _positions(4)
    return call, (q, k, v, mask)


@pytest.mark.parametrize("path", ["dense", "blocks"])
def test_dense_and_blocks_take_every_mask_mod_and_bias(path, rng):
    # The mask mod keeps even keys past position 1 (read at absolute
    # positions); ALiBi reads them too; the bias the call's own.
    def even_keys(b, h, q_idx, kv_idx):
        return ops.logical_or(kv_idx % 2 == 0, q_idx < 5)

    bias = rng.normal(size=(1, H, TQ, TK)).astype("float32")
    call, (q, k, v, mask) = _call(
        rng,
        mask_mods=(even_keys,),
        score_mod=mods.alibi(H),
        bias=bias,
        weights=path == "dense",
    )
    rows = np.arange(TQ)[:, None] + OFFSET
    mask = mask & ((np.arange(TK)[None] % 2 == 0) | (rows < 5))
    plan = plan_lib.Plan(path, (2, 3) if path == "blocks" else None)
    got = _registry.KERNELS[path](call, plan)
    want = _numpy(q, k, v, mask, 0.5, bias, alibi=True)
    np.testing.assert_allclose(
        ops.convert_to_numpy(got.output), want[0], atol=1e-5
    )
    lse = ops.convert_to_numpy(got.lse)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want[2]))
    finite = np.isfinite(want[2])
    np.testing.assert_allclose(lse[finite], want[2][finite], atol=1e-5)
    if path == "dense":
        np.testing.assert_allclose(
            ops.convert_to_numpy(got.weights), want[1], atol=1e-6
        )


def test_fused_takes_the_tensor_masks_at_their_offset(rng):
    call, (q, k, v, mask) = _call(rng)
    got = _registry.KERNELS["fused"](call, plan_lib.Plan("fused"))
    want = _numpy(q, k, v, mask, 0.5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(got.output), want[0], atol=1e-5
    )
    lse = ops.convert_to_numpy(got.lse)
    finite = np.isfinite(want[2])
    np.testing.assert_allclose(lse[finite], want[2][finite], atol=1e-5)
    assert np.all(np.isneginf(lse[~finite]))


@pytest.mark.parametrize("path", ["dense", "blocks"])
def test_an_additive_score_runs_dense_and_in_blocks(path, rng):
    q, k, v, key_mask, _ = _inputs(rng)
    score = keras_attention.scores.get("additive")
    score.build((B, HKV, None, D), (B, HKV, None, D))
    masks = keras_attention.ops.masks.attention_masks(
        key_mask=key_mask, use_causal_mask=True
    )
    call = engine.AttentionCall(q, k, v, score, masks=masks)
    plan = plan_lib.Plan(path, (2, 4) if path == "blocks" else None)
    got = _registry.KERNELS[path](call, plan).output
    # The score on repeated heads, `(B, H, Tq, Tk)`.
    groups = H // HKV
    heads = (np.repeat(t, groups, 2).transpose(0, 2, 1, 3) for t in (k, v))
    k_rep, v_rep = heads
    logits = ops.convert_to_numpy(score(q.transpose(0, 2, 1, 3), k_rep))
    mask = key_mask[:, None, None, :] & np.tril(np.ones((TQ, TK), bool))
    weights = np.nan_to_num(np_softmax(np.where(mask, logits, -np.inf)))
    want = np.einsum("bhqk,bhkd->bqhd", weights, v_rep)
    np.testing.assert_allclose(ops.convert_to_numpy(got), want, atol=1e-5)


def test_the_fused_kernel_folds_a_per_head_mask_onto_its_query_heads(rng):
    """A `(B, H, Tq, Tk)` mask with grouped heads: head `h`'s row goes to
    query head `h`."""
    q, k, v, _, per_head = _inputs(rng)
    got = keras_attention.ops.dot_product_attention(q, k, v, per_head, 0.5)
    want = _numpy(q, k, v, per_head, 0.5)[0]
    np.testing.assert_allclose(ops.convert_to_numpy(got), want, atol=1e-5)


def test_padding_is_masked_in_blocks_a_mask_mod_keeps_whole(rng):
    """A block that the mask mod keeps whole still has its padded keys
    masked (before, a layer with `value_mask` and a `mask_mod` in blocks
    attended to padded keys: 0.08 off the dense path)."""
    q, k, v, _, _ = _inputs(rng)
    key_mask = np.ones((B, TK), bool)
    key_mask[:, 1] = False  # inside the first key block

    def every_key(b, h, q_idx, kv_idx):
        return kv_idx >= 0

    masks = keras_attention.ops.masks.attention_masks(
        key_mask=key_mask, mask_mods=(every_key,)
    )
    call = engine.AttentionCall(q, k, v, engine.ScaledDot(0.5), masks=masks)
    got = _kernels.blocks(call, plan_lib.Plan("blocks", (TQ, 3)))
    want = _numpy(q, k, v, key_mask[:, None, None, :], 0.5)[0]
    np.testing.assert_allclose(
        ops.convert_to_numpy(got.output), want, atol=1e-5
    )


@pytest.mark.parametrize("path", ["dense", "fused", "blocks"])
def test_the_kernels_read_key_positions_and_a_query_offset_per_sequence(
    path, rng
):
    """A cache's slots out of order (`key_positions`, `-1` empty and
    masked) and one first position per sequence (a paged cache's): the
    causal band and ALiBi read both, on every kernel."""
    q, k, v, _, _ = _inputs(rng)
    positions = np.array([4, 5, -1, 0, 1, 2, 3, 6, 7], "int32")
    offsets = np.array([3, 1], "int32")
    masks = keras_attention.ops.masks.attention_masks(
        key_mask=(positions >= 0)[None], use_causal_mask=True
    )
    score_mod = mods.alibi(H) if path != "fused" else None
    call = engine.AttentionCall(
        q,
        k,
        v,
        engine.ScaledDot(0.5),
        masks=masks,
        score_mod=score_mod,
        query_offset=offsets,
        key_positions=positions,
    )
    plan = plan_lib.Plan(path, (2, 4) if path == "blocks" else None)
    got = ops.convert_to_numpy(_registry.KERNELS[path](call, plan).output)
    rows = offsets[:, None, None] + np.arange(TQ)[None, :, None]  # (B,Tq,1)
    cols = positions[None, None, :]
    mask = (rows >= cols) & (cols >= 0)
    groups = H // HKV
    k_rep, v_rep = (np.repeat(t, groups, axis=2) for t in (k, v))
    logits = np.einsum("bqhd,bkhd->bhqk", q, k_rep) * 0.5
    if score_mod is not None:
        slopes = np.array(mods.alibi_slopes(H))[None, :, None, None]
        logits = logits - slopes * np.abs(rows - cols)[:, None]
    weights = np.nan_to_num(
        np_softmax(np.where(mask[:, None], logits, -np.inf))
    )
    want = np.einsum("bhqk,bkhd->bqhd", weights, v_rep)
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("path", ["dense", "blocks"])
def test_quantized_keys_and_values_are_read_with_their_scales(path, rng):
    """int8 keys and values with a scale each (`key_scale`): the blocks
    dequantize block by block, the other kernels whole (`engine.run`);
    both give attention over `q · s`."""
    q, k, v, key_mask, _ = _inputs(rng)
    v = v[..., :D]
    kq = rng.integers(-127, 128, size=k.shape).astype("int8")
    vq = rng.integers(-127, 128, size=v.shape).astype("int8")
    ks = rng.random((B, TK, HKV)).astype("float32") / 127
    vs = rng.random((B, TK, HKV)).astype("float32") / 127
    masks = keras_attention.ops.masks.attention_masks(
        key_mask=key_mask, use_causal_mask=True
    )
    call = engine.AttentionCall(
        q,
        kq,
        vq,
        engine.ScaledDot(0.5),
        masks=masks,
        query_offset=OFFSET,
        key_scale=ks,
        value_scale=vs,
    )
    plan = plan_lib.Plan(path, (2, 4) if path == "blocks" else None)
    got = ops.convert_to_numpy(engine.run(call, plan).output)
    mask = key_mask[:, None, None, :] & _positions(TK)
    want = _numpy(q, kq * ks[..., None], vq * vs[..., None], mask, 0.5)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_declared_path_loads_its_module_once_then_is_in_the_table(
    monkeypatch,
):
    loads = []

    def load():
        loads.append(1)
        _registry.register("test_path")(lambda call, plan: "ran")

    monkeypatch.setitem(_registry._LOADERS, "test_path", load)
    try:
        assert _registry.KERNELS["test_path"](None, None) == "ran"
        assert _registry.KERNELS["test_path"](None, None) == "ran"
        assert len(loads) == 1
    finally:
        _registry.KERNELS.pop("test_path", None)
    with pytest.raises(KeyError, match="no_such_path"):
        _registry.KERNELS["no_such_path"]
