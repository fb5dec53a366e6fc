"""The additive family (`scores/additive.py`): formulas, keys projected once.

Moved from `tests/test_scores.py` with `scores.py` -> `scores/`.
"""

import numpy as np
import pytest
from keras import ops

from keras_attention import scores
from tests.scores._reference import K6
from tests.scores._reference import Q
from tests.scores._reference import logits
from tests.scores._reference import ref_pairwise


@pytest.mark.parametrize("use_bias", [False, True])
def test_additive_score_matches_formula(use_bias):
    s = scores.AdditiveScore(
        units=7, use_bias=use_bias, bias_initializer="random_normal"
    )
    got = logits(s, Q, K6)
    wq, wk, v = s.query_kernel.numpy(), s.key_kernel.numpy(), s.v.numpy()
    assert (wq.shape, wk.shape, v.shape) == ((4, 7), (6, 7), (7,))
    bias = s.bias.numpy() if use_bias else 0.0
    want = ref_pairwise(Q, K6, lambda q, k: v @ np.tanh(q @ wq + k @ wk + bias))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert len(s.weights) == (4 if use_bias else 3)


def test_additive_units_default_to_key_depth():
    s = scores.AdditiveScore()
    s(Q, K6)
    assert tuple(s.query_kernel.shape) == (4, 6)


def test_concat_score_matches_formula():
    s = scores.ConcatScore(units=5)
    got = logits(s, Q, K6)
    w, v = s.kernel.numpy(), s.v.numpy()
    assert w.shape == (10, 5)
    want = ref_pairwise(
        Q, K6, lambda q, k: v @ np.tanh(np.concatenate([q, k]) @ w)
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _key_kernel(s):
    if isinstance(s, scores.ConcatScore):
        return ops.convert_to_numpy(s.kernel)[4:]
    if isinstance(s, scores.AdditiveScore):
        return ops.convert_to_numpy(s.key_kernel)
    return np.eye(6, dtype="float32")  # no key projection


@pytest.mark.parametrize(
    "make, projects",
    [
        (lambda: scores.AdditiveScore(6, True, "random_normal"), True),
        (lambda: scores.ConcatScore(units=6), True),
        (scores.BilinearScore, False),
        (lambda: scores.LocationScore(max_length=8), False),
    ],
)
def test_keys_projected_once_give_the_same_logits(make, projects):
    # units == key depth: a projection applied twice would still run.
    s = make()
    want = logits(s, Q, K6)
    keys = s.project_keys(K6)
    assert s.projects_keys is projects
    np.testing.assert_allclose(
        ops.convert_to_numpy(keys), K6 @ _key_kernel(s), rtol=1e-5, atol=1e-6
    )
    got = ops.convert_to_numpy(s.score_projected(Q, keys))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_keys_of_a_subclass_that_changes_the_logits_are_not_shared():
    class Doubled(scores.AdditiveScore):
        def _logits(self, query, key):
            return 2.0 * super()._logits(query, key)

    assert scores.AdditiveScore().projects_keys
    assert not Doubled().projects_keys


def test_project_keys_of_an_unbuilt_score_raises():
    with pytest.raises(ValueError, match=r"needs a built score.*\(2, 5, 6\)"):
        scores.AdditiveScore().project_keys(ops.convert_to_tensor(K6))


def test_normalized_additive_score_matches_formula():
    s = scores.NormalizedAdditiveScore(units=3, kernel_initializer="ones")
    s(Q, K6)
    s.v.assign(np.array([1.0, -2.0, 2.0], "float32"))
    s.g.assign(1.5)
    s.bias.assign(np.array([0.1, 0.2, -0.3], "float32"))
    wq, wk, b = (
        ops.convert_to_numpy(w) for w in (s.query_kernel, s.key_kernel, s.bias)
    )
    # g v / ‖v‖ with ‖v‖ = 3.
    w = 1.5 * np.array([1.0, -2.0, 2.0]) / 3.0
    want = ref_pairwise(Q, K6, lambda q, k: w @ np.tanh(q @ wq + k @ wk + b))
    np.testing.assert_allclose(logits(s, Q, K6), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda: scores.AdditiveScore(units=3, use_bias=True),
        lambda: scores.ConcatScore(units=3),
        lambda: scores.NormalizedAdditiveScore(units=3),
    ],
)
def test_additive_family_shares_one_base_and_its_two_paths_agree(make):
    s = make()
    assert isinstance(s, scores.BaseAdditiveScore)
    want = logits(s, Q, K6)
    q, k, v = s.additive_form(Q, K6)
    hidden = np.tanh(
        ops.convert_to_numpy(q)[:, :, None] + ops.convert_to_numpy(k)[:, None]
    )
    np.testing.assert_allclose(
        hidden @ ops.convert_to_numpy(v), want, rtol=1e-5, atol=1e-6
    )
