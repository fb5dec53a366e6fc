"""ops/attend.py: masked_softmax, attention and the Frobenius penalty,
against hand cases and NumPy."""

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from keras import ops

from keras_attention import ops as ka_ops
from tests.autodiff import gradients
from tests.layer_basics import np_softmax
from tests.profiles import examples


def test_masked_softmax_without_mask_is_softmax(rng):
    x = rng.normal(size=(2, 3, 5)).astype("float32")
    got = ops.convert_to_numpy(ka_ops.masked_softmax(x))
    np.testing.assert_allclose(got, np_softmax(x), rtol=1e-6, atol=1e-7)


def test_masked_softmax_hand_computed():
    logits = np.array([[0.0, np.log(3.0), 5.0]], "float32")
    mask = np.array([[True, True, False]])
    got = ops.convert_to_numpy(ka_ops.masked_softmax(logits, mask))
    np.testing.assert_allclose(got, [[0.25, 0.75, 0.0]], rtol=1e-6)


def test_masked_softmax_over_a_middle_axis_with_a_shorter_mask(rng):
    """A mask that broadcasts from the right, normalised over `axis=1`:
    keys masked by their last-axis position, a slice of masked keys all
    zero."""
    logits = rng.normal(size=(2, 4, 3)).astype("float32")
    mask = np.array([True, False, True])  # broadcasts as (1, 1, 3)
    got = ops.convert_to_numpy(ka_ops.masked_softmax(logits, mask, axis=1))
    expected = np_softmax(logits.transpose(0, 2, 1)).transpose(0, 2, 1)
    expected[..., 1] = 0.0
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


def test_fully_masked_row_gives_zero_weights_and_finite_gradient():
    logits = np.ones((2, 4), "float32")
    mask = np.array([[False] * 4, [True, False, True, False]])
    w = ops.convert_to_numpy(ka_ops.masked_softmax(logits, mask))
    _, (grad,) = gradients(
        lambda x: ops.sum(
            ops.multiply(
                ka_ops.masked_softmax(x, mask), ops.arange(4, dtype="float32")
            )
        ),
        [logits],
    )
    np.testing.assert_array_equal(w[0], np.zeros(4))
    np.testing.assert_allclose(w[1], [0.5, 0, 0.5, 0])
    assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(grad[0], np.zeros(4))


def test_float16_large_logits_are_exact_and_finite():
    # Every value is exactly representable in float16.
    values = [[60000.0, 59968.0, -60000.0], [1000.0, 999.0, -65504.0]]
    logits = np.array(values, "float16")
    w = ka_ops.masked_softmax(logits, np.ones((2, 3), bool))
    assert keras.backend.standardize_dtype(w.dtype) == "float16"
    w = ops.convert_to_numpy(w).astype("float32")
    assert np.all(np.isfinite(w))
    expected = np_softmax(np.array(values))
    np.testing.assert_allclose(w, expected, atol=1e-3)


@examples(30)
@given(
    batch=st.integers(1, 3),
    length=st.integers(1, 7),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from(["float32", "float16"]),
)
def test_weights_sum_to_one_over_unmasked_keys(batch, length, seed, dtype):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(batch, 4, length)) * 20).astype(dtype)
    mask = rng.random((batch, 4, length)) < 0.6
    w = ops.convert_to_numpy(ka_ops.masked_softmax(logits, mask))
    w = w.astype("float32")
    assert np.all(np.isfinite(w))
    assert np.all(w[~mask] == 0)
    sums = w.sum(-1)
    has_key = mask.any(-1)
    np.testing.assert_allclose(sums[has_key], 1.0, atol=2e-3)
    np.testing.assert_array_equal(sums[~has_key], 0.0)


def test_attention_matches_numpy_reference(rng):
    q = rng.normal(size=(2, 3, 4)).astype("float32")
    k = rng.normal(size=(2, 5, 4)).astype("float32")
    v = rng.normal(size=(2, 5, 6)).astype("float32")
    mask = rng.random((2, 1, 5)) < 0.7
    mask[..., 0] = True
    context, weights = ka_ops.attention(q, k, v, mask=mask)
    logits = q @ k.transpose(0, 2, 1) / np.sqrt(4)
    logits = np.where(mask, logits, -np.inf)
    want_w = np_softmax(logits)
    np.testing.assert_allclose(
        ops.convert_to_numpy(weights), want_w, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(context), want_w @ v, rtol=1e-5, atol=1e-5
    )


def test_attention_with_custom_score_and_dropout_fn():
    q = np.ones((1, 1, 2), "float32")
    k = np.array([[[1.0, 0.0], [0.0, 0.0]]], "float32")
    v = np.array([[[2.0], [4.0]]], "float32")
    context, weights = ka_ops.attention(
        q, k, v, score_fn=ka_ops.dot_product, dropout_fn=lambda w: w * 0
    )
    e = np.exp([1.0, 0.0])
    np.testing.assert_allclose(ops.convert_to_numpy(weights)[0, 0], e / e.sum())
    np.testing.assert_array_equal(ops.convert_to_numpy(context), [[[0.0]]])


