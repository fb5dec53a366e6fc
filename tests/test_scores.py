import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import scores
from tests.layer_basics import check_layer_basics
from tests.layer_basics import normal_arrays

Q, K4, K6 = normal_arrays(0, (2, 3, 4), (2, 5, 4), (2, 5, 6))


def logits(score, q, k):
    return ops.convert_to_numpy(score(q, k))


# NumPy references written from the seed formulas, one key at a time.
def ref_pairwise(q, k, fn):
    out = np.zeros(q.shape[:-1] + (k.shape[-2],))
    for b in range(q.shape[0]):
        for i in range(q.shape[1]):
            for j in range(k.shape[1]):
                out[b, i, j] = fn(q[b, i].astype("float64"), k[b, j])
    return out


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


def test_location_score_ignores_keys():
    s = scores.LocationScore(max_length=8)
    got = logits(s, Q, K6)
    w = s.kernel.numpy()
    assert w.shape == (4, 8)
    np.testing.assert_allclose(got, (Q @ w)[..., :5], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logits(s, Q, K6 * 0), got)


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


def test_location_score_basics():
    check_layer_basics(
        scores.LocationScore,
        {"max_length": 6},
        [Q, K6],
        expected_output_shape=(2, 3, 5),
        expected_num_trainable_weights=1,
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


def test_get_accepts_names_aliases_configs_and_instances():
    assert isinstance(scores.get("general"), scores.BilinearScore)
    assert isinstance(scores.get("Bahdanau"), scores.AdditiveScore)
    s = scores.AdditiveScore(units=3, use_bias=True)
    assert scores.get(s) is s
    clone = scores.get(scores.serialize(s))
    assert isinstance(clone, scores.AdditiveScore)
    assert clone.units == 3 and clone.use_bias
    loc = scores.get(scores.serialize(scores.LocationScore(max_length=4)))
    assert loc.max_length == 4


def test_get_location_by_name_says_max_length_is_needed():
    with pytest.raises(ValueError, match="needs `max_length`"):
        scores.get("location")


@pytest.mark.parametrize("bad", ["nope", 3, None])
def test_get_unknown_identifier_raises(bad):
    with pytest.raises(ValueError, match="Could not interpret score"):
        scores.get(bad)


def test_get_config_of_other_layer_raises():
    config = keras.saving.serialize_keras_object(keras.layers.Dense(2))
    with pytest.raises(ValueError, match="config of a keras_attention score"):
        scores.get(config)


def test_dot_with_mismatched_depths_names_both_shapes():
    with pytest.raises(ValueError, match=r"query.shape=\(2, 3, 4\), key.shape"):
        scores.DotScore()(Q, K6)


def test_location_with_too_many_keys_raises():
    with pytest.raises(ValueError, match="cannot score 5 key positions"):
        scores.LocationScore(max_length=4)(Q, K6)
    s = scores.LocationScore(max_length=5)
    s(Q, K6)
    longer = np.zeros((2, 9, 6), "float32")
    with pytest.raises(ValueError, match="cannot score 9 key positions"):
        s(Q, longer)


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
