"""ops/logits.py: the masked fill, the one-hot arg max, inverse-CDF sampling.

Each is checked by hand and against NumPy, and against the copies it
replaced where those are still public (`seq2seq.hardmax`, HardAttention's
one-hot weights, the decoders' sampling).
"""

import numpy as np
import pytest
from keras import ops

from keras_attention import ops as ka_ops
from keras_attention import seq2seq


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
