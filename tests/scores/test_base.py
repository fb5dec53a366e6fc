"""What every score does (`scores/base.py`): heads, basics, dtypes, errors.

Moved from `tests/test_scores.py` with `scores.py` -> `scores/`.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import scores
from tests.layer_basics import check_layer_basics
from tests.scores._reference import K4
from tests.scores._reference import K6
from tests.scores._reference import Q
from tests.scores._reference import logits


def test_scores_carry_leading_axes_for_heads(rng):
    q = rng.normal(size=(2, 3, 4, 8)).astype("float32")
    k = rng.normal(size=(2, 3, 6, 8)).astype("float32")
    for name in ["dot", "scaled_dot", "cosine", "bilinear", "additive"]:
        s = scores.get(name)
        assert tuple(s(q, k).shape) == (2, 3, 4, 6), name
    s = scores.AdditiveScore(units=3)
    got = logits(s, q, k)
    for h in range(3):
        np.testing.assert_allclose(
            got[:, h], logits(s, q[:, h], k[:, h]), rtol=1e-5, atol=1e-6
        )


@pytest.mark.parametrize(
    "score, n_weights",
    [
        (scores.DotScore, 0),
        (scores.CosineScore, 0),
        (scores.BilinearScore, 1),
        (scores.AdditiveScore, 3),
        (scores.ConcatScore, 2),
    ],
)
def test_score_layer_basics(score, n_weights):
    k = K4 if n_weights == 0 else K6
    check_layer_basics(
        score,
        {},
        [Q, k],
        expected_output_shape=(2, 3, 5),
        expected_num_trainable_weights=n_weights,
        run_mixed_precision=False,
    )


@pytest.mark.parametrize(
    "name", ["dot", "scaled_dot", "cosine", "bilinear", "additive", "concat"]
)
def test_logits_are_float32_and_finite_under_mixed_precision(name):
    keras.config.set_dtype_policy("mixed_float16")
    s = scores.get(name)
    # Dot products of these inputs (~1e6) overflow float16.
    q = np.full((1, 2, 64), 150.0, "float16")
    k = np.full((1, 3, 64), 150.0, "float16")
    out = s(q, k)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    assert np.all(np.isfinite(ops.convert_to_numpy(out)))


def test_rank_one_inputs_raise():
    with pytest.raises(ValueError, match="expects `query` of shape"):
        scores.DotScore()(np.ones((4,), "float32"), np.ones((4,), "float32"))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: scores.AdditiveScore(units=0), "units=0"),
        (lambda: scores.ConcatScore(units=2.5), "units=2.5"),
        (lambda: scores.LocationScore(max_length=-1), "max_length=-1"),
        (lambda: scores.LocationScore(max_length=True), "max_length=True"),
        (lambda: scores.CosineScore(epsilon=0), "epsilon=0"),
    ],
)
def test_bad_constructor_arguments_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_parametric_score_with_unknown_depth_raises():
    s = scores.BilinearScore()
    with pytest.raises(ValueError, match="needs the last axis"):
        s.build((None, 3, None), (None, 5, 4))


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "score_class, dot_product, additive, key_projection",
    [
        (scores.DotScore, True, False, False),
        (scores.ScaledDotScore, True, False, False),
        (scores.CosineScore, True, False, False),
        (scores.BilinearScore, True, False, False),
        (scores.AdditiveScore, False, True, True),
        (scores.ConcatScore, False, True, True),
        (scores.NormalizedAdditiveScore, False, False, True),
        (scores.LocationScore, False, False, False),
    ],
)
def test_each_score_declares_its_forms(
    score_class, dot_product, additive, key_projection
):
    assert score_class.has_dot_product_form is dot_product
    assert score_class.has_additive_form is additive
    assert score_class.has_key_projection is key_projection
    # The kernels' name of the form, set with the class from the above.
    form = "dot" if dot_product else "additive" if additive else None
    assert score_class.form == form


@pytest.mark.backend_independent
def test_a_subclass_form_follows_what_it_declares():
    class Plain(scores.Score):
        def _logits(self, query, key):
            return keras.ops.matmul(query, keras.ops.swapaxes(key, -1, -2))

    class Halved(scores.Score):
        has_dot_product_form = True

        def dot_product_form(self, query, key):
            return query, key, 0.5

    class Undeclared(scores.ScaledDotScore):
        has_dot_product_form = False

    assert (Plain.form, Halved.form, Undeclared.form) == (None, "dot", None)
    q = np.ones((1, 2, 4), "float32")
    logits = keras.ops.convert_to_numpy(Halved()(q, q))
    np.testing.assert_allclose(logits, np.full((1, 2, 2), 2.0))


@pytest.mark.backend_independent
def test_a_subclass_that_writes_its_logits_loses_the_inherited_forms():
    class Doubled(scores.ConcatScore):
        def _logits(self, query, key):
            return 2.0 * super()._logits(query, key)

    class Declared(scores.ConcatScore):
        has_key_projection = True

        def _logits(self, query, key):
            return super()._logits(query, key)

    assert not Doubled.has_additive_form and not Doubled.has_key_projection
    assert not Doubled().can_chunk
    assert Declared.has_key_projection and not Declared.has_additive_form
    assert scores.ConcatScore.has_additive_form


@pytest.mark.backend_independent
def test_the_hooks_of_before_are_refused_not_ignored():
    for old in ("_dot_product_form", "_additive_form"):
        with pytest.raises(TypeError, match=f"defines `{old}`"):
            type("Old", (scores.ScaledDotScore,), {old: lambda s, q, k: None})
