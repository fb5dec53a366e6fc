"""The gated delta rule, one position at a time: the form for decoding
and short inputs (private; `keras_attention.ops.gated_delta_rule`).

The recurrence of Yang, Kautz & Hatamizadeh (2024), per head, written as
one `keras.ops.scan` over the positions (a loop in the compiled graph,
not one copy of the step per position):

    S ← S · exp(g_t)                  (reset to 0 where a document begins)
    v'_t = β_t (v_t − Sᵀ k_t)
    S ← S + k_t v'_tᵀ
    o_t = Sᵀ q_t                       (q already scaled)
"""

from keras import ops


def recurrent_gated_delta_rule(query, key, value, g, beta, state, reset):
    """The recurrence over the positions of one call.

    Args:
        query: `(batch, T, heads, Dk)`, scaled, as many heads as `value`.
        key: `(batch, T, heads, Dk)`.
        value: `(batch, T, heads, Dv)`.
        g: `(batch, T, heads)`, the log-space decay.
        beta: `(batch, T, heads)`, the write strength.
        state: `(batch, heads, Dk, Dv)`, the state before position 0.
        reset: `(batch, T)` floats, 1 where the state is emptied before the
            position is read (a document begins), or `None`.

    Returns:
        `(output (batch, T, heads, Dv), final state (batch, heads, Dk,
        Dv))`, in the inputs' dtype.
    """
    decay = ops.exp(g)
    if reset is not None:
        decay = decay * (1.0 - reset[..., None])
    steps = tuple(
        ops.moveaxis(x, 1, 0) for x in (query, key, value, decay, beta)
    )

    def step(carry, inputs):
        state, _ = carry
        q, k, v, a, b = inputs
        state = state * a[..., None, None]
        remembered = ops.einsum("bhk,bhkv->bhv", k, state)
        written = (v - remembered) * b[..., None]
        state = state + k[..., :, None] * written[..., None, :]
        output = ops.einsum("bhk,bhkv->bhv", q, state)
        return (state, output), (state, output)

    # The carry holds the output beside the state: Keras's scan on
    # TensorFlow needs what each step emits to be shaped as the carry (the
    # emitted states are dropped, unused).
    (state, _), (_, output) = ops.scan(
        step, (state, ops.zeros_like(value[:, 0])), steps
    )
    return ops.moveaxis(output, 0, 1), state
