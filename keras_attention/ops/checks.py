"""Checks of the tensors an attention call is given: their shapes (on
static shapes only), dtypes (`floating`, `mask_dtype`) and the dtype
logits are computed in (`logits_dtype`).

`keras_attention.ops` is usable on its own, so its functions name the
shapes they were given instead of letting a backend's broadcast or matmul
fail deep inside (`SelectV2 ... must be broadcastable`, `Matrix
size-incompatible`). Unknown sizes (`None`, symbolic tensors) pass: the
check then happens where the size is known. The functions of `attend.py`
call these with one line each.
"""

import inspect

import keras
import numpy as np

from keras_attention import _validation


def _shape(tensor) -> tuple:
    shape = getattr(tensor, "shape", None)
    return tuple(np.shape(tensor) if shape is None else shape)


def _equal(a, b) -> bool:
    """Sizes that can be the same: equal, or one of them unknown."""
    return a is None or b is None or a == b


def _broadcast(a, b) -> bool:
    return _equal(a, b) or 1 in (a, b)


def broadcasts_to(function: str, mask, logits) -> None:
    """A `ValueError` when `mask` does not broadcast to `logits`'s shape.

    Args:
        function: The caller's name, for the message.
        mask: The mask (any array; `None` passes).
        logits: The logits it masks.
    """
    if mask is None:
        return
    mask_shape, logits_shape = _shape(mask), _shape(logits)
    fits = len(mask_shape) <= len(logits_shape) and all(
        _equal(m, x) or m == 1
        for m, x in zip(
            reversed(mask_shape), reversed(logits_shape), strict=False
        )
    )
    if not fits:
        raise ValueError(
            f"{function} needs a `mask` that broadcasts to the logits' "
            f"shape. Received: mask.shape={mask_shape}, "
            f"logits.shape={logits_shape}"
        )


def attention_shapes(query, key, value, same_depth: bool) -> None:
    """A `ValueError` unless `(..., Tq, Dq)`, `(..., Tk, Dk)`, `(..., Tk, Dv)`.

    Args:
        query: The queries.
        key: The keys.
        value: The values.
        same_depth: Whether `Dq` must equal `Dk` (a dot-product score).
    """
    shapes = {
        "query": _shape(query),
        "key": _shape(key),
        "value": _shape(value),
    }
    received = ", ".join(f"{n}.shape={s}" for n, s in shapes.items())
    q, k, v = shapes.values()
    if min(len(q), len(k), len(v)) < 2 or not len(q) == len(k) == len(v):
        raise ValueError(
            "attention expects `query (..., Tq, Dq)`, `key (..., Tk, Dk)` "
            "and `value (..., Tk, Dv)` of one rank, at least 2. "
            f"Received: {received}"
        )
    leading = all(
        _broadcast(a, b) and _broadcast(b, c) and _broadcast(a, c)
        for a, b, c in zip(q[:-2], k[:-2], v[:-2], strict=True)
    )
    if not leading or not _equal(k[-2], v[-2]):
        raise ValueError(
            "attention needs the same leading axes for `query`, `key` and "
            "`value`, and as many keys as values (axis -2). "
            f"Received: {received}"
        )
    if same_depth and not _equal(q[-1], k[-1]):
        raise ValueError(
            "attention's default score is a dot product, which needs "
            "`query` and `key` of the same depth (last axis); pass "
            f"`score_fn` for other depths. Received: {received}"
        )


def weights_fit_values(logits, value) -> None:
    """A `ValueError` unless `logits (..., Tq, Tk)`, `value (..., Tk, Dv)`."""
    logits_shape, value_shape = _shape(logits), _shape(value)
    if (
        len(logits_shape) >= 2
        and len(logits_shape) == len(value_shape)
        and _equal(logits_shape[-1], value_shape[-2])
        and all(
            _broadcast(a, b)
            for a, b in zip(logits_shape[:-2], value_shape[:-2], strict=True)
        )
    ):
        return
    raise ValueError(
        "attend expects `logits (..., Tq, Tk)` and `value (..., Tk, Dv)` "
        "of one rank, with one logit per value. Received: "
        f"logits.shape={logits_shape}, value.shape={value_shape}"
    )


def lengths(**named) -> None:
    """A `ValueError` for a length that is not a non-negative integer.

    Tensors pass (a size read from a traced shape); `None` passes for the
    optional ones (`left` / `right` of a band).
    """
    for name, value in named.items():
        _validation.non_negative_length(
            name, value, allow_none=name in _OPTIONAL
        )


_OPTIONAL = ("left", "right")


def dtype_name(name: str, dtype) -> None:
    """A `ValueError` naming `dtype` when Keras cannot read it as a dtype."""
    try:
        keras.backend.standardize_dtype(dtype)
    except (TypeError, ValueError, AttributeError):
        raise _validation.invalid(name, dtype, "a dtype") from None


_HALF_DTYPES = ("float16", "bfloat16")


def logits_dtype(dtype) -> str:
    """The dtype softmax is computed in: `float32` for half precision.

    Example:

    >>> from keras_attention.ops import logits_dtype
    >>> logits_dtype("bfloat16"), logits_dtype("float64")
    ('float32', 'float64')
    """
    dtype_name("dtype", dtype)
    dtype = keras.backend.standardize_dtype(dtype)
    return "float32" if dtype in _HALF_DTYPES else dtype


def chunk_sizes(chunk_size) -> int:
    """The queries and keys per block, a positive integer (else a
    `ValueError`)."""
    return _validation.positive_int("chunk_size", chunk_size)


