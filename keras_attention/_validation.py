"""Constructor-argument checks shared by the package (private).

Every message follows Keras: "Received an invalid value for argument
`name`, expected ... Received: name=value".
"""

import numbers


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
