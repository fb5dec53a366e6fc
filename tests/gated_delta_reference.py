"""The gated delta rule in NumPy, float64, one position at a time.

A transcription of the recurrence of Yang, Kautz & Hatamizadeh (2024)
as flash-linear-attention's `naive_recurrent_gated_delta_rule` writes
it, the reference the op's forms and the layer are checked against: for
each value head `h` (reading query/key head `h // groups`) and position
`t`, the state emptied where a document begins, then
`S ← S · exp(g_t)`, `v' = β_t (v_t − Sᵀ k_t)`, `S ← S + k_t v'ᵀ`,
`o_t = Sᵀ (scale · q_t)`.

`run` gives the op's output and final state as NumPy arrays,
`check_forms` both forms against a reference's, and `check_gradients`
the op's gradients against central finite differences of a reference.
"""

import keras
import numpy as np

from keras_attention import ops as ka_ops
from tests import autodiff

# What the float32 op must meet against the float64 references.
TOLERANCE = 1e-5


def run(args, **kwargs):
    """The op's `(output, final_state)` on `args`, as NumPy arrays."""
    out, state = ka_ops.gated_delta_rule(
        *args, output_final_state=True, **kwargs
    )
    return keras.ops.convert_to_numpy(out), keras.ops.convert_to_numpy(state)


def check_forms(args, expected, chunk_size):
    """Both forms of the op give `expected`, `(output, final_state)`,
    within `TOLERANCE`, and finite gradients of every input."""
    for form in ("chunk", "recurrent"):
        out, state = run(args, form=form, chunk_size=chunk_size)
        np.testing.assert_allclose(out, expected[0], atol=TOLERANCE)
        np.testing.assert_allclose(state, expected[1], atol=TOLERANCE)
        _, grads = autodiff.gradients(
            lambda *xs, form=form: keras.ops.sum(
                ka_ops.gated_delta_rule(*xs, form=form, chunk_size=chunk_size)
            ),
            args,
        )
        assert all(np.isfinite(grad).all() for grad in grads)


