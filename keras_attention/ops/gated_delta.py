"""Gated DeltaNet's recurrence as one op: `gated_delta_rule`.

Linear attention with a state: each head keeps a matrix `S (Dk, Dv)` that
decays, is corrected towards each new value (the delta rule) and is read
by each query. The forms of the same computation live one per module, as
in flash-linear-attention's `fla/ops/gated_delta_rule/`:
`_gated_delta_chunk.py` (the parallel form in chunks, for training and
long inputs) and `_gated_delta_recurrent.py` (one position at a time, for
decoding and short inputs); the tests hold the readable reference, a
NumPy transcription of the recurrence. This module checks the arguments,
lays out grouped heads and documents, and picks the form.
"""

import numbers

import keras
from keras import ops

from keras_attention import _validation
from keras_attention.ops import _eager
from keras_attention.ops._gated_delta_chunk import chunk_gated_delta_rule
from keras_attention.ops._gated_delta_recurrent import (
    recurrent_gated_delta_rule,
)

#: Inputs of at most this many positions take the recurrent form when
#: `form=None`: a few sequential steps cost less than one chunk's solve.
RECURRENT_MAX_LENGTH = 16

FORMS = (None, "chunk", "recurrent")


def _shape(x):
    return tuple(x.shape)


def _mismatch(expected, received):
    return ValueError(
        f"gated_delta_rule expects {expected}. Received: {received}"
    )


def _differ(expected, actual):
    return len(expected) != len(actual) or any(
        e is not None and a is not None and e != a
        for e, a in zip(expected, actual, strict=False)
    )


def _check_heads(query, key, value):
    q, k, v = _shape(query), _shape(key), _shape(value)
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise _mismatch(
            "`query`, `key` and `value` of rank 4, `(batch_size, time, "
            "heads, depth)`",
            f"query.shape={q}, key.shape={k}, value.shape={v}",
        )
    if _differ(q, k) or _differ(q[:2], v[:2]):
        raise _mismatch(
            "`query` and `key` of one shape and `value` of their batch "
            "size and length",
            f"query.shape={q}, key.shape={k}, value.shape={v}",
        )
    if None not in (q[2], v[2]) and v[2] % q[2]:
        raise _mismatch(
            "the value heads a multiple of the query and key heads",
            f"query.shape={q}, value.shape={v}",
        )
    return q, v


def _check_others(q, v, g, beta, initial_state, segment_ids):
    expected = {
        "g": (q[0], q[1], v[2]),
        "beta": (q[0], q[1], v[2]),
        "initial_state": (q[0], v[2], q[3], v[3]),
        "segment_ids": (q[0], q[1]),
    }
    given = {
        "g": g,
        "beta": beta,
        "initial_state": initial_state,
        "segment_ids": segment_ids,
    }
    for name, tensor in given.items():
        if tensor is not None and _differ(expected[name], _shape(tensor)):
            if name == "g" and not _differ(expected["g"] + (q[3],), _shape(g)):
                continue  # a decay per key channel (KDA)
            also = f" or {expected[name] + (q[3],)}" if name == "g" else ""
            raise _mismatch(
                f"`{name}` of shape {expected[name]}{also} for "
                f"query.shape={q} and value.shape={v}",
                f"{name}.shape={_shape(tensor)}",
            )


def _check_options(scale, chunk_size, form):
    _validation.positive_int("chunk_size", chunk_size)
    if form not in FORMS:
        raise _validation.invalid("form", form, f"one of {FORMS}")
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, numbers.Real)
    ):
        raise _validation.invalid("scale", scale, "a number or None")


def _resets(segment_ids):
    """`(batch, T)` floats: 1 where a position's document differs from the
    one before it."""
    ids = ops.convert_to_tensor(segment_ids)
    change = ops.not_equal(ids[:, 1:], ids[:, :-1])
    change = ops.pad(ops.cast(change, "float32"), [[0, 0], [1, 0]])
    return change


