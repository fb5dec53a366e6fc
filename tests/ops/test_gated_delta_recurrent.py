"""The recurrent form of the gated delta rule on its own
(`ops/_gated_delta_recurrent.py`): a hand-computed step and the NumPy
recurrence."""

import keras
import numpy as np

from keras_attention.ops import _gated_delta_recurrent
from tests import gated_delta_reference as reference


def _tensors(*xs):
    return [keras.ops.convert_to_tensor(np.asarray(x, "float32")) for x in xs]


def test_one_step_by_hand():
    # One head, Dk = 2, Dv = 1: S = [[1], [2]] decays by e^g = 0.5 to
    # [[0.5], [1]]; k = (1, 0) remembers 0.5, v' = 0.5 (3 - 0.5) = 1.25;
    # S = [[1.75], [1]]; o = Sᵀ q with q = (1, 1): 2.75.
    q, k, v = [[[[1, 1]]]], [[[[1, 0]]]], [[[[3]]]]
    g, beta = [[[np.log(0.5)]]], [[[0.5]]]
    state = [[[[1], [2]]]]
    out, final = _gated_delta_recurrent.recurrent_gated_delta_rule(
        *_tensors(q, k, v, g, beta, state), None
    )
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out), [[[[2.75]]]])
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(final), [[[[1.75], [1.0]]]]
    )


def test_equals_the_numpy_recurrence(rng):
    args = reference.inputs(rng, 2, 9, 2, 2, 3, 4)
    expected, expected_state = reference.gated_delta_rule(*args, scale=1.0)
    state = np.zeros((2, 2, 3, 4))
    out, final = _gated_delta_recurrent.recurrent_gated_delta_rule(
        *_tensors(*args, state), None
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(out), expected, atol=1e-5
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(final), expected_state, atol=1e-5
    )
