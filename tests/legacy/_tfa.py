"""Helpers of the `attention` and tfa.seq2seq comparisons (tests/legacy).

- `import_tfa()`: tensorflow-addons 0.23 beside Keras 3 (a shim, below).
- `guide_block(guide, check)`: runs a migration guide's `<!-- check: -->`
  block (Keras 3) and returns its variables, so a test can load the
  block's stand-in weights into the old layer itself and compare: the
  guide's port, as written, against the real package.
- `port_mechanism(old, new)`: copies a tfa mechanism's weights into ours
  the way the weight table of docs/migration/tfa-seq2seq.md says.
"""

import contextlib
import sys
import warnings

import numpy as np

from tests.test_migration_docs import BLOCKS


def import_tfa():
    """`tensorflow_addons`, imported beside Keras 3.

    tfa 0.23's `utils/types.py` does `from keras.src.engine import
    keras_tensor`, Keras 2's layout: with Keras 3 installed as `keras`
    that module does not exist. For the import only, `keras.src.engine`
    points at tf_keras's (the Keras 2 that `tf.keras` is under
    `TF_USE_LEGACY_KERAS=1`); `sys.modules` is restored afterwards, so
    Keras 3 (`import keras`, our layers) never sees the alias.
    """
    import tf_keras.src.engine as engine
    import tf_keras.src.engine.keras_tensor as keras_tensor

    aliases = {
        "keras.src.engine": engine,
        "keras.src.engine.keras_tensor": keras_tensor,
    }
    saved = {name: sys.modules.get(name) for name in aliases}
    sys.modules.update(aliases)
    try:
        with warnings.catch_warnings():
            # The end-of-life and TF-version notices.
            warnings.simplefilter("ignore", UserWarning)
            import tensorflow_addons as tfa
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    # Its compiled ops (gather_tree) were built for TensorFlow 2.15 and
    # do not load in 2.21; tfa then falls back to its Python versions,
    # with a warning that this makes explicit.
    tfa.options.disable_custom_kernel()
    return tfa


def guide_block(guide, check):
    """The variables left by the block `<!-- check: check -->` of `guide`."""
    (block,) = [
        b for b in BLOCKS if b["guide"] == guide and b["check"] == check
    ]
    namespace = {}
    exec(compile(block["code"], f"{guide}:{block['line']}", "exec"), namespace)
    return namespace


def numpy(x):
    """A NumPy array from a TF (tf_keras) or Keras 3 tensor."""
    import keras

    if hasattr(x, "numpy"):
        return x.numpy()
    return keras.ops.convert_to_numpy(x)


def randomize(variables, rng, scale=0.5):
    """Sets each tf_keras variable to random values (none keeps its init,
    so a weight the port forgets shows)."""
    for variable in variables:
        shape = tuple(variable.shape)
        value = rng.normal(scale=scale, size=shape).astype("float32")
        variable.assign(value)


def tfa_weights(old):
    """A tfa mechanism's weights by the names of the guide's table."""
    weights = {}
    for name in ("query_layer", "memory_layer"):
        layer = getattr(old, name, None)
        if layer is not None:
            weights[f"{name}/kernel"] = layer.kernel.numpy()
    for name in ("attention_v", "attention_b", "attention_score_bias"):
        variable = getattr(old, name, None)
        if variable is not None:
            weights[name] = variable.numpy()
    # LuongAttention keeps its `attention_g` as `scale_weight`.
    g = getattr(old, "attention_g", None)
    if g is None:
        g = getattr(old, "scale_weight", None)
    if g is not None:
        weights["attention_g"] = g.numpy()
    return weights


def port_mechanism(old, new):
    """Copies tfa mechanism `old` into our built mechanism `new`, as the
    weight table of docs/migration/tfa-seq2seq.md says."""
    weights = tfa_weights(old)
    ours = {w.path.split(f"{new.name}/", 1)[1]: w for w in new.weights}
    values = {}
    if "query_layer/kernel" in weights:  # Bahdanau's
        values["score/query_kernel"] = weights["query_layer/kernel"]
        values["score/key_kernel"] = weights["memory_layer/kernel"]
        values["score/v"] = weights["attention_v"]
        if "attention_b" in weights:  # normalize=True
            values["score/bias"] = weights["attention_b"]
            values["score/g"] = weights["attention_g"]
    else:  # Luong's: the memory kernel transposed
        kernel = weights["memory_layer/kernel"].T
        if "attention_g" in weights:
            if "g" in ours:  # LuongMonotonicAttention(scale=True): its g
                values["g"] = weights["attention_g"]
            else:  # LuongAttention(scale=True): folded into the kernel
                kernel = weights["attention_g"] * kernel
        values["score/kernel"] = kernel
    if "attention_score_bias" in weights:  # the monotonic mechanisms
        values["score_bias"] = weights["attention_score_bias"]
    assert sorted(values) == sorted(ours), (sorted(values), sorted(ours))
    for path, value in values.items():
        ours[path].assign(np.asarray(value, "float32"))


def sequence_mask(lengths, max_length):
    """`tf.sequence_mask` in NumPy: what tfa built from the lengths."""
    return np.arange(max_length)[None, :] < np.asarray(lengths)[:, None]


@contextlib.contextmanager
def numpy_inf_alias():
    """`np.Inf` while tfa's `BeamSearchDecoder` runs.

    Its `initialize` writes `-np.Inf`, an alias NumPy 2 removed (the
    legacy environment has NumPy 2, as TensorFlow 2.21 wants); the alias
    exists only inside the `with`.
    """
    had = "Inf" in np.__dict__
    np.Inf = np.inf
    try:
        yield
    finally:
        if not had:
            del np.Inf
