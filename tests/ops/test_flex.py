"""`keras_attention.ops.flex_attention`: a hand case, NumPy, dense vs
blocks (outputs and gradients), block masks, and PyTorch's FlexAttention."""

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from keras import ops

from keras_attention import ops as ka_ops
from keras_attention.ops import mods
from tests.autodiff import gradients
from tests.profiles import examples

BACKEND = keras.backend.backend()


def np_flex(q, k, v, score_fn=None, mask_fn=None, scale=None):
    """NumPy FlexAttention on `(B, T, H, D)`; `score_fn(s, b, h, i, j)`
    and `mask_fn(b, h, i, j)` take index arrays of shape `(B, H, Tq, Tk)`.
    Key heads are repeated for the grouped query heads."""
    groups = q.shape[2] // k.shape[2]
    k, v = (np.repeat(t, groups, axis=2) for t in (k, v))
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.einsum("bqhd,bkhd->bhqk", q, k).astype("float64") * scale
    b, h, i, j = np.meshgrid(*(np.arange(n) for n in s.shape), indexing="ij")
    if score_fn is not None:
        s = score_fn(s, b, h, i, j)
    keep = np.ones(s.shape, bool) if mask_fn is None else mask_fn(b, h, i, j)
    s = np.where(keep, s, -np.inf)
    top = np.max(s, axis=-1, keepdims=True)
    w = np.exp(s - np.where(np.isfinite(top), top, 0))
    total = w.sum(-1, keepdims=True)
    w = np.where(total > 0, w / np.where(total > 0, total, 1), 0)
    return np.einsum("bhqk,bkhd->bqhd", w, v), w


def test_hand_case_causal_and_fully_masked_query():
    # Two queries, two keys, logits 0: the first query sees key 0 only,
    # the second both (mean of the values); with query 0 masked entirely
    # its output and weights are zero.
    q = np.zeros((1, 2, 1, 1), "float32")
    k = np.zeros((1, 2, 1, 1), "float32")
    v = np.array([1.0, 3.0], "float32").reshape(1, 2, 1, 1)
    out, w = ka_ops.flex_attention(
        q, k, v, mask_mod=mods.causal(), return_attention_scores=True
    )
    np.testing.assert_allclose(ops.convert_to_numpy(out).ravel(), [1, 2])
    np.testing.assert_allclose(
        ops.convert_to_numpy(w)[0, 0], [[1, 0], [0.5, 0.5]]
    )

    def no_first_query(b, h, i, j):
        return ops.logical_and(i > 0, ops.greater_equal(j, 0))

    for chunk_size in (0, 1):
        out = ka_ops.flex_attention(
            q, k, v, mask_mod=no_first_query, chunk_size=chunk_size
        )
        np.testing.assert_allclose(ops.convert_to_numpy(out).ravel(), [0, 2])


def test_dense_path_matches_numpy_with_grouped_heads(rand):
    q, k, v = rand(2, 5, 4, 3), rand(2, 7, 2, 3), rand(2, 7, 2, 3)

    def score(s, b, h, i, j):
        return s + 0.3 * ops.cast(h, s.dtype) - 0.1 * ops.cast(j, s.dtype)

    def mask(b, h, i, j):
        return ops.not_equal((i + j + h) % 3, 0)

    out, w = ka_ops.flex_attention(
        q, k, v, score_mod=score, mask_mod=mask, return_attention_scores=True
    )
    want, want_w = np_flex(
        q,
        k,
        v,
        lambda s, b, h, i, j: s + 0.3 * h - 0.1 * j,
        lambda b, h, i, j: (i + j + h) % 3 != 0,
    )
    np.testing.assert_allclose(ops.convert_to_numpy(out), want, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(w), want_w, atol=1e-6)


def _mod_cases(table, tensor, segments, lengths):
    """`name -> (score_mod, mask_mod)`, one per mod and combinations."""
    return {
        "none": (None, None),
        "causal": (None, mods.causal()),
        "window": (
            None,
            ka_ops.and_masks(mods.causal(), mods.sliding_window(3)),
        ),
        "prefix": (mods.soft_cap(2.0), mods.prefix_lm(3)),
        "document": (mods.alibi(4), mods.document(segments)),
        "padding": (None, mods.padding(lengths)),
        "t5": (mods.relative_position_bias(table, 8, 16, True), None),
        "bias": (mods.bias(tensor), mods.causal()),
        "chain": (
            mods.chain(mods.alibi(4), mods.bias(tensor), mods.soft_cap(1.5)),
            ka_ops.or_masks(mods.causal(), mods.sliding_window(2)),
        ),
    }


