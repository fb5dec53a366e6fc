"""The gated delta rule's state, carried from step to step, with its
gradient written out (private; `keras_attention.ops.gated_delta_rule`).

Both forms of the op reduce to one linear recurrence over the steps (the
chunks of the chunked form, the positions of the recurrent one):

    v_c = u_c − w_c S_c
    S_{c+1} = a_c ∘ S_c + k_cᵀ v_c

(`u`, `w`, `k` `(…, C, ·)` per step, `a` the decay of the state's rows,
`(…, 1, 1)` or `(…, Dk, 1)`). Its gradient is another linear recurrence,
run backwards: with `λ_c` the gradient of the loss with respect to `S_c`,

    λ_c = Ḡ_c + a_c ∘ λ_{c+1} − w_cᵀ (k_c λ_{c+1})

and the gradients of `u`, `w`, `k` and `a` follow from the `λ`s all steps
at once. Written out, the backward pass is one `keras.ops.scan` of its
own instead of the gradient of the forward one: TensorFlow's XLA bridge
does not compile the gradient of a `tf.while_loop` without a maximum
number of iterations (Keras's `scan` sets none), so without it training
under `jit_compile=True` fails on TensorFlow.
"""

from keras import ops


def _transpose(x):
    return ops.swapaxes(x, -1, -2)


# The steps are module functions, not closures: JAX caches a scan's traced
# and compiled loop by its step function, so an eager call (a layer called
# outside `jit`, decoding token by token) reuses them instead of tracing
# and compiling the loop again on every call.
def _forward_step(state, inputs):
    u, w, k, a = inputs
    v = u - ops.matmul(w, state)
    return state * a + ops.matmul(_transpose(k), v), state


def _backward_step(later, inputs):
    ups, w, k, a = inputs
    back = ops.matmul(_transpose(w), ops.matmul(k, later))
    return ups + later * a - back, later


def _forward(state, written, carried, to_end, across):
    steps = (written, carried, to_end, across)
    final, states = ops.scan(_forward_step, state, steps)
    return ops.concatenate([states, final[None]], axis=0)


def _backward(upstream, states, written, carried, to_end, across):
    """The gradients of `state_scan`'s inputs, given `upstream`, the
    gradient of its output."""
    first, laters = ops.scan(
        _backward_step,
        upstream[-1],
        (upstream[:-1], carried, to_end, across),
        reverse=True,
    )
    before = states[:-1]
    d_written = ops.matmul(to_end, laters)
    d_carried = -ops.matmul(d_written, _transpose(before))
    v = written - ops.matmul(carried, before)
    d_to_end = ops.matmul(v, _transpose(laters))
    d_across = ops.sum(before * laters, axis=-1, keepdims=True)
    if across.shape[-2] == 1:
        d_across = ops.sum(d_across, axis=-2, keepdims=True)
    return first, d_written, d_carried, d_to_end, d_across


@ops.custom_gradient
def state_scan(state, written, carried, to_end, across):
    """The state before each step and after the last.

    Args:
        state: `(…, Dk, Dv)`, the state before the first step.
        written: `(steps, …, C, Dv)`, `u`.
        carried: `(steps, …, C, Dk)`, `w`.
        to_end: `(steps, …, C, Dk)`, `k`.
        across: `(steps, …, 1, 1)` or `(steps, …, Dk, 1)`, `a`.

    Returns:
        `(steps + 1, …, Dk, Dv)`: `S_0`, ..., `S_steps`.
    """
    states = _forward(state, written, carried, to_end, across)

    def grad(*args, upstream=None):
        # TensorFlow and JAX pass the upstream gradient alone, PyTorch the
        # inputs and `upstream=`.
        if upstream is None:
            (upstream,) = args
        return _backward(upstream, states, written, carried, to_end, across)

    return states, grad
