"""The gated delta rule, one position at a time: the form for decoding
and short inputs (private; `keras_attention.ops.gated_delta_rule`).

The recurrence of Yang, Kautz & Hatamizadeh (2024), per head, written as
one `keras.ops.scan` over the positions (a loop in the compiled graph,
not one copy of the step per position; `_gated_delta_scan.py`, shared
with the chunked form, a chunk of one position):

    S ← diag(exp(g_t)) S              (reset to 0 where a document begins)
    v'_t = β_t (v_t − Sᵀ k_t)
    S ← S + k_t v'_tᵀ
    o_t = Sᵀ q_t                       (q already scaled)

`g_t` is one decay per head (Gated DeltaNet), the same for every row of
`S`, or one per key channel (Kimi Delta Attention, KDA), a row of `S`
each: a row of `S` is what one key channel has written.
"""

from keras import ops

from keras_attention.ops._gated_delta_scan import state_scan


def recurrent_gated_delta_rule(query, key, value, g, beta, state, reset):
    """The recurrence over the positions of one call.

    Args:
        query: `(batch, T, heads, Dk)`, scaled, as many heads as `value`.
        key: `(batch, T, heads, Dk)`.
        value: `(batch, T, heads, Dv)`.
        g: `(batch, T, heads)`, the log-space decay, or `(batch, T, heads,
            Dk)` per key channel.
        beta: `(batch, T, heads)`, the write strength.
        state: `(batch, heads, Dk, Dv)`, the state before position 0.
        reset: `(batch, T)` floats, 1 where the state is emptied before the
            position is read (a document begins), or `None`.

    Returns:
        `(output (batch, T, heads, Dv), final state (batch, heads, Dk,
        Dv))`, in the inputs' dtype.
    """
    channels = len(g.shape) == 4
    decay = ops.exp(g)
    if reset is not None:
        decay = decay * (
            1.0 - (reset[..., None, None] if channels else reset[..., None])
        )
    # The decay of the state's rows, the key axis: `(…, 1, 1)` per head,
    # `(…, Dk, 1)` per key channel.
    rows = decay[..., None] if channels else decay[..., None, None]
    b = beta[..., None]
    # A step of one position: the state decays, then the key reads it
    # and writes `v'_t = β_t v_t − β_t (exp(g_t) ∘ k_t)ᵀ S_t`.
    written = value * b
    carried = key * rows[..., 0] * b
    to_end = key
    steps = tuple(
        ops.moveaxis(x, 1, 0)[..., None, :] for x in (written, carried, to_end)
    )
    states = state_scan(state, *steps, ops.moveaxis(rows, 1, 0))
    output = ops.einsum(
        "tbhk,tbhkv->tbhv", ops.moveaxis(query, 1, 0), states[1:]
    )
    return ops.moveaxis(output, 0, 1), states[-1]
