"""The shared number checks of `_validation.py` (one definition each)."""

import math

import numpy as np
import pytest

from keras_attention import _validation

pytestmark = pytest.mark.backend_independent


@pytest.mark.parametrize("value", [0, 0.0, 2, 1.5, np.float32(0.5), math.inf])
def test_non_negative_accepts_real_numbers_from_zero(value):
    assert _validation.non_negative("x", value) == float(value)


@pytest.mark.parametrize("value", [-1, -0.5, math.nan, True, "1", None])
def test_non_negative_refuses_the_rest_naming_the_value(value):
    with pytest.raises(ValueError, match=r"expected a non-negative number"):
        _validation.non_negative("x", value)


def test_finite_non_negative_refuses_infinity():
    with pytest.raises(ValueError, match=r"a finite non-negative number\. "):
        _validation.non_negative("x", math.inf, finite=True)
    with pytest.raises(ValueError, match=r"or a list of them\. Received: x="):
        _validation.non_negative(
            "x", -1, True, "a finite non-negative number or a list of them"
        )


@pytest.mark.parametrize("value", [1e-12, 1, 2.5, np.float64(3.0)])
def test_positive_number_accepts_positive_reals(value):
    assert _validation.positive_number("t", value) == float(value)


@pytest.mark.parametrize("value", [0, -1.0, math.nan, False, "2"])
def test_positive_number_refuses_the_rest(value):
    with pytest.raises(
        ValueError,
        match=r"expected a positive number\. "
        r"Received: t=",
    ):
        _validation.positive_number("t", value)