def floating(function: str, **tensors) -> None:
    """A `TypeError` for the first of `tensors` that is not floating-point.

    Attention weighs its inputs by a softmax of their scores, which needs
    floating-point tensors: integer inputs (token ids) are refused before
    any computation rather than cast, on every backend. `None` is skipped,
    and so is an input without a `dtype` (the backend converts it).
    """
    for name, tensor in tensors.items():
        dtype = getattr(tensor, "dtype", None)
        if dtype is None:
            continue
        if isinstance(dtype, np.dtype) and dtype.kind in "USO":
            dtype = "string"  # NumPy text, which Keras has no dtype for.
        dtype = keras.backend.standardize_dtype(dtype)
        if not keras.backend.is_float_dtype(dtype):
            raise TypeError(
                f"{function} expects a floating-point `{name}` (an "
                "embedding, not token ids: pass ids through "
                "`keras.layers.Embedding` first). Received: "
                f"{name}.dtype={dtype}, {name}.shape={tuple(tensor.shape)}"
            )


def same_rank_and_batch(function: str, **shapes) -> None:
    """A `ValueError` unless the inputs have one rank and one batch size.

    Args:
        function: The caller's name, for the message.
        **shapes: `query=query.shape, key=key.shape`, ...
    """
    named = {name: tuple(shape) for name, shape in shapes.items()}
    ranks = {len(shape) for shape in named.values()}
    batches = {shape[0] for shape in named.values() if shape and shape[0]}
    if len(ranks) > 1 or len(batches) > 1:
        received = ", ".join(f"{n}.shape={s}" for n, s in named.items())
        raise ValueError(
            f"{function} needs inputs of one rank and one batch size. "
            f"Received: {received}"
        )


def positions(function: str, **shapes) -> None:
    """A `ValueError` for a sequence input with no positions (axis 1 is 0)."""
    for name, shape in shapes.items():
        if len(shape) >= 2 and shape[1] == 0:
            raise ValueError(
                f"{function} needs at least one position in `{name}` (axis "
                f"1). Received: {name}.shape={tuple(shape)}"
            )


def probability_logits(logits, axis: int) -> None:
    """Logits to normalise: floating, with at least one entry on `axis`."""
    floating("probability_fn", logits=logits)
    shape = _shape(logits)
    if not shape or shape[axis] == 0:
        raise ValueError(
            "A probability function needs logits with at least one entry on "
            f"the axis it normalises. Received: logits.shape={shape}, "
            f"axis={axis}"
        )


def grouped_heads(function: str, query, key, value) -> None:
    """The `(B, T, H, D)` inputs of `flex_attention` and `ring_attention`:
    floating, rank 4, the query heads a multiple of the key heads."""
    floating(function, query=query, key=key, value=value)
    for name, x in (("query", query), ("key", key), ("value", value)):
        if len(x.shape) != 4:
            raise ValueError(
                f"Expected `{name}` of rank 4, `(batch_size, time, heads, "
                f"depth)`. Received: {name}.shape={tuple(x.shape)}"
            )
    heads, kv_heads = query.shape[2], key.shape[2]
    same = key.shape[1] == value.shape[1] and kv_heads == value.shape[2]
    ok = (
        same
        and query.shape[-1] == key.shape[-1]
        and heads is not None
        and kv_heads is not None
        and heads % kv_heads == 0
    )
    if not ok:
        raise ValueError(
            "Expected `key` and `value` with the same time and heads, "
            "`key` with the depth of `query`, and the query heads a "
            "multiple of the key heads. Received: "
            f"query.shape={tuple(query.shape)}, key.shape="
            f"{tuple(key.shape)}, value.shape={tuple(value.shape)}"
        )
    same_rank_and_batch(
        function, query=query.shape, key=key.shape, value=value.shape
    )
    positions(function, key=key.shape)


#: The signatures of the mods, as the errors name them.
MOD_SIGNATURES = {
    "score_mod": "score_mod(score, batch, head, q_idx, kv_idx)",
    "mask_mod": "mask_mod(batch, head, q_idx, kv_idx)",
}


def mod(name: str, value):
    """`value` if it is `None` or a callable that takes the arguments of
    `name` (`"score_mod"`: 5, `"mask_mod"`: 4); else a `TypeError` naming
    the argument and the signature expected."""
    if value is None:
        return None
    signature = MOD_SIGNATURES[name]
    if not callable(value):
        raise TypeError(
            f"Expected `{name}` to be None or callable, `{signature}`. "
            f"Received: {name}={value!r}"
        )
    try:
        parameters = inspect.signature(value)
    except (TypeError, ValueError):  # a builtin without a signature
        return value
    count = signature.count(",") + 1
    try:
        parameters.bind(*range(count))
    except TypeError:
        raise TypeError(
            f"Expected `{name}` to take {count} positional arguments, "
            f"`{signature}`. Received: {name}={value!r} with the signature "
            f"{parameters}"
        ) from None
    return value


def mask_dtype(name: str, mask) -> None:
    """A mask of booleans, integers or floats (nonzero is `True`, as in
    Keras); a string or object mask is a `TypeError` naming it."""
    if mask is None:
        return
    dtype = getattr(mask, "dtype", None)
    if dtype is None:
        dtype = np.asarray(mask).dtype
    try:
        name_of = keras.backend.standardize_dtype(dtype)
    except ValueError:
        name_of = str(dtype)
    if name_of == "bool" or name_of.startswith(("int", "uint", "float")):
        return
    if name_of == "bfloat16":
        return
    raise TypeError(
        f"Expected `{name}` to be a boolean mask (True = attend; integers "
        "and floats count as booleans, nonzero = True, as in Keras). "
        f"Received: {name} of dtype {name_of}"
    )
