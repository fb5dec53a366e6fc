"""ops/logits.py: the masked fill, softmax and log-sum-exp, the floored
`exp`, the one-hot arg max, inverse-CDF sampling.

Each is checked by hand and against NumPy, and against the copies it
replaced where those are still public (`seq2seq.hardmax`, HardAttention's
one-hot weights, the decoders' sampling).
"""

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from keras import ops

from keras_attention import ops as ka_ops
from keras_attention import seq2seq
from tests.autodiff import gradients
from tests.layer_basics import np_softmax
from tests.profiles import examples


def _np(x):
    return ops.convert_to_numpy(x)


def test_mask_logits_fills_only_masked_positions():
    logits = np.array([[1.0, -2.0, 3.0]], "float32")
    got = _np(ka_ops.mask_logits(logits, np.array([[True, False, True]])))
    np.testing.assert_array_equal(got[:, [0, 2]], [[1.0, 3.0]])
    assert got[0, 1] == np.float32(ka_ops.MASKED_LOGIT)
    # Its softmax weight is exactly 0.
    assert _np(ops.softmax(got))[0, 1] == 0.0


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_argmax_matches_numpy(rng, axis):
    logits = rng.normal(size=(3, 4, 5)).astype("float32")
    want = np.zeros_like(logits)
    np.put_along_axis(
        want, np.expand_dims(logits.argmax(axis=axis), axis), 1.0, axis=axis
    )
    got = _np(ka_ops.one_hot_argmax(logits, axis=axis))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(_np(seq2seq.hardmax(logits, axis)), want)


def test_one_hot_argmax_gives_a_tie_to_the_first():
    got = _np(ka_ops.one_hot_argmax(np.array([[2.0, 5.0, 5.0, 1.0]])))
    np.testing.assert_array_equal(got, [[0.0, 1.0, 0.0, 0.0]])


def test_inverse_cdf_sample_by_hand():
    probs = np.array([[0.1, 0.2, 0.7]] * 4, "float32")
    uniform = np.array([0.05, 0.15, 0.31, 0.99], "float32")
    # Cumulative: 0.1, 0.3, 1.0.
    got = _np(ka_ops.inverse_cdf_sample(np.log(probs), uniform))
    np.testing.assert_array_equal(got, [0, 1, 2, 2])


def test_inverse_cdf_sample_never_picks_a_masked_tail(rng):
    logits = rng.normal(size=(64, 6)).astype("float32")
    kept = np.arange(6) < 3
    masked = _np(ka_ops.mask_logits(logits, kept[None, :]))
    # At the top of [0, 1), and at 1 itself (where `u · total` meets the
    # total, as rounding can make it): never past the last kept token.
    for top in (np.nextafter(np.float32(1), np.float32(0)), np.float32(1)):
        uniform = np.full((64,), top, "float32")
        got = _np(ka_ops.inverse_cdf_sample(masked, uniform))
        assert got.max() <= 2


def test_inverse_cdf_sample_frequencies_follow_the_distribution(rng):
    probs = np.array([0.2, 0.5, 0.3], "float32")
    uniform = rng.uniform(size=(20000,)).astype("float32")
    logits = np.broadcast_to(np.log(probs), (20000, 3))
    got = _np(ka_ops.inverse_cdf_sample(logits, uniform))
    freq = np.bincount(got, minlength=3) / 20000
    np.testing.assert_allclose(freq, probs, atol=0.02)


def test_masked_lse_matches_numpy_and_its_gradient_is_the_softmax(rng):
    logits = rng.normal(size=(2, 3, 6)).astype("float32") * 4.0
    mask = rng.random((2, 3, 6)) > 0.4
    mask[0, 1] = False  # a row with no kept logit
    got = _np(ka_ops.logits.masked_lse(logits, mask))[..., 0]
    rows = mask.any(-1)
    kept = np.where(mask, logits.astype("float64"), -np.inf)
    top = np.where(rows, kept.max(-1), 0.0)
    with np.errstate(divide="ignore"):
        want = top + np.log(np.exp(kept - top[..., None]).sum(-1))
    np.testing.assert_allclose(got[rows], want[rows], rtol=1e-6, atol=1e-6)
    assert got[0, 1] < -1e29
    assert _np(ka_ops.logits.kept_lse(got))[0, 1] == -np.inf
    # Its gradient is the masked softmax (zero where nothing is kept).
    upstream = rng.normal(size=(2, 3, 1)).astype("float32")
    upstream[0, 1] = 0.0  # the row's lse is the mask's fill, not a value
    _, (grad,) = gradients(
        lambda x: ops.sum(
            ka_ops.logits.masked_lse(x, mask) * ops.convert_to_tensor(upstream)
        ),
        [logits],
    )
    want_grad = np.exp(kept - want[..., None]) * upstream
    want_grad[~rows] = 0.0
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)


def test_masked_lse_by_hand():
    logits = np.array([[0.0, np.log(3.0), 50.0]], "float32")
    got = ka_ops.logits.masked_lse(logits, np.array([[True, True, False]]))
    np.testing.assert_allclose(_np(got), [[np.log(4.0)]], rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_masked_lse_of_a_row_of_minus_inf_is_minus_inf(dtype):
    # A score mod's `-inf`, and float16's masked fill, are `-inf`: the
    # row's log-sum-exp is `-inf` as `keras.ops.logsumexp` gives, not NaN
    # (nor the floor's -80 on PyTorch).
    logits = np.array([[-np.inf] * 3, [0.0, -np.inf, 0.0]], dtype)
    got = _np(ka_ops.logits.masked_lse(logits))[:, 0].astype("float64")
    assert got[0] == -np.inf
    np.testing.assert_allclose(got[1], np.log(2.0), rtol=1e-3)
    mask = np.array([[False] * 3, [True, True, False]])
    kept = _np(ka_ops.logits.kept_lse(ka_ops.logits.masked_lse(logits, mask)))
    assert kept[0, 0] == -np.inf
    np.testing.assert_allclose(kept[1, 0].astype("float64"), 0.0, atol=1e-3)


def test_exp_floored_is_exp_down_to_its_floor():
    x = np.array([0.0, -1.0, -50.0, -79.0, -95.0, -1e30], "float32")
    got = _np(ka_ops.logits.exp_floored(x)).astype("float64")
    np.testing.assert_allclose(got[:4], np.exp(x[:4].astype("float64")), 1e-6)
    # Below the floor at most exp(-80): a weight the caller masks or sums
    # beside the row's largest, 1.
    floor = np.exp(np.float64(ka_ops.logits.EXP_FLOOR))
    assert np.all(got[4:] <= floor * (1 + 1e-6))
    if keras.backend.backend() == "torch":
        # PyTorch's CPU `exp` is slow below about -87: the floor is applied.
        np.testing.assert_allclose(got[4:], floor, rtol=1e-6)


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