def gated_delta_rule(
    query,
    key,
    value,
    g,
    beta,
    scale: float | None = None,
    initial_state=None,
    output_final_state: bool = False,
    chunk_size: int = 64,
    segment_ids=None,
    form: str | None = None,
):
    """Gated DeltaNet's linear attention: the gated delta rule.

    Each value head keeps a state `S (Dk, Dv)`; at each position `t`
    (Yang, Kautz & Hatamizadeh, 2024; fla's
    `naive_recurrent_gated_delta_rule`):
    `S ← S · exp(g_t)`, `v'_t = β_t (v_t − Sᵀ k_t)`, `S ← S + k_t v'_tᵀ`,
    `o_t = Sᵀ (scale · q_t)`. With `g` per key channel, Kimi Delta
    Attention (KDA; Kimi Team, 2025; fla's `naive_recurrent_kda`), the
    decay is `S ← diag(exp(g_t)) S`. The chunked form (the WY representation,
    the paper's section 3) computes the same outputs `chunk_size`
    positions at a time, the chunks one `keras.ops.scan` (the compiled
    graph does not grow with the length, memory is linear in it); the
    recurrent form steps one position at a time. `chunk_size` and `form`
    change the speed, never the result. Query and key are used as given:
    Gated DeltaNet's layer L2-normalises them first
    (`keras_attention.GatedDeltaNet`).

    The math runs in float32 (float64 inputs stay float64); the output
    comes back in the query's dtype and the state in the compute dtype.

    Args:
        query: `(batch_size, time, heads, Dk)`.
        key: `(batch_size, time, heads, Dk)`.
        value: `(batch_size, time, value_heads, Dv)`. `value_heads` may be
            a multiple of `heads` (Qwen3.5's 16 query/key heads over 32
            value heads): value head `j` reads query and key head
            `j // (value_heads // heads)`.
        g: `(batch_size, time, value_heads)`, the log-space decay (at most
            0: `exp(g)` is how much of the state is kept); or `(batch_size,
            time, value_heads, Dk)`, one decay per key channel (Kimi Delta
            Attention, KDA: row `d` of `S` decays by `exp(g[..., d])`).
        beta: `(batch_size, time, value_heads)`, the write strength
            (usually a sigmoid, in `(0, 1)`).
        scale: The query's scale. Defaults to `Dk ** -0.5`.
        initial_state: `(batch_size, value_heads, Dk, Dv)`, the state
            before the first position. Defaults to zeros.
        output_final_state: Whether to return the state after the last
            position too.
        chunk_size: Positions per chunk of the chunked form. Defaults to
            `64`.
        segment_ids: `(batch_size, time)` integers, or `None`: packed
            documents. The state is emptied where the id changes, so each
            document gets what it would get alone (the first document
            starts from `initial_state`).
        form: `"chunk"`, `"recurrent"`, or `None` (the default): the
            recurrent form for inputs of at most
            `RECURRENT_MAX_LENGTH` positions, else the chunked one.

    Returns:
        The output `(batch_size, time, value_heads, Dv)`, or `(output,
        final_state)` with the state `(batch_size, value_heads, Dk, Dv)`
        if `output_final_state`.

    Example:

    >>> q = k = np.random.rand(2, 5, 2, 8).astype("float32") / 3
    >>> v = np.random.rand(2, 5, 4, 8).astype("float32")
    >>> g = -np.random.rand(2, 5, 4).astype("float32")
    >>> beta = np.full((2, 5, 4), 0.5, "float32")
    >>> out, state = keras_attention.ops.gated_delta_rule(
    ...     q, k, v, g, beta, output_final_state=True
    ... )
    >>> tuple(out.shape), tuple(state.shape)
    ((2, 5, 4, 8), (2, 4, 8, 8))

    References:
        - [Yang, Kautz & Hatamizadeh, 2024, Gated Delta Networks:
          Improving Mamba2 with Delta Rule](https://arxiv.org/abs/2412.06464)
        - [Kimi Team, 2025, Kimi Linear: An Expressive, Efficient
          Attention Architecture](https://arxiv.org/abs/2510.26692)
        - [flash-linear-attention's gated delta rule](https://github.com/fla-org/flash-linear-attention/tree/main/fla/ops/gated_delta_rule)
    """
    q, v = _check_heads(query, key, value)
    _check_others(q, v, g, beta, initial_state, segment_ids)
    _check_options(scale, chunk_size, form)
    dtype = "float64" if "64" in str(query.dtype) else "float32"
    if form is None:
        short = q[1] is not None and q[1] <= RECURRENT_MAX_LENGTH
        form = "recurrent" if short else "chunk"
    output, state = _rule(
        query,
        key,
        value,
        g,
        beta,
        scale,
        initial_state,
        segment_ids,
        dtype,
        form,
        chunk_size,
    )
    output = ops.cast(output, keras.backend.standardize_dtype(query.dtype))
    return (output, state) if output_final_state else output


@_eager.compiled_when_eager
def _rule(
    query,
    key,
    value,
    g,
    beta,
    scale,
    initial_state,
    segment_ids,
    dtype,
    form,
    chunk_size,
):
    """`(output, final_state)` of checked inputs, in `dtype`, by `form`."""
    query, key, value, g, beta = (
        ops.cast(x, dtype) for x in (query, key, value, g, beta)
    )
    groups = value.shape[2] // query.shape[2]
    if groups > 1:
        query = ops.repeat(query, groups, axis=2)
        key = ops.repeat(key, groups, axis=2)
    depth = query.shape[3]
    query = query * (depth**-0.5 if scale is None else scale)
    if initial_state is None:
        state = ops.zeros(
            (ops.shape(value)[0], value.shape[2], depth, value.shape[3]),
            dtype,
        )
    else:
        state = ops.cast(initial_state, dtype)
    reset = None
    if segment_ids is not None:
        reset = ops.cast(_resets(segment_ids), dtype)
    if form == "recurrent":
        return recurrent_gated_delta_rule(
            query, key, value, g, beta, state, reset
        )
    return chunk_gated_delta_rule(
        query, key, value, g, beta, state, reset, chunk_size
    )