def _value_and_grads(q, k, v, mod_tensor, build, upstream, **kwargs):
    """`sum(out · upstream)` and its gradients: the value and the value's
    gradient (`Σ w · upstream`) check the outputs, under one compile."""

    def fn(q, k, v, t):
        score_mod, mask_mod = build(t)
        out = ka_ops.flex_attention(
            q, k, v, score_mod=score_mod, mask_mod=mask_mod, **kwargs
        )
        return ops.sum(ops.multiply(out, upstream))

    value, grads = gradients(fn, [q, k, v, mod_tensor])
    return [value, *grads]


@examples(4)
@given(
    seed=st.integers(0, 2**16),
    t=st.integers(1, 9),
    kv_heads=st.sampled_from([1, 2]),
    groups=st.sampled_from([1, 2]),
    block=st.integers(1, 5),
    case=st.sampled_from(
        ["causal", "window", "prefix", "document", "padding", "t5", "bias"]
        + ["chain"]
    ),
)
def test_blocks_give_the_dense_outputs_and_gradients(
    seed, t, kv_heads, groups, block, case
):
    """Random shapes, mods and block sizes; the gradients include those of
    the table / bias a score mod reads (its `tensors`)."""
    rng = np.random.default_rng(seed)
    heads = kv_heads * groups
    q = rng.normal(size=(2, t, heads, 4)).astype("float32")
    k, v = (
        rng.normal(size=(2, t, kv_heads, 4)).astype("float32") for _ in "kv"
    )
    upstream = rng.normal(size=(2, t, heads, 4)).astype("float32")
    segments = np.sort(rng.integers(0, 3, size=(2, t)), axis=1)
    lengths = rng.integers(0, t + 1, size=(2,))
    tensor = rng.normal(size=(1, heads, t, t)).astype("float32")
    table = rng.normal(size=(8, heads)).astype("float32")
    mod_tensor = tensor if case in ("bias", "chain") else table

    def build(m):
        # The tensor differentiated is the one this case's score mod reads.
        t_table = m if case == "t5" else table
        t_tensor = m if case in ("bias", "chain") else tensor
        return _mod_cases(t_table, t_tensor, segments, lengths)[case]

    dense = _value_and_grads(q, k, v, mod_tensor, build, upstream, chunk_size=0)
    blocks = _value_and_grads(
        q, k, v, mod_tensor, build, upstream, chunk_size=block
    )
    for want, got in zip(dense, blocks, strict=True):
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)


def test_relative_position_table_gets_the_dense_gradient_through_blocks(rand):
    q, k, v = rand(1, 6, 2, 4), rand(1, 6, 2, 4), rand(1, 6, 2, 4)
    table = keras.Variable(rand(8, 2))

    def loss(table, chunk_size):
        score_mod = mods.relative_position_bias(table, 8, 16, False)
        out = ka_ops.flex_attention(
            q, k, v, score_mod=score_mod, chunk_size=chunk_size
        )
        return ops.sum(ops.square(out))

    _, (dense,) = gradients(lambda t: loss(t, 0), [table])
    _, (blocks,) = gradients(lambda t: loss(t, 2), [table])
    assert np.abs(dense).max() > 1e-3
    np.testing.assert_allclose(blocks, dense, atol=1e-5)


