"""An eager JAX call of the block kernel is compiled once per
configuration (`keras_attention/ops/_eager.py`), and what changes
between calls still reaches it."""

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention.ops import mods

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="JAX's eager compile cache"
)


def _compiles(fn):
    """`fn()` and the names of the compile events it caused."""
    from jax import monitoring

    events = []

    def record(name, seconds, **kwargs):
        events.append(name)

    monitoring.register_event_duration_secs_listener(record)
    try:
        result = fn()
    finally:
        monitoring.unregister_event_duration_listener(record)
    return result, [e for e in events if e.startswith("/jax/core/compile/")]


def test_a_repeated_chunked_layer_call_compiles_nothing(rng):
    """Measured: 1.4-2.2 s a repeated call before (its loops compiled
    again), 0.014-0.02 s after. The padding mask is an argument of the
    compiled kernel, not a constant of its first call."""
    x = rng.normal(size=(2, 12, 8)).astype("float32")
    chunked = keras_attention.MultiHeadAttention(2, 4, chunk_size=4)
    dense = keras_attention.MultiHeadAttention(2, 4)
    first, second = np.ones((2, 12), bool), np.ones((2, 12), bool)
    second[1, 7:] = False
    kwargs = dict(use_causal_mask=True, score_mod=mods.soft_cap(3.0))
    chunked(x, x, value_mask=first, **kwargs)
    dense(x, x)
    dense.set_weights(chunked.get_weights())
    out, compiled = _compiles(
        lambda: chunked(x, x, value_mask=second, **kwargs)
    )
    assert compiled == []
    want = dense(x, x, value_mask=second, **kwargs)
    np.testing.assert_allclose(out, want, atol=1e-5)


def test_the_users_mask_mod_is_read_on_every_call(rng):
    """A function of the user's is no key (its closure may change between
    calls): each call runs its own mod."""
    q = rng.normal(size=(1, 12, 2, 4)).astype("float32")

    def within(window):
        return lambda b, h, q_idx, kv_idx: abs(q_idx - kv_idx) <= window

    for window in (1, 3):
        got = keras_attention.ops.flex_attention(
            q, q, q, mask_mod=within(window), chunk_size=4
        )
        want = keras_attention.ops.flex_attention(
            q, q, q, mask_mod=mods.band(window, window)
        )
        np.testing.assert_allclose(got, want, atol=1e-5)
