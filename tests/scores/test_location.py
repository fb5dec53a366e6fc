"""LocationScore (`scores/location.py`): keys ignored, `max_length`.

Moved from `tests/test_scores.py` with `scores.py` -> `scores/`.
"""

import numpy as np
import pytest

from keras_attention import scores
from tests.layer_basics import check_layer_basics
from tests.scores._reference import K6
from tests.scores._reference import Q
from tests.scores._reference import logits


def test_location_score_ignores_keys():
    s = scores.LocationScore(max_length=8)
    got = logits(s, Q, K6)
    w = s.kernel.numpy()
    assert w.shape == (4, 8)
    np.testing.assert_allclose(got, (Q @ w)[..., :5], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logits(s, Q, K6 * 0), got)


def test_location_score_basics():
    check_layer_basics(
        scores.LocationScore,
        {"max_length": 6},
        [Q, K6],
        expected_output_shape=(2, 3, 5),
        expected_num_trainable_weights=1,
        run_mixed_precision=False,
    )


def test_location_with_too_many_keys_raises():
    with pytest.raises(ValueError, match="cannot score 5 key positions"):
        scores.LocationScore(max_length=4)(Q, K6)
    s = scores.LocationScore(max_length=5)
    s(Q, K6)
    longer = np.zeros((2, 9, 6), "float32")
    with pytest.raises(ValueError, match="cannot score 9 key positions"):
        s(Q, longer)
