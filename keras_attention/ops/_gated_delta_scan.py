"""The gated delta rule's state, carried from step to step, with its
gradient written out (private; `keras_attention.ops.gated_delta_rule`).

Both forms of the op reduce to one linear recurrence over the steps (the
chunks of the chunked form, the positions of the recurrent one):

    v_c = u_c − w_c S_c
    S_{c+1} = a_c ∘ S_c + k_cᵀ v_c

(`u`, `w`, `k` `(…, C, ·)` per step, `a` the decay of the state's rows,
`(…, 1, 1)` or `(…, Dk, 1)`). The loop gives, per step, the state before
it and the step's writes `v_c`, stacked as one tensor `[S_c; v_c]`: the
chunked form reads its outputs from both with one product, and nothing
outside the loop computes `v_c` again. Its gradient is another linear
recurrence, run backwards: with `λ_c` the gradient of the loss with
respect to `S_c` and `Ḡ_c`, `V̄_c` those of the outputs `S_c`, `v_c`,

    v̄_c = V̄_c + k_c λ_{c+1}
    λ_c = Ḡ_c + a_c ∘ λ_{c+1} − w_cᵀ v̄_c

and the gradients of `u` (`v̄`), `w`, `k` and `a` follow from the `λ`s
and `v̄`s all steps at once. Written out, the backward pass is one
`keras.ops.scan` of its own instead of the gradient of the forward one:
TensorFlow's XLA bridge does not compile the gradient of a
`tf.while_loop` without a maximum number of iterations (Keras's `scan`
sets none), so without it training under `jit_compile=True` fails on
TensorFlow.
"""

from keras import ops


def _transpose(x):
    return ops.swapaxes(x, -1, -2)


# The steps are module functions, not closures: JAX caches a scan's traced
# and compiled loop by its step function, so an eager call (a layer called
# outside `jit`, decoding token by token) reuses them instead of tracing
# and compiling the loop again on every call. A step's outputs have the
# structure and shapes of its carry (TensorFlow's `scan` in Keras keeps as
# many outputs as carries, of their shapes): the carry holds the writes of
# the step before beside the state. The steps take `[u, w]` whole and cut
# their own chunk's halves, and transpose their own `k` and `w`: views on
# PyTorch, folded into the products by XLA, where halves and transposes
# made for all steps at once were copies kept for the backward pass (2
# MiB at T = 2048, 4 heads of 64; BENCHMARKS.md, "Gated DeltaNet"). They
# multiply with the tensors' own `@` (`keras.ops.matmul` on PyTorch,
# which runs the loop eagerly, spends about 50 µs a call on dtype checks,
# more than a `64 x 64` product; the operands are of one float dtype).
def _forward_step(carry, inputs):
    solved, k, a = inputs
    state = carry[0]
    depth = state.shape[-1]
    v = solved[..., :depth] - solved[..., depth:] @ state
    return (state * a + _transpose(k) @ v, v), (state, v)


def _backward_step(carry, inputs):
    up_state, up_writes, solved, k, a = inputs
    later = carry[0]
    w_t = _transpose(solved[..., up_writes.shape[-1] :])
    d_writes = up_writes + k @ later
    earlier = up_state + later * a - w_t @ d_writes
    return (earlier, d_writes), (later, d_writes)


def _forward(state, solved, to_end, across):
    carry = (state, ops.zeros_like(solved[0, ..., : state.shape[-1]]))
    steps = (solved, to_end, across)
    states, writes = ops.scan(_forward_step, carry, steps)[1]
    return ops.concatenate([states, writes], axis=-2)


def _backward(upstream, stacked, solved, to_end, across):
    """The gradients of `step_scan`'s inputs, given `upstream`, the
    gradient of its output `stacked`."""
    depth = to_end.shape[-1]
    (first, _), (laters, d_written) = ops.scan(
        _backward_step,
        (
            ops.zeros_like(stacked[0, ..., :depth, :]),
            upstream[0, ..., depth:, :],
        ),
        (
            upstream[..., :depth, :],
            upstream[..., depth:, :],
            solved,
            to_end,
            across,
        ),
        reverse=True,
    )
    before, writes = stacked[..., :depth, :], stacked[..., depth:, :]
    d_carried = -ops.matmul(d_written, _transpose(before))
    d_solved = ops.concatenate([d_written, d_carried], axis=-1)
    d_to_end = ops.matmul(writes, _transpose(laters))
    d_across = ops.sum(before * laters, axis=-1, keepdims=True)
    if across.shape[-2] == 1:
        d_across = ops.sum(d_across, axis=-2, keepdims=True)
    return first, d_solved, d_to_end, d_across


@ops.custom_gradient
def step_scan(state, solved, to_end, across):
    """The state before each step and the step's writes.

    Args:
        state: `(…, Dk, Dv)`, the state before the first step.
        solved: `(steps, …, C, Dv + Dk)`, `[u, w]`.
        to_end: `(steps, …, C, Dk)`, `k`.
        across: `(steps, …, 1, 1)` or `(steps, …, Dk, 1)`, `a`.

    Returns:
        `(steps, …, Dk + C, Dv)`: `[S_c; v_c]` for each step `c`, the
        state before the step over its writes (`final_state` gives the
        state after the last).
    """
    stacked = _forward(state, solved, to_end, across)

    def grad(*args, upstream=None):
        # TensorFlow and JAX pass the upstream gradient alone, PyTorch the
        # inputs and `upstream=`.
        if upstream is None:
            (upstream,) = args
        return _backward(upstream, stacked, solved, to_end, across)

    return stacked, grad


def final_state(stacked, to_end, across):
    """`S_steps`, the state after the last step, of `step_scan`'s output
    and inputs (differentiated by the backend: no loop)."""
    depth = to_end.shape[-1]
    last, k, a = stacked[-1], to_end[-1], across[-1]
    # `@`, not `keras.ops.matmul`: decoding calls this once a token.
    return last[..., :depth, :] * a + _transpose(k) @ last[..., depth:, :]


def state_scan(state, written, carried, to_end, across):
    """The state before each step and after the last.

    Args: as `step_scan`, with `[u, w]` in its halves, `written (steps,
    …, C, Dv)` and `carried (steps, …, C, Dk)`.

    Returns:
        `(steps + 1, …, Dk, Dv)`: `S_0`, ..., `S_steps`.
    """
    if written.shape[0] == 1:
        # One step, decoding a token: no loop, whose set-up on PyTorch's
        # eager `scan` costs more than the step (the backend
        # differentiates it).
        writes = written[0] - carried[0] @ state
        final = state * across[0] + _transpose(to_end[0]) @ writes
        return ops.stack([state, final])
    solved = ops.concatenate([written, carried], axis=-1)
    stacked = step_scan(state, solved, to_end, across)
    depth = state.shape[-2]
    final = final_state(stacked, to_end, across)
    return ops.concatenate([stacked[..., :depth, :], final[None]], axis=0)
