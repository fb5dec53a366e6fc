"""The dot-product family (`scores/dot_product.py`): NumPy references, Keras.

Moved from `tests/test_scores.py` with `scores.py` -> `scores/`.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import scores
from tests.scores._reference import K4
from tests.scores._reference import K6
from tests.scores._reference import Q
from tests.scores._reference import logits
from tests.scores._reference import ref_pairwise


def test_dot_score_matches_formula_and_hand_value():
    s = scores.DotScore()
    np.testing.assert_allclose(
        logits(s, Q, K4), ref_pairwise(Q, K4, np.dot), rtol=1e-5
    )
    q = np.array([[[1.0, 2.0]]], "float32")
    k = np.array([[[3.0, 4.0], [-1.0, 0.5]]], "float32")
    np.testing.assert_allclose(logits(s, q, k), [[[11.0, 0.0]]])


def test_dot_score_matches_keras_attention_layer(rng):
    v = rng.normal(size=(2, 5, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    from keras_attention import Attention

    ours, w = Attention(score="dot")(
        Q, v, key=K4, value_mask=mask, return_attention_scores=True
    )
    theirs, tw = keras.layers.Attention()(
        [Q, v, K4], mask=[None, mask], return_attention_scores=True
    )
    np.testing.assert_allclose(ops.convert_to_numpy(w), tw, atol=1e-6)
    np.testing.assert_allclose(ops.convert_to_numpy(ours), theirs, atol=1e-5)


def test_scaled_dot_score_matches_formula():
    got = logits(scores.ScaledDotScore(), Q, K4)
    want = ref_pairwise(Q, K4, lambda q, k: q @ k / np.sqrt(4))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_cosine_score_matches_formula_and_zero_vector_scores_zero():
    got = logits(scores.CosineScore(), Q, K4)
    want = ref_pairwise(
        Q, K4, lambda q, k: q @ k / (np.linalg.norm(q) * np.linalg.norm(k))
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    zero = np.zeros((1, 1, 4), "float32")
    assert np.all(logits(scores.CosineScore(), zero, K4[:1]) == 0)


def test_bilinear_score_matches_formula():
    s = scores.BilinearScore()
    got = logits(s, Q, K6)
    w = s.kernel.numpy()
    assert w.shape == (4, 6) and s.kernel.path.endswith("kernel")
    want = ref_pairwise(Q, K6, lambda q, k: q @ w @ k)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_dot_with_mismatched_depths_names_both_shapes():
    with pytest.raises(ValueError, match=r"query.shape=\(2, 3, 4\), key.shape"):
        scores.DotScore()(Q, K6)
