"""Gradients in tests, the same way on every Keras backend.

`gradients(fn, sources)` differentiates a scalar `fn(*sources)` with
`tf.GradientTape`, `jax.value_and_grad` or `torch.autograd`, whichever
backend Keras runs on, so a test that checks gradients runs in every lane.
"""

import keras
import numpy as np


def _as_variable(source):
    if isinstance(source, keras.Variable):
        return source
    return keras.Variable(np.asarray(source), trainable=True)


def _to_numpy(grads, variables):
    # An unconnected source has no gradient on TensorFlow / PyTorch and a
    # zero one on JAX; report zeros everywhere.
    return [
        np.zeros(v.shape, v.dtype)
        if g is None
        else keras.ops.convert_to_numpy(g)
        for g, v in zip(grads, variables, strict=True)
    ]


def gradients(fn, sources, jit: bool = True):
    """The value of `fn(*sources)` and its gradients w.r.t. `sources`.

    Args:
        fn: A function of the sources returning a scalar tensor. Layers it
            calls must already be built (JAX traces `fn`).
        sources: Arrays (turned into trainable `keras.Variable`s, which
            `fn` receives) or `keras.Variable`s (passed as they are, e.g. a
            layer's `trainable_variables`).
        jit: On JAX, whether to differentiate under `jax.jit`: one compile
            for the whole function instead of one per operation, about half
            the time for a new shape. A loop that calls `gradients` with a
            new `fn` each step passes `False` (each call would compile).

    Returns:
        `(value, grads)`: the value as a NumPy scalar and one NumPy array
        per source, zeros where `fn` does not depend on the source.
    """
    variables = [_as_variable(s) for s in sources]
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            value = fn(*variables)
        grads = tape.gradient(value, [v.value for v in variables])
    elif backend == "jax":
        import jax

        def pure(values):
            mapping = list(zip(variables, values, strict=True))
            with keras.StatelessScope(state_mapping=mapping):
                return fn(*variables)

        value_and_grad = jax.value_and_grad(pure)
        if jit:
            value_and_grad = jax.jit(value_and_grad)
        value, grads = value_and_grad([v.value for v in variables])
    elif backend == "torch":
        import torch

        tensors = [v.value for v in variables]
        value = fn(*variables)
        grads = torch.autograd.grad(value, tensors, allow_unused=True)
    else:
        raise NotImplementedError(f"No gradients on backend {backend!r}.")
    return keras.ops.convert_to_numpy(value), _to_numpy(grads, variables)


def assert_same_gradients(fn, reference, sources, atol=2e-5, names="qkv"):
    """`fn` and `reference` have the same gradients w.r.t. `sources`
    (query, key and value by default), each compared to `atol`."""
    _, got = gradients(fn, sources)
    _, want = gradients(reference, sources)
    for name, g, w in zip(names, got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=atol, err_msg=name)
