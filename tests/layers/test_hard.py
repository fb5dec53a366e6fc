import keras
import numpy as np
import pytest
from keras import ops

import keras_attention
from tests.autodiff import gradients
from tests.layer_basics import check_layer_basics
from tests.layer_basics import to_np


@pytest.mark.parametrize("mode", ["argmax", "sample"])
@pytest.mark.parametrize("estimator", ["straight_through", "reinforce"])
def test_basics(mode, estimator, rand):
    check_layer_basics(
        keras_attention.HardAttention,
        {"score": "bilinear", "mode": mode, "estimator": estimator, "seed": 1},
        [rand(2, 3, 4), rand(2, 5, 6)],
        {"return_attention_scores": True, "return_log_prob": True},
        expected_output_shape=[(2, 3, 6), (2, 3, 5), (2, 3)],
        expected_num_trainable_weights=1,
        # The REINFORCE estimator passes no gradient to the score through
        # the output, so a plain fit step leaves its kernel unchanged.
        run_training=estimator == "straight_through",
    )


def test_argmax_selects_the_highest_scoring_value():
    q = np.array([[0.0, 1.0]], "float32")
    v = np.array([[[1.0, 0.0], [0.0, 2.0], [0.0, 1.0]]], "float32")
    out, w, log_p = keras_attention.HardAttention()(
        q, v, return_attention_scores=True, return_log_prob=True
    )
    np.testing.assert_array_equal(to_np(out), [[0.0, 2.0]])
    np.testing.assert_array_equal(to_np(w), [[0.0, 1.0, 0.0]])
    logits = np.array([0.0, 2.0, 1.0])
    want = logits[1] - np.log(np.exp(logits).sum())
    np.testing.assert_allclose(to_np(log_p), [want], rtol=1e-6)


def test_output_is_exactly_a_value_vector_with_straight_through(rand):
    q, v = rand(4, 3, 8), rand(4, 6, 8)
    out, w = keras_attention.HardAttention(temperature=0.3)(
        q, v, return_attention_scores=True, training=True
    )
    w = to_np(w)
    assert set(np.unique(w)) <= {0.0, 1.0}
    np.testing.assert_array_equal(w.sum(-1), 1.0)
    np.testing.assert_array_equal(to_np(out), np.einsum("bqt,btd->bqd", w, v))


def test_masked_keys_are_never_selected_and_empty_rows_select_nothing():
    q = np.ones((2, 1, 2), "float32")
    v = np.array([[[9.0, 9.0], [1.0, 0.0], [0.0, 1.0]]] * 2, "float32")
    mask = np.array([[False, True, True], [False, False, False]])
    for mode in ["argmax", "sample"]:
        layer = keras_attention.HardAttention(mode=mode, seed=0)
        out, w, log_p = layer(
            q,
            v,
            value_mask=mask,
            return_attention_scores=True,
            return_log_prob=True,
            training=True,
        )
        w = to_np(w)
        assert w[0, 0, 0] == 0 and w[0, 0].sum() == 1
        assert np.all(w[1] == 0) and np.all(to_np(out)[1] == 0)
        assert to_np(log_p)[1, 0] == 0
        assert np.all(np.isfinite(to_np(log_p)))


def test_sampling_follows_the_attention_distribution():
    logits = np.log(np.array([0.6, 0.3, 0.1]))
    # dot score with q = e_0 and keys whose first coordinate is the logit.
    n = 4000
    q = np.tile(np.array([[1.0, 0.0]], "float32"), (n, 1))
    k = np.tile(
        np.stack([logits, np.zeros(3)], -1)[None].astype("float32"), (n, 1, 1)
    )
    v = np.tile(np.eye(3, dtype="float32")[None], (n, 1, 1))
    layer = keras_attention.HardAttention(mode="sample", seed=7)
    counts = to_np(layer(q, v, key=k, training=True)).mean(0)
    np.testing.assert_allclose(counts, [0.6, 0.3, 0.1], atol=0.03)
    # At inference, sample mode takes the argmax.
    inference = to_np(layer(q[:5], v[:5], key=k[:5], training=False))
    np.testing.assert_array_equal(inference, np.tile([1.0, 0, 0], (5, 1)))


def test_sampling_is_reproducible_for_a_seed(rand):
    q, v = rand(8, 3, 4), rand(8, 6, 4)
    a = keras_attention.HardAttention(mode="sample", seed=5)
    b = keras_attention.HardAttention(mode="sample", seed=5)
    np.testing.assert_array_equal(
        to_np(a(q, v, training=True)), to_np(b(q, v, training=True))
    )


def test_straight_through_passes_gradient_to_the_score(rand):
    layer = keras_attention.HardAttention(score="bilinear")
    q, v = rand(4, 2, 4), rand(4, 5, 4)
    layer(q, v)
    _, (grad,) = gradients(
        lambda _: ops.sum(layer(q, v, training=True) ** 2),
        [layer.score.kernel],
    )
    assert np.abs(grad).sum() > 0


