"""Argument checks shared by the package (private).

Every constructor-argument message follows Keras: "Received an invalid
value for argument `name`, expected ... Received: name=value".
`floating_inputs` checks the tensors a layer is called on.
"""

import numbers

import keras


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


def floating_inputs(layer_name: str, **inputs) -> None:
    """A `TypeError` for the first of `inputs` that is not floating-point.

    Attention weighs its inputs by a softmax of their scores, which needs
    floating-point tensors: integer inputs (token ids) are refused before
    any computation rather than cast, on every backend. `None` is skipped,
    and so is an input without a `dtype` (the backend converts it).
    """
    for name, tensor in inputs.items():
        dtype = getattr(tensor, "dtype", None)
        if dtype is None:
            continue
        dtype = keras.backend.standardize_dtype(dtype)
        if not keras.backend.is_float_dtype(dtype):
            raise TypeError(
                f"{layer_name} expects a floating-point `{name}` (an "
                "embedding, not token ids: pass ids through "
                "`keras.layers.Embedding` first). Received: "
                f"{name}.dtype={dtype}, {name}.shape={tuple(tensor.shape)}"
            )
