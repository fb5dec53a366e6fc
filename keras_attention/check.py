"""Is my install fine? `python -m keras_attention.check`, in seconds.

It prints the versions in use, then checks on the installed Keras backend
that

- `ops.masked_softmax` and `Attention` agree with NumPy written from the
  formulas (weights sum to 1 over the unmasked keys, 0 on masked ones);
- a functional model with every layer family of the package runs, trains
  one step to a finite loss, saves to `.keras` and loads back in safe mode,
  without `custom_objects`, with the same predictions.

Each check prints `ok` or `FAIL` with the reason; the exit status is 0 when
all pass and 1 otherwise. The test suite (see the README) checks far more.
"""

import os
import sys
import tempfile

import keras
import numpy as np

import keras_attention
from keras_attention import seq2seq
from keras_attention.models import cli

_ATOL = 1e-5


def _softmax_agrees_with_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype("float32")
    mask = rng.random((2, 3, 5)) > 0.3
    mask[:, :, 0] = True
    got = keras.ops.convert_to_numpy(
        keras_attention.ops.masked_softmax(logits, mask)
    )
    e = np.exp(logits - logits.max(-1, keepdims=True)) * mask
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), atol=_ATOL)
    np.testing.assert_array_equal(got[~mask], 0, "weight on a masked key")


def _attention_agrees_with_numpy():
    rng = np.random.default_rng(1)
    q = rng.normal(size=(2, 3, 4)).astype("float32")
    v = rng.normal(size=(2, 6, 4)).astype("float32")
    value_mask = np.arange(6)[None] < np.array([[6], [2]])
    layer = keras_attention.Attention(score="scaled_dot")
    context, weights = layer(
        q, v, value_mask=value_mask, return_attention_scores=True
    )
    logits = q @ v.transpose(0, 2, 1) / np.sqrt(4)
    e = np.exp(logits - logits.max(-1, keepdims=True)) * value_mask[:, None]
    expected = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(weights), expected, atol=_ATOL
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(context), expected @ v, atol=_ATOL
    )


def _every_layer_model():
    keras.utils.set_random_seed(0)
    ids = keras.Input((6,), dtype="int32")
    x = keras.layers.Embedding(20, 8, mask_zero=True)(ids)
    h = keras_attention.SelfAttention(num_heads=2)(x)
    h = keras_attention.MultiHeadAttention(num_heads=2, key_dim=4)(h, x)
    context = keras_attention.Attention(score="additive")(h, x)
    hard = keras_attention.HardAttention(score="bilinear")(h, x)
    cell = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(8), seq2seq.BahdanauAttention(8)
    )
    decoded = seq2seq.AttentionDecoder(cell)(context, x)
    pooled = keras_attention.StructuredSelfAttention(
        units=4, num_hops=2, penalty_coefficient=0.1
    )(keras.layers.Concatenate()([context, hard, decoded]))
    output = keras.layers.Dense(2, activation="softmax")(pooled)
    return keras.Model(ids, output)


def _every_layer_trains_saves_and_loads():
    model = _every_layer_model()
    ids = np.random.default_rng(2).integers(1, 20, size=(4, 6))
    ids[0, 3:] = 0
    labels = np.array([0, 1, 0, 1])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    loss = model.train_on_batch(ids, labels)
    np.testing.assert_(np.isfinite(loss), f"loss {loss}")
    expected = model.predict(ids, verbose=0)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(
        loaded.predict(ids, verbose=0), expected, atol=_ATOL
    )


CHECKS = {
    "masked_softmax agrees with NumPy": _softmax_agrees_with_numpy,
    "Attention agrees with NumPy": _attention_agrees_with_numpy,
    "every layer trains, saves and loads": _every_layer_trains_saves_and_loads,
}


def main() -> int:
    """Runs every check; returns the exit status (0: all passed)."""
    # Keras imports TensorFlow whenever it is installed, on any backend,
    # to seed it and when it saves a model; quietly here, as the example
    # scripts do, so that its C++ log lines do not print on JAX or PyTorch.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    cli.import_tensorflow()
    print(
        f"keras_attention {keras_attention.__version__}, keras "
        f"{keras.__version__}, backend {keras.backend.backend()}, "
        f"python {sys.version.split()[0]}"
    )
    failed = 0
    for name, check in CHECKS.items():
        try:
            check()
        except Exception as error:  # noqa: BLE001 - reported, then counted
            failed += 1
            print(f"FAIL {name}: {type(error).__name__}: {error}")
        else:
            print(f"ok   {name}")
    print("all checks passed" if not failed else f"{failed} checks failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