def test_reinforce_passes_gradient_only_through_log_prob(rand):
    layer = keras_attention.HardAttention(
        score="bilinear", estimator="reinforce"
    )
    q, v = rand(4, 2, 4), rand(4, 5, 4)
    layer(q, v)

    def loss(which, value):
        out, log_p = layer(q, value, return_log_prob=True, training=True)
        if which == "output":
            return ops.sum(out**2)
        return keras_attention.reinforce_loss(log_p, reward=1.0)

    sources = [layer.score.kernel, v]
    _, (out_grad, value_grad) = gradients(
        lambda _, value: loss("output", value), sources
    )
    _, (policy_grad, _) = gradients(
        lambda _, value: loss("policy", value), sources
    )
    # The output reaches the values it picked, never the score.
    np.testing.assert_array_equal(out_grad, 0.0)
    assert np.abs(value_grad).sum() > 0
    assert np.abs(policy_grad).sum() > 0


def _marker_task(n, length=6, seed=0):
    """Find the marked position; the target is that position's value[1]."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, length, 4)).astype("float32")
    x[:, :, 0] *= 0.3
    where = rng.integers(0, length, size=n)
    x[np.arange(n), where, 0] = 3.0
    query = np.ones((n, 4), "float32")
    return query, x, x[np.arange(n), where, 1], where


def _selection_accuracy(layer, query, x, where):
    _, w = layer(query, x, return_attention_scores=True)
    return float(np.mean(to_np(w).argmax(-1) == where))


@pytest.mark.heavy
def test_straight_through_gumbel_learns_to_select():
    keras.utils.set_random_seed(0)
    query, x, y, where = _marker_task(512)
    layer = keras_attention.HardAttention(
        score="bilinear", mode="sample", temperature=0.5, seed=0
    )
    q_in, x_in = keras.Input((4,)), keras.Input((6, 4))
    picked = layer(q_in, x_in)
    target = keras.layers.Lambda(lambda t: t[:, 1])(picked)
    model = keras.Model([q_in, x_in], target)
    # A zero kernel prefers no position, on every backend (their random
    # initial kernels differ and one happened to favour the marker).
    layer.score.kernel.assign(np.zeros((4, 4), "float32"))
    before = _selection_accuracy(layer, query, x, where)
    model.compile(keras.optimizers.Adam(0.05), "mse")
    model.fit([query, x], y, epochs=15, batch_size=64, verbose=0)
    after = _selection_accuracy(layer, query, x, where)
    assert before < 0.5
    assert after > 0.95, (before, after)


@pytest.mark.heavy
def test_reinforce_learns_to_select():
    keras.utils.set_random_seed(0)
    query, x, y, where = _marker_task(512)
    layer = keras_attention.HardAttention(
        score="bilinear", mode="sample", estimator="reinforce", seed=0
    )
    layer(query[:1], x[:1])
    layer.score.kernel.assign(np.zeros((4, 4), "float32"))  # as above
    optimizer = keras.optimizers.Adam(0.05)
    before = _selection_accuracy(layer, query, x, where)
    baseline = 0.0
    # 50 steps: the selection was exact (accuracy 1.0) after 30 on each
    # backend; 150 cost 3.4 s on TensorFlow and 9 s on JAX, at load 5.
    for step in range(50):
        idx = np.random.default_rng(step).integers(0, 512, 64)

        def loss(*_, idx=idx, baseline=baseline):
            picked, log_p = layer(
                query[idx], x[idx], return_log_prob=True, training=True
            )
            reward = -((picked[:, 1] - ops.convert_to_tensor(y[idx])) ** 2)
            return keras_attention.reinforce_loss(log_p, reward, baseline)

        # A new `loss` each step: compiling each one would cost more.
        _, grads = gradients(loss, layer.trainable_variables, jit=False)
        grads = [ops.convert_to_tensor(g) for g in grads]
        optimizer.apply(grads, layer.trainable_variables)
        # The baseline follows the reward of a fresh draw from the policy
        # (on JAX the same draw: `gradients` does not advance the seed).
        picked = to_np(layer(query[idx], x[idx], training=True))
        reward = -((picked[:, 1] - y[idx]) ** 2)
        baseline = 0.9 * baseline + 0.1 * float(np.mean(reward))
    after = _selection_accuracy(layer, query, x, where)
    assert before < 0.5
    assert after > 0.95, (before, after)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mode": "soft"}, "mode='soft'"),
        ({"estimator": "gumbel"}, "estimator='gumbel'"),
        ({"temperature": 0}, "temperature=0"),
        ({"temperature": "hot"}, "temperature='hot'"),
    ],
)
def test_bad_constructor_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_attention.HardAttention(**kwargs)
