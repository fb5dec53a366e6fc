"""An eager JAX call of the block kernel, and of the package's pure
kernels, is compiled once per configuration
(`keras_attention/ops/_eager.py`), and what changes between calls still
reaches it."""

import importlib

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention.ops import mods

fused = importlib.import_module("keras_attention.ops._fused")
logits_ops = importlib.import_module("keras_attention.ops.logits")

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


def test_a_fused_call_at_a_new_length_is_one_compiled_program(rng):
    """Measured: 0.97 s op by op at each new length, 0.24 s through one
    program. The result is the function's own, eager."""
    q = rng.normal(size=(2, 11, 4, 8)).astype("float32")
    kv = rng.normal(size=(2, 11, 2, 8)).astype("float32")
    mask = np.tril(np.ones((11, 11), bool))[None, None]
    (out, lse), compiled = _compiles(
        lambda: fused.fused_attention(q, kv, kv, mask, 0.3, return_lse=True)
    )
    backend = [e for e in compiled if e.endswith("backend_compile_duration")]
    assert len(backend) == 1, compiled
    want, want_lse = fused.fused_attention.__wrapped__(
        q, kv, kv, mask, 0.3, return_lse=True
    )
    np.testing.assert_allclose(out, want, atol=1e-6)
    np.testing.assert_allclose(lse, want_lse, atol=1e-6)


def test_plain_arguments_are_the_key_and_arrays_the_arguments(rng):
    """A second call with other numbers, or another scale, gives its own
    result, not the first call's program with the first call's values."""
    logits = rng.normal(size=(2, 3, 5)).astype("float32")
    for scale in (0.5, 0.5, 2.0):
        q = rng.normal(size=(1, 6, 2, 4)).astype("float32")
        got = fused.fused_attention(q, q, q, None, scale)
        want = fused.fused_attention.__wrapped__(q, q, q, None, scale)
        np.testing.assert_allclose(got, want, atol=1e-6)
    mask = np.ones((2, 3, 5), bool)
    mask[..., -1] = False
    for axis in (-1, 1):
        got = logits_ops.masked_softmax(logits, mask, axis=axis)
        want = logits_ops.masked_softmax.__wrapped__(logits, mask, axis=axis)
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_a_keras_variable_runs_the_function_itself(rng):
    """A variable is neither a key nor an array of the compiled program:
    its current value is read."""
    q = rng.normal(size=(1, 6, 2, 4)).astype("float32")
    scale = keras.Variable(0.5)
    first = fused.fused_attention(q, q, q, None, scale)
    scale.assign(2.0)
    second = fused.fused_attention(q, q, q, None, scale)
    want = fused.fused_attention.__wrapped__(q, q, q, None, 2.0)
    np.testing.assert_allclose(second, want, atol=1e-6)
    assert not np.allclose(first, second)
