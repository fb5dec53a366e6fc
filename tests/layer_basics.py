"""The "basics" every keras_attention layer must pass.

`check_layer_basics` builds a layer, calls it eagerly and symbolically,
checks output shapes and weight counts, round-trips `get_config` /
`from_config` and a `.keras` file (safe mode, no `custom_objects`), runs one
training step and a mixed-precision call. Layer tests call it once per
interesting configuration and add their own numerical checks.

The small NumPy helpers those checks share live here too: `to_np`,
`np_softmax` and `normal_arrays` (a module's constant data), and
`quick_collections` for the tests that quantize. Seeded data for
one test comes from the `rng` and `rand` fixtures in `tests/conftest.py`.
"""

import contextlib
import gc
import os
import tempfile

import keras
import numpy as np
from keras import tree


@contextlib.contextmanager
def quick_collections():
    """Garbage collections inside the block scan only its new objects.

    Keras runs `gc.collect()` after each variable a layer deletes, which
    `model.quantize` does for every kernel it replaces: about 0.2 s each
    over a test session's heap, more as a lane goes on (the every-layer
    model's 97 took 18.8 s of its 22 s test). `gc.freeze()` sets the
    older objects aside until the block ends; they are collected as usual
    after it.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _finite(name, arrays):
    for i, a in enumerate(_as_list(arrays)):
        a = keras.ops.convert_to_numpy(a).astype("float32")
        assert np.all(np.isfinite(a)), f"{name}: output {i} has NaN or inf"


def _model_for(layer, inputs, call_kwargs):
    symbolic = [
        keras.Input(shape=x.shape[1:], dtype=str(x.dtype)) for x in inputs
    ]
    outputs = layer(*symbolic, **call_kwargs)
    return keras.Model(symbolic, outputs)


def check_layer_basics(
    layer_cls,
    init_kwargs,
    inputs,
    call_kwargs=None,
    expected_output_shape=None,
    expected_num_trainable_weights=None,
    expected_num_non_trainable_weights=0,
    run_training=True,
    run_mixed_precision=True,
    rtol=1e-5,
    atol=1e-5,
):
    """Runs the shared layer checks; raises `AssertionError` on failure.

    Args:
        layer_cls: The layer class.
        init_kwargs: Constructor keyword arguments.
        inputs: One NumPy array or a list of them, passed positionally.
        call_kwargs: Extra call keyword arguments (must be Python values).
        expected_output_shape: A shape or a list of shapes (one per output).
        expected_num_trainable_weights: Expected `len(trainable_weights)`.
        expected_num_non_trainable_weights: Expected number of
            non-trainable weights. Defaults to `0`.
        run_training: Whether to fit one step on random targets.
        run_mixed_precision: Whether to call under `mixed_float16`.
    """
    inputs = _as_list(inputs)
    call_kwargs = dict(call_kwargs or {})
    name = layer_cls.__name__

    # Eager call, shapes, finiteness.
    layer = layer_cls(**init_kwargs)
    eager = layer(*inputs, **call_kwargs)
    _finite(name, eager)
    if expected_output_shape is not None:
        got = [tuple(o.shape) for o in _as_list(eager)]
        want = [tuple(s) for s in _as_list_of_shapes(expected_output_shape)]
        assert got == want, f"{name}: output shapes {got} != {want}"
    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights, (
            f"{name}: {len(layer.trainable_weights)} trainable weights, "
            f"expected {expected_num_trainable_weights}"
        )
    assert (
        len(layer.non_trainable_weights) == expected_num_non_trainable_weights
    )

    # Config round trip gives the same layer (same outputs with same weights).
    config = layer.get_config()
    clone = layer_cls.from_config(config)
    assert clone.get_config() == config, f"{name}: config changed"
    clone(*inputs, **call_kwargs)
    clone.set_weights(layer.get_weights())
    _assert_close(name, clone(*inputs, **call_kwargs), eager, rtol, atol)

    # Symbolic call in a functional model; .keras save/load in safe mode.
    model = _model_for(layer, inputs, call_kwargs)
    for out, want in zip(_as_list(model.outputs), _as_list(eager), strict=True):
        assert tuple(out.shape[1:]) == tuple(want.shape[1:]), (
            f"{name}: symbolic shape {out.shape} vs eager {want.shape}"
        )
    predicted = model.predict(inputs, verbose=0)
    _assert_close(name, predicted, eager, rtol, atol)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path, safe_mode=True)
    # Called, not `predict`ed: `predict` above already ran the compiled
    # path, and on JAX a second `predict` compiles the loaded model again.
    reloaded = loaded(inputs if len(inputs) > 1 else inputs[0])
    _assert_close(name, reloaded, eager, rtol, atol)

    if run_training:
        _check_training_step(name, model, inputs)
    if run_mixed_precision:
        _check_mixed_precision(layer_cls, init_kwargs, inputs, call_kwargs)
    return layer


def _as_list_of_shapes(shapes):
    if isinstance(shapes, tuple) and all(
        isinstance(d, (int, type(None))) for d in shapes
    ):
        return [shapes]
    return list(shapes)


def _assert_close(name, got, want, rtol, atol):
    got, want = _as_list(got), _as_list(want)
    assert len(got) == len(want), f"{name}: {len(got)} vs {len(want)} outputs"
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(g),
            keras.ops.convert_to_numpy(w),
            rtol=rtol,
            atol=atol,
            err_msg=name,
        )


def _check_training_step(name, model, inputs):
    rng = np.random.default_rng(0)
    targets = [
        rng.normal(size=tuple(o.shape)).astype("float32")
        for o in _as_list(model.predict(inputs, verbose=0))
    ]
    if not model.trainable_weights:
        return
    before = model.get_weights()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    history = model.fit(
        inputs,
        targets if len(targets) > 1 else targets[0],
        epochs=1,
        batch_size=len(inputs[0]),
        verbose=0,
    )
    loss = history.history["loss"][-1]
    assert np.isfinite(loss), f"{name}: training loss {loss}"
    after = model.get_weights()
    changed = any(
        not np.allclose(a, b) for a, b in zip(before, after, strict=True)
    )
    assert changed, f"{name}: one training step changed no weight"


def _check_mixed_precision(layer_cls, init_kwargs, inputs, call_kwargs):
    name = layer_cls.__name__
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        layer = layer_cls(**init_kwargs)
        outputs = layer(*inputs, **call_kwargs)
    finally:
        keras.config.set_dtype_policy(previous)
    _finite(f"{name} (mixed_float16)", outputs)
    for out in tree.flatten(outputs):
        dtype = keras.backend.standardize_dtype(out.dtype)
        if dtype.startswith("float"):
            assert dtype == "float16", f"{name}: mixed output dtype {dtype}"


def to_np(x):
    """A NumPy array of a tensor of any backend."""
    return keras.ops.convert_to_numpy(x)


def np_softmax(x, axis=-1):
    """The NumPy reference softmax along `axis`."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def randomize_weights(layer, rng, scale=0.5):
    """Assigns every weight of the built `layer` normal draws of `rng`
    (a reference layer's weights, none left at their initial values)."""
    for variable in layer.weights:
        value = rng.normal(scale=scale, size=variable.shape)
        variable.assign(value.astype("float32"))


def normal_arrays(seed, *shapes):
    """Float32 standard-normal arrays of `shapes`, drawn in turn from one
    generator seeded with `seed`: constant data that a module's tests share.

    A test that needs more draws takes the `rng` or `rand` fixture, so its
    data does not depend on the tests that ran before it.
    """
    rng = np.random.default_rng(seed)
    return [rng.normal(size=shape).astype("float32") for shape in shapes]
