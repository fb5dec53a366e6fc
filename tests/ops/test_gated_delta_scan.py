"""The state's scan of the gated delta rule on its own
(`ops/_gated_delta_scan.py`): the states against a NumPy loop, and the
written-out gradient against the backend's own gradient of the same
loop."""

import keras
import numpy as np
import pytest

from keras_attention.ops import _gated_delta_scan
from tests import autodiff


def _inputs(rng, channels):
    """Three steps of two positions, batch 1, two heads, Dk 3, Dv 2."""
    state = rng.normal(size=(1, 2, 3, 2))
    written = rng.normal(size=(3, 1, 2, 2, 2))
    carried = rng.normal(size=(3, 1, 2, 2, 3))
    to_end = rng.normal(size=(3, 1, 2, 2, 3))
    across = rng.uniform(0.2, 1.0, size=(3, 1, 2, 3 if channels else 1, 1))
    return [
        x.astype("float32") for x in (state, written, carried, to_end, across)
    ]


@pytest.mark.parametrize("channels", [False, True])
def test_states_equal_a_numpy_loop(rng, channels):
    state, written, carried, to_end, across = _inputs(rng, channels)
    expected = [state.astype(np.float64)]
    for u, w, k, a in zip(written, carried, to_end, across, strict=True):
        s = expected[-1]
        expected.append(a * s + np.swapaxes(k, -1, -2) @ (u - w @ s))
    states = _gated_delta_scan.state_scan(
        *(
            keras.ops.convert_to_tensor(x)
            for x in (state, written, carried, to_end, across)
        )
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(states), np.stack(expected), atol=1e-5
    )


@pytest.mark.parametrize("channels", [False, True])
def test_written_out_gradient_equals_the_backends(rng, channels):
    args = _inputs(rng, channels)
    # The stacked states and writes of the three steps `(3, …, 3 + 2, 2)`,
    # and the state after the last, computed outside the loop from them.
    weights = keras.ops.convert_to_tensor(
        rng.normal(size=(3, 1, 2, 5, 2)).astype("float32")
    )
    last = keras.ops.convert_to_tensor(
        rng.normal(size=(1, 2, 3, 2)).astype("float32")
    )

    def loss(scan):
        # Tensors, as the op passes them, not the variables `gradients`
        # makes (a custom gradient on TensorFlow would have to name them).
        def fn(*xs):
            xs = [keras.ops.cast(x, "float32") for x in xs]
            solved = keras.ops.concatenate(xs[1:3], axis=-1)
            stacked = scan(xs[0], solved, *xs[3:])
            final = _gated_delta_scan.final_state(stacked, *xs[3:])
            return keras.ops.sum(stacked * weights) + keras.ops.sum(
                final * last
            )

        return fn

    _, written_out = autodiff.gradients(loss(_gated_delta_scan.step_scan), args)
    _, automatic = autodiff.gradients(loss(_gated_delta_scan._forward), args)
    for name, got, want in zip(
        "state written carried to_end across".split(),
        written_out,
        automatic,
        strict=True,
    ):
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=name)


@pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="JAX's trace and compile cache"
)
def test_a_repeated_eager_call_traces_and_compiles_nothing(rng):
    """JAX caches a scan's loop by its step function: with steps that are
    module functions, not closures made on each call, decoding token by
    token outside `jit` reuses the compiled loop (measured: 0.20 s a call
    at T = 9 with closures, 0.004 s without)."""
    from jax import monitoring

    import keras_attention

    q = rng.normal(size=(1, 9, 2, 4)).astype("float32")
    g = -rng.uniform(size=(1, 9, 2)).astype("float32")
    beta = rng.uniform(size=(1, 9, 2)).astype("float32")
    events = []

    def record(name, seconds, **kwargs):
        events.append(name)

    keras_attention.ops.gated_delta_rule(q, q, q, g, beta, chunk_size=4)
    monitoring.register_event_duration_secs_listener(record)
    try:
        keras_attention.ops.gated_delta_rule(q, q, q, g, beta, chunk_size=4)
    finally:
        monitoring.unregister_event_duration_listener(record)
    assert not [e for e in events if e.startswith("/jax/core/compile/")]