def test_block_mask_skips_empty_blocks_and_trusts_full_ones(rand):
    """Two mask mods that differ only where the block mask says "skip" or
    "full": the blocks give the block mask's mask, so empty blocks are
    skipped and the mask is not evaluated in full ones."""
    q, k, v = rand(1, 8, 2, 4), rand(1, 8, 2, 4), rand(1, 8, 2, 4)
    causal = mods.causal()
    block_mask = ka_ops.create_block_mask(causal, None, None, 8, 8, 4)

    def wrong_off_diagonal(b, h, i, j):
        # Keeps the future of other blocks, drops the past of other blocks.
        same_block = ops.equal(i // 4, j // 4)
        return ops.logical_and(same_block, ops.greater_equal(i, j))

    want = ka_ops.flex_attention(q, k, v, mask_mod=causal, chunk_size=0)
    got = ka_ops.flex_attention(
        q, k, v, mask_mod=wrong_off_diagonal, block_mask=block_mask
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(got), ops.convert_to_numpy(want), atol=1e-5
    )
    # The block mask's own mask is the default mask mod.
    got = ka_ops.flex_attention(q, k, v, block_mask=block_mask)
    np.testing.assert_allclose(
        ops.convert_to_numpy(got), ops.convert_to_numpy(want), atol=1e-5
    )


@pytest.mark.tensorflow_lane
def test_block_mask_per_batch_document_gradients(rand):
    """Other lanes: the "document" case of
    `test_blocks_give_the_dense_outputs_and_gradients` (per-batch segments,
    whose block mask `flex_attention` makes itself)."""
    segments = np.array([[0, 0, 0, 1, 1, 1, 2, 2], [0, 0, 0, 0, 0, 0, 1, 1]])
    document = mods.document(segments)
    block_mask = ka_ops.create_block_mask(document, 2, None, 8, 8, 2)
    assert ops.convert_to_numpy(block_mask.kinds).shape == (2, 1, 4, 4)
    q, k, v = rand(2, 8, 2, 4), rand(2, 8, 1, 4), rand(2, 8, 1, 4)

    def loss(q, k, v, **kwargs):
        out = ka_ops.flex_attention(q, k, v, mask_mod=document, **kwargs)
        return ops.sum(ops.square(out))

    dense = gradients(lambda *t: loss(*t, chunk_size=0), [q, k, v])[1]
    blocks = gradients(lambda *t: loss(*t, block_mask=block_mask), [q, k, v])
    for want, got in zip(dense, blocks[1], strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_automatic_choice_is_dense_for_short_sequences(rand):
    q = rand(1, 3, 1, 2)
    out, w = ka_ops.flex_attention(q, q, q, return_attention_scores=True)
    assert tuple(w.shape) == (1, 1, 3, 3)
    assert tuple(out.shape) == (1, 3, 1, 2)


def test_a_shifted_band_with_a_negative_side_runs_on_every_path(rand):
    # Queries read 3 positions back: `limits == (None, -3)`, a band all the
    # same (the planner takes its limits as they are).
    early = mods.shifted(mods.causal(), query_offset=-3)
    assert early.limits == (None, -3)
    q = rand(1, 8, 2, 4)
    outs = [
        ops.convert_to_numpy(
            ka_ops.flex_attention(q, q, q, mask_mod=early, chunk_size=chunk)
        )
        for chunk in (None, 0, 4)
    ]
    for out in outs[1:]:
        np.testing.assert_allclose(out, outs[0], atol=1e-5)
    # The first three queries keep no key: zeros.
    np.testing.assert_array_equal(outs[0][:, :3], 0.0)


def test_a_causal_window_of_256_keys_runs_in_blocks_of_256():
    # Planned only: the tensors' values are not read.
    q = np.zeros((1, 4096, 2, 4), "float32")
    if keras.backend.backend() == "torch":
        import torch

        q = torch.zeros(q.shape, requires_grad=True)  # training
    window = ka_ops.and_masks(mods.causal(), mods.sliding_window(256))
    explained = ka_ops.explain_attention(q, q, q, mask_mod=window)
    assert explained.path == "blocks"
    assert explained.block_size == (256, 256)
    # The share of the pairs its blocks keep is the window's (31 of 256),
    # not an unknown mod's.
    want = ka_ops.plan.band_share((255, 0), (4096, 4096), (256, 256))
    assert explained.kept == pytest.approx(want) == 31 / 256
    wider = ka_ops.and_masks(mods.causal(), mods.sliding_window(257))
    assert ka_ops.explain_attention(q, q, q, mask_mod=wider).block_size == (
        512,
        512,
    )


@pytest.mark.tensorflow_lane
def test_half_precision_computes_in_float32(rand):
    """Other lanes: the casts are `keras.ops.cast`, the same code; the
    kernel itself is checked by the tests above."""
    q = ops.cast(rand(1, 5, 2, 4), "float16")
    out = ka_ops.flex_attention(q, q, q, mask_mod=mods.causal(), chunk_size=2)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    want = ka_ops.flex_attention(
        ops.cast(q, "float32"),
        ops.cast(q, "float32"),
        ops.cast(q, "float32"),
        mask_mod=mods.causal(),
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(out).astype("float32"),
        ops.convert_to_numpy(want),
        atol=2e-3,
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"query": np.zeros((2, 3, 4))}, "Expected `query` of rank 4"),
        ({"key": np.zeros((1, 3, 3, 2))}, "multiple of the key heads"),
        ({"chunk_size": -1}, "chunk_size=-1"),
        ({"chunk_size": True}, "chunk_size=True"),
        (
            {"chunk_size": 2, "return_attention_scores": True},
            "never hold the attention weights",
        ),
        ({"score_mod": 3}, "score_mod=3"),
        (
            {"score_mod": lambda score, batch: score},
            r"`score_mod` to take 5 .*signature \(score, batch\)",
        ),
        (
            {"mask_mod": lambda q_idx, kv_idx: q_idx >= kv_idx},
            r"`mask_mod` to take 4 .*mask_mod\(batch, head, q_idx, kv_idx\)",
        ),
        ({"block_mask": "causal"}, "block_mask='causal'"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, match):
    inputs = {
        "query": np.zeros((1, 3, 4, 2), "float32"),
        "key": np.zeros((1, 3, 2, 2), "float32"),
        "value": np.zeros((1, 3, 2, 2), "float32"),
    }
    inputs.update(kwargs)
    if "key" in kwargs:
        inputs["value"] = inputs["key"]
    error = (
        TypeError
        if "mod" in str(kwargs) or "block_mask" in kwargs
        else (ValueError)
    )
    with pytest.raises(error, match=match):
        ka_ops.flex_attention(**inputs)


def test_block_mask_errors():
    block_mask = ka_ops.create_block_mask(mods.causal(), None, None, 4, 4, 2)
    q = np.zeros((1, 6, 1, 2), "float32")
    with pytest.raises(ValueError, match="made for the query and key"):
        ka_ops.flex_attention(q, q, q, block_mask=block_mask)
    q = np.zeros((1, 4, 1, 2), "float32")
    with pytest.raises(ValueError, match="match the block size"):
        ka_ops.flex_attention(q, q, q, block_mask=block_mask, chunk_size=3)


@pytest.mark.skipif(BACKEND != "torch", reason="PyTorch's FlexAttention")
def test_outputs_equal_torch_flex_attention(rand):
    """Every mod against `torch.nn.attention.flex_attention` (its forward
    runs on CPU), with the mods written again in PyTorch."""
    import torch
    from torch.nn.attention import flex_attention as torch_flex

    q, k, v = rand(2, 8, 4, 4), rand(2, 8, 2, 4), rand(2, 8, 2, 4)
    segments = np.array([[0, 0, 0, 1, 1, 1, 1, 2], [0, 0, 1, 1, 1, 1, 1, 1]])
    lengths = np.array([5, 8])
    table, tensor = rand(8, 4), rand(1, 4, 8, 8)
    seg_t, len_t = torch.tensor(segments), torch.tensor(lengths)
    table_t, tensor_t = torch.tensor(table), torch.tensor(tensor)
    slopes = torch.tensor(mods.alibi_slopes(4))
    buckets = torch.tensor(
        ops.convert_to_numpy(
            mods.relative_position_buckets(
                np.arange(8)[None] - np.arange(8)[:, None], 8, 16, True
            )
        )
    )
    torch_mods = {
        "causal": (None, lambda b, h, i, j: i >= j),
        "window": (None, lambda b, h, i, j: (i >= j) & ((i - j).abs() < 3)),
        "prefix": (
            lambda s, b, h, i, j: 2.0 * torch.tanh(s / 2.0),
            lambda b, h, i, j: (j < 3) | (i >= j),
        ),
        "document": (
            lambda s, b, h, i, j: s - slopes[h] * (i - j).abs(),
            lambda b, h, i, j: seg_t[b, i] == seg_t[b, j],
        ),
        "padding": (None, lambda b, h, i, j: j < len_t[b]),
        "t5": (lambda s, b, h, i, j: s + table_t[buckets[i, j], h], None),
        "bias": (lambda s, b, h, i, j: s + tensor_t[0, h, i, j], None),
    }
    ours = _mod_cases(table, tensor, segments, lengths)
    ours["bias"] = (mods.bias(tensor), None)
    qt, kt, vt = (torch.tensor(x).transpose(1, 2) for x in (q, k, v))
    for name, (score_t, mask_t) in torch_mods.items():
        block_mask = None
        if mask_t is not None:
            block_mask = torch_flex.create_block_mask(
                mask_t, 2, None, 8, 8, device="cpu", BLOCK_SIZE=8
            )
        want = torch_flex.flex_attention(
            qt,
            kt,
            vt,
            score_mod=score_t,
            block_mask=block_mask,
            enable_gqa=True,
        ).transpose(1, 2)
        score_mod, mask_mod = ours[name]
        for chunk_size in (0, 3):
            got = ka_ops.flex_attention(
                q,
                k,
                v,
                score_mod=score_mod,
                mask_mod=mask_mod,
                chunk_size=chunk_size,
            )
            np.testing.assert_allclose(
                ops.convert_to_numpy(got),
                want.numpy(),
                atol=1e-5,
                err_msg=name,
            )


@pytest.mark.tensorflow_lane
def test_the_python_blocks_of_docs_flex_md_run():
    """Other lanes: the tests above run the same calls on every backend."""
    import os
    import re

    path = os.path.join(
        os.path.dirname(__file__), "..", "..", "docs", "flex.md"
    )
    with open(path, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) >= 3
    namespace = {}
    for block in blocks:
        exec(compile(block, "docs/flex.md", "exec"), namespace)
    assert tuple(namespace["z"].shape) == (1, 128, 64)
