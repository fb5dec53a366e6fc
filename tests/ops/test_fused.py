"""ops/_fused.py: the fused kernels of `dot_product_attention`, their
log-sum-exp and gradients against the dense formula, and a decoding
step's contraction of the cache as stored."""

import numpy as np
import pytest
from keras import ops

from keras_attention import ops as ka_ops
from tests.autodiff import assert_same_gradients
from tests.layer_basics import np_softmax


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
    assert_same_gradients(fused, dense, inputs)


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

    assert_same_gradients(fused, dense, [q, k, v])
