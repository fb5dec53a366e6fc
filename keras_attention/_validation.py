"""Argument checks shared by the package (private).

Every constructor-argument message follows Keras: "Received an invalid
value for argument `name`, expected ... Received: name=value".
The tensors a call is given are checked by `ops/checks.py`.
"""

import numbers

import keras
import numpy as np


def invalid(name: str, value, expected: str) -> ValueError:
    """The `ValueError` for argument `name`, which should be `expected`."""
    return ValueError(
        f"Received an invalid value for argument `{name}`, expected "
        f"{expected}. Received: {name}={value!r}"
    )


def positive_int(name: str, value, allow_none: bool = False):
    """`value` as an `int` if it is a positive integer (or `None`)."""
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or value <= 0
    ):
        expected = "a positive integer" + (" or None" if allow_none else "")
        raise invalid(name, value, expected)
    return int(value)


def rate(name: str, value) -> float:
    """`value` as a `float` if it is a probability in `[0, 1)`."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 <= value < 1
    ):
        raise invalid(name, value, "a float in [0, 1)")
    return float(value)


def non_negative(
    name: str, value, finite: bool = False, expected: str | None = None
) -> float:
    """`value` as a `float` if it is a real number `>= 0` (not NaN).

    With `finite=True` infinity is refused too. `expected` replaces the
    message's "a (finite) non-negative number".
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not value >= 0
        or (finite and value == float("inf"))
    ):
        if expected is None:
            expected = ("a finite " if finite else "a ") + "non-negative number"
        raise invalid(name, value, expected)
    return float(value)


def positive_number(name: str, value) -> float:
    """`value` as a `float` if it is a real number `> 0` (not NaN)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not value > 0
    ):
        raise invalid(name, value, "a positive number")
    return float(value)


# Checks found by the bad-input sweep (tests/test_sweep.py).


def seed(name: str, value):
    """`value` if it is a seed: `None`, an integer >= 0 or a `SeedGenerator`.

    A negative integer overflows JAX's unsigned seed.
    """
    if value is None or isinstance(value, keras.random.SeedGenerator):
        return value
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or value < 0
    ):
        raise invalid(
            name,
            value,
            "an integer >= 0, a keras.random.SeedGenerator or None",
        )
    return value


def number(name: str, value) -> float:
    """`value` as a `float` if it is a finite real number (not a bool)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not float("-inf") < value < float("inf")
    ):
        raise invalid(name, value, "a finite number")
    return float(value)


def optional_bool(name: str, value):
    """`value` if it is `True`, `False` or `None`."""
    if value is not None and not isinstance(value, bool):
        raise invalid(name, value, "True, False or None")
    return value


def initializer(name: str, value):
    """`keras.initializers.get(value)`, refusing `None` (no initializer)."""
    if value is None:
        raise invalid(name, value, "an initializer or its name")
    return keras.initializers.get(value)


def non_negative_length(name: str, value, allow_none: bool = False):
    """`value` if it is a non-negative integer or a tensor (a traced size)."""
    if value is None and allow_none:
        return value
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return value
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or value < 0
    ):
        expected = "a non-negative integer" + (" or None" if allow_none else "")
        raise invalid(name, value, expected)
    return value


def strings(name: str, value) -> list:
    """`value` as a list if it is a list, tuple or array of strings."""
    if not isinstance(value, (list, tuple, np.ndarray)) or not all(
        isinstance(item, str) for item in value
    ):
        raise invalid(name, value, "a list of strings")
    return list(value)


def string(name: str, value) -> str:
    """`value` if it is a string."""
    if not isinstance(value, str):
        raise invalid(name, value, "a string")
    return value


def layer_or_callable(name: str, value):
    """`value` if it is callable (a Keras layer or a function)."""
    if not callable(value):
        raise invalid(name, value, "a Keras layer or a callable")
    return value