def test_frobenius_penalty_matches_numpy(rng):
    a = np_softmax(rng.normal(size=(3, 4, 6))).astype("float32")
    eye = np.eye(4)
    want = np.mean([np.sum((x @ x.T - eye) ** 2) for x in a.astype("float64")])
    got = float(ops.convert_to_numpy(ka_ops.frobenius_penalty(a)))
    assert got == pytest.approx(want, rel=1e-5)


def test_frobenius_penalty_is_zero_for_disjoint_one_hot_hops():
    a = np.zeros((1, 3, 5), "float32")
    a[0, 0, 0] = a[0, 1, 2] = a[0, 2, 4] = 1.0
    assert float(ops.convert_to_numpy(ka_ops.frobenius_penalty(a))) == 0.0


def test_the_fused_kernels_lse_and_its_gradient(rng):
    """`dot_product_attention(..., return_lse=True)` on grouped heads: the
    log-sum-exp of the scaled, masked logits (`-inf` for a row with no
    kept key), and its gradient joining the output's as autodiff of the
    dense formula gives it."""
    q = rng.normal(size=(2, 5, 4, 3)).astype("float32")
    k = rng.normal(size=(2, 6, 2, 3)).astype("float32")
    v = rng.normal(size=(2, 6, 2, 2)).astype("float32")
    mask = rng.random((2, 4, 5, 6)) < 0.7
    mask[1, :, 2] = False  # a row with no kept key
    out, lse = ka_ops.dot_product_attention(q, k, v, mask, 0.5, return_lse=True)
    logits = np.einsum("bqhd,bkhd->bhqk", q, np.repeat(k, 2, 2)) * 0.5
    with np.errstate(divide="ignore"):
        want = np.log(np.where(mask, np.exp(logits), 0).sum(-1))
    got = ops.convert_to_numpy(lse)
    assert np.all(np.isneginf(got[1, :, 2]))
    np.testing.assert_allclose(got, want, atol=1e-5)

    def fused(a, b, c):
        out, lse = ka_ops.dot_product_attention(
            a, b, c, mask[:1], 0.5, return_lse=True
        )
        return ops.sum(out) + ops.sum(ops.sin(lse))

    def dense(a, b, c):
        logits = ops.einsum("bqhd,bkhd->bhqk", a, ops.repeat(b, 2, 2)) * 0.5
        masked = ops.where(mask[:1], logits, -1e30)
        weights = ops.softmax(masked, axis=-1)
        out = ops.einsum("bhqk,bkhd->bqhd", weights, ops.repeat(c, 2, 2))
        return ops.sum(out) + ops.sum(ops.sin(ops.logsumexp(masked, -1)))

    inputs = [q[:1], k[:1], v[:1]]
    _, got = gradients(fused, inputs)
    _, want = gradients(dense, inputs)
    for name, g, w in zip("qkv", got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=2e-5, err_msg=name)


@pytest.mark.parametrize("q_len, heads, kv_heads", [(1, 6, 3), (2, 4, 2)])
def test_a_decoding_steps_few_query_rows_read_each_heads_own_keys(
    rng, q_len, heads, kv_heads
):
    """A query of at most `FEW_ROWS` rows per key/value head (a decoding
    step) is contracted with every head of each key slot, each query head
    keeping its own key and value head's products: the same output, lse
    and gradients as the dense formula with the heads repeated."""
    groups = heads // kv_heads
    q = rng.normal(size=(2, q_len, heads, 3)).astype("float32")
    k = rng.normal(size=(2, 7, kv_heads, 3)).astype("float32")
    v = rng.normal(size=(2, 7, kv_heads, 2)).astype("float32")
    mask = rng.random((2, 1, q_len, 7)) < 0.7
    mask[..., 0] = True
    out, lse = ka_ops.dot_product_attention(q, k, v, mask, 0.5, return_lse=True)
    logits = np.einsum("bqhd,bkhd->bhqk", q, np.repeat(k, groups, 2)) * 0.5
    logits = np.where(mask, logits, -np.inf)
    weights = np_softmax(logits)
    want = np.einsum("bhqk,bkhd->bqhd", weights, np.repeat(v, groups, 2))
    np.testing.assert_allclose(ops.convert_to_numpy(out), want, atol=1e-5)
    want_lse = np.log(np.exp(logits).sum(-1))
    np.testing.assert_allclose(ops.convert_to_numpy(lse), want_lse, atol=1e-5)

    def fused(a, b, c):
        out, lse = ka_ops.dot_product_attention(
            a, b, c, mask, 0.5, return_lse=True
        )
        return ops.sum(out**2) + ops.sum(ops.sin(lse))

    def dense(a, b, c):
        logits = ops.einsum("bqhd,bkhd->bhqk", a, ops.repeat(b, groups, 2))
        masked = ops.where(mask, logits * 0.5, -1e30)
        weights = ops.softmax(masked, axis=-1)
        out = ops.einsum("bhqk,bkhd->bqhd", weights, ops.repeat(c, groups, 2))
        return ops.sum(out**2) + ops.sum(ops.sin(ops.logsumexp(masked, -1)))

    _, got = gradients(fused, [q, k, v])
    _, want = gradients(dense, [q, k, v])
    for name, g, w in zip("qkv", got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=2e-5, err_msg=name)
