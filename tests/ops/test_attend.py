"""ops/attend.py: attention and the Frobenius penalty, against hand cases
and NumPy."""

import numpy as np
import pytest
from keras import ops

from keras_attention import ops as ka_ops
from tests.layer_basics import np_softmax


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
