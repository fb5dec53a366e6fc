"""Shape checks of the attention functions, on static shapes only.

`keras_attention.ops` is usable on its own, so its functions name the
shapes they were given instead of letting a backend's broadcast or matmul
fail deep inside (`SelectV2 ... must be broadcastable`, `Matrix
size-incompatible`). Unknown sizes (`None`, symbolic tensors) pass: the
check then happens where the size is known. The functions of `attend.py`
call these with one line each.
"""

import numpy as np


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
    ):
        return
    raise ValueError(
        "attend expects `logits (..., Tq, Tk)` and `value (..., Tk, Dv)` "
        "of one rank, with one logit per value. Received: "
        f"logits.shape={logits_shape}, value.shape={value_shape}"
    )