def gated_delta_rule(
    query, key, value, g, beta, scale=None, initial_state=None, segment_ids=None
):
    """`(output (B, T, Hv, Dv), final_state (B, Hv, Dk, Dv))`, float64."""
    query, key, value, g, beta = (
        np.asarray(x, np.float64) for x in (query, key, value, g, beta)
    )
    batch, length, heads, depth = query.shape
    value_heads, value_depth = value.shape[2:]
    groups = value_heads // heads
    scale = depth**-0.5 if scale is None else scale
    if initial_state is None:
        states = np.zeros((batch, value_heads, depth, value_depth))
    else:
        states = np.array(initial_state, np.float64)
    output = np.zeros((batch, length, value_heads, value_depth))
    for b in range(batch):
        for h in range(value_heads):
            state = states[b, h]
            for t in range(length):
                if (
                    segment_ids is not None
                    and t > 0
                    and segment_ids[b, t] != segment_ids[b, t - 1]
                ):
                    state = np.zeros_like(state)
                q = query[b, t, h // groups] * scale
                k = key[b, t, h // groups]
                state = state * np.exp(g[b, t, h])
                written = beta[b, t, h] * (value[b, t, h] - state.T @ k)
                state = state + np.outer(k, written)
                output[b, t, h] = state.T @ q
            states[b, h] = state
    return output, states


def kimi_delta_rule(
    query, key, value, g, beta, scale=None, initial_state=None, segment_ids=None
):
    """Kimi Delta Attention (KDA): `g (B, T, Hv, Dk)`, one decay per key
    channel; `(output, final_state)`, float64.

    A transcription of flash-linear-attention's `naive_recurrent_kda`
    (`fla/ops/kda/naive.py`), in its order, all heads at once: the rows
    of `S` (the key channels) decay, `S ← S · exp(g_t)[:, None]`; then
    `S ← S + (β_t k_t) (v_t − Σ_k k_t S)ᵀ`; `o_t = Sᵀ (scale · q_t)`. The
    state is emptied where a document begins (fla packs documents with
    `cu_seqlens`).
    """
    query, key, value, g, beta = (
        np.asarray(x, np.float64) for x in (query, key, value, g, beta)
    )
    batch, length, heads, depth = query.shape
    value_heads, value_depth = value.shape[2:]
    groups = value_heads // heads
    scale = depth**-0.5 if scale is None else scale
    query = np.repeat(query, groups, axis=2) * scale
    key = np.repeat(key, groups, axis=2)
    state = np.zeros((batch, value_heads, depth, value_depth))
    if initial_state is not None:
        state = state + initial_state
    output = np.zeros_like(value)
    for t in range(length):
        if segment_ids is not None and t > 0:
            begins = segment_ids[:, t] != segment_ids[:, t - 1]
            state = np.where(begins[:, None, None, None], 0.0, state)
        q, k, v, b = query[:, t], key[:, t], value[:, t], beta[:, t]
        state = state * np.exp(g[:, t])[..., None]
        remembered = (k[..., None] * state).sum(-2)
        state = state + np.einsum(
            "bhk,bhv->bhkv", b[..., None] * k, v - remembered
        )
        output[:, t] = np.einsum("bhk,bhkv->bhv", q, state)
    return output, state


def inputs(
    rng, batch, length, heads, value_heads, depth, value_depth, channels=False
):
    """Inputs as Gated DeltaNet's layer makes them: unit query and key
    (L2-normalised), decays `g` in `(-1, 0)` (per key channel, as KDA's,
    with `channels`), `beta` in `(0, 1)`; float32."""
    shape = (batch, length, heads, depth)
    query, key = rng.normal(size=shape), rng.normal(size=shape)
    query /= np.linalg.norm(query, axis=-1, keepdims=True)
    key /= np.linalg.norm(key, axis=-1, keepdims=True)
    value = rng.normal(size=(batch, length, value_heads, value_depth))
    g = -rng.uniform(0.0, 1.0, size=(batch, length, value_heads))
    if channels:
        g = -rng.uniform(0.0, 1.0, size=g.shape + (depth,))
    beta = rng.uniform(0.0, 1.0, size=(batch, length, value_heads))
    return [x.astype("float32") for x in (query, key, value, g, beta)]


def finite_differences(fn, args, eps=1e-6):
    """Central differences of the scalar `fn(*args)`, in float64."""
    grads = []
    for i, arg in enumerate(args):
        grad = np.zeros(arg.shape)
        for index in np.ndindex(arg.shape):
            shifted = [np.array(a, np.float64) for a in args]
            shifted[i][index] += eps
            up = fn(*shifted)
            shifted[i][index] -= 2 * eps
            grad[index] = (up - fn(*shifted)) / (2 * eps)
        grads.append(grad)
    return grads


def check_gradients(rng, rule, args, segment_ids, form):
    """The op's gradients of query, key, value, g, beta and the initial
    state (`args`), through a random weighting of the output and the
    final state, against finite differences of `rule` (a NumPy
    reference), in the op's `form` with chunks of 2."""
    weights = rng.normal(size=args[2].shape)  # the output's, the value's
    state_weights = rng.normal(size=args[5].shape)

    def loss(q, k, v, g, beta, state):
        out, final = rule(
            q, k, v, g, beta, initial_state=state, segment_ids=segment_ids
        )
        return np.sum(out * weights) + np.sum(final * state_weights)

    def keras_loss(q, k, v, g, beta, state):
        out, final = ka_ops.gated_delta_rule(
            q,
            k,
            v,
            g,
            beta,
            initial_state=state,
            output_final_state=True,
            segment_ids=segment_ids,
            chunk_size=2,
            form=form,
        )
        return keras.ops.sum(
            out * keras.ops.convert_to_tensor(weights, "float32")
        ) + keras.ops.sum(
            final * keras.ops.convert_to_tensor(state_weights, "float32")
        )

    _, grads = autodiff.gradients(keras_loss, args)
    expected = finite_differences(loss, args)
    for name, grad, want in zip(
        "q k v g beta state".split(), grads, expected, strict=True
    ):
        np.testing.assert_allclose(grad, want, atol=2e-4, err_msg=name)
