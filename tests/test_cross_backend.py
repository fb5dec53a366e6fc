"""A model with every layer, saved under one backend, loaded under another.

The parent (the TensorFlow lane) builds a functional model that uses every
layer and score of the library, saves it to `.keras` and runs `predict`; a
child process with `KERAS_BACKEND=jax` loads it after a bare
`import keras_attention`, with `safe_mode=True` and no `custom_objects`, and
predicts on the same inputs. The child also builds the same model under JAX
and saves it, and the parent loads that one under TensorFlow: both
directions must reproduce the saving backend's outputs.

The child first loads a `seq2seq.Translator` the parent saved: a subclassed
model is registered by the bare `import keras_attention`, in a process
that has built nothing else.

The child is this module itself: `python -m tests.test_cross_backend DIR`,
run from the repository root.
"""

import importlib.util
import os
import sys

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention import seq2seq
from tests import subprocesses

SOURCE_LENGTH = 6
TARGET_LENGTH = 5
VOCAB = 13
DEPTH = 8
# Above the child's usual ~20 s on 2 busy cores, far below a hang.
CHILD_TIMEOUT_S = 240
RTOL = ATOL = 1e-5

pytestmark = [
    pytest.mark.heavy,
    # The parent saves under TensorFlow; the JAX side runs in the child.
    pytest.mark.tensorflow_only,
    pytest.mark.skipif(
        importlib.util.find_spec("jax") is None,
        reason="needs JAX installed to load the model under the JAX backend",
    ),
]


def _inputs():
    """Token ids with padding at the end (id 0), and a memory."""
    rng = np.random.default_rng(7)
    # Distinct tokens in a row: equal tokens get equal states (there is no
    # position encoding), an exact tie for hard attention.
    source = np.stack(
        [rng.permutation(np.arange(1, VOCAB))[:SOURCE_LENGTH] for _ in "abc"]
    ).astype("int32")
    source[0, 4:] = 0
    source[2, 2:] = 0
    target = rng.integers(1, VOCAB, size=(3, TARGET_LENGTH)).astype("int32")
    target[1, 3:] = 0
    return {"source": source, "target": target}


def build_model():
    """A functional model that uses every layer and score of the library."""
    keras.utils.set_random_seed(11)
    source = keras.Input((SOURCE_LENGTH,), dtype="int32", name="source")
    target = keras.Input((TARGET_LENGTH,), dtype="int32", name="target")
    # The Keras mask of the padded ids flows into every layer below.
    # N(0, 1) embeddings: with Keras's default uniform(±0.05) every tanh
    # is nearly linear, additive scores barely depend on the query and the
    # hard choices are near ties.
    embed = {
        "mask_zero": True,
        "embeddings_initializer": keras.initializers.RandomNormal(stddev=1.0),
    }
    x = keras.layers.Embedding(VOCAB, DEPTH, **embed)(source)
    y = keras.layers.Embedding(VOCAB, DEPTH, **embed)(target)

    # A residual keeps the positions apart (attention alone averages them).
    h = keras.layers.Add()([x, keras_attention.SelfAttention(num_heads=2)(x)])
    cross = keras_attention.MultiHeadAttention(num_heads=2, key_dim=4)(y, h)
    outputs = [h, cross]
    embedding, hops = keras_attention.StructuredSelfAttention(
        units=5, num_hops=2, penalty_coefficient=0.1
    )(h, return_attention_scores=True)
    outputs += [embedding, hops]

    scores = [
        "dot",
        "scaled_dot",
        "cosine",
        "bilinear",
        "additive",
        "concat",
        keras_attention.scores.LocationScore(max_length=SOURCE_LENGTH),
        seq2seq.NormalizedAdditiveScore(units=6),
    ]
    for score in scores:
        # Key-value attention of the target over the source.
        context, weights = keras_attention.Attention(score=score)(
            y, h, key=x, return_attention_scores=True
        )
        outputs += [context, weights]
    for mode in ("argmax", "sample"):
        # At inference both modes pick the argmax: deterministic.
        selected, one_hot = keras_attention.HardAttention(
            score="bilinear", mode=mode, seed=3
        )(y, h, return_attention_scores=True)
        outputs += [selected, one_hot]

    mechanisms = [
        seq2seq.BahdanauAttention(6),
        seq2seq.BahdanauAttention(6, normalize=True),
        seq2seq.LuongAttention("dot"),
        seq2seq.LuongAttention("general"),
        seq2seq.LuongAttention("concat", units=6),
        seq2seq.LuongAttention("location", max_length=SOURCE_LENGTH),
    ]
    for mechanism in mechanisms:
        context, weights = mechanism(y, h)
        outputs += [context, weights]
    decoders = [
        (keras.layers.GRUCell(DEPTH), seq2seq.BahdanauAttention(6), None),
        (
            keras.layers.LSTMCell(DEPTH),
            seq2seq.LuongAttention("general"),
            7,
        ),
    ]
    for inner, mechanism, units in decoders:
        cell = seq2seq.AttentionDecoderCell(
            inner, mechanism, attention_layer_units=units
        )
        decoded, alignments = seq2seq.AttentionDecoder(
            cell, return_alignments=True
        )(y, h)
        outputs += [decoded, alignments]
    return keras.Model([source, target], outputs)


def _predict(model, inputs):
    outputs = model.predict([inputs["source"], inputs["target"]], verbose=0)
    return [keras.ops.convert_to_numpy(o) for o in outputs]


def _save_outputs(path, outputs):
    np.savez(path, **{f"y{i}": o for i, o in enumerate(outputs)})


def _load_outputs(path):
    with np.load(path, allow_pickle=False) as data:
        return [data[f"y{i}"] for i in range(len(data.files))]


def _assert_same(got, want, what):
    assert len(got) == len(want), f"{what}: {len(got)} vs {len(want)} outputs"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(
            g, w, rtol=RTOL, atol=ATOL, err_msg=f"{what}: output {i}"
        )


def _translator():
    return seq2seq.Translator(
        ["", "[UNK]", "ein", "hund"],
        ["", "[UNK]", "[start]", "[end]", "a", "dog"],
        embedding_dim=4,
        units=4,
        max_output_length=3,
    )


def child(directory):
    """Loads the parent's models, predicts; builds and saves its own."""
    translator = keras.saving.load_model(
        os.path.join(directory, "translator.keras"), safe_mode=True
    )
    print(f"loaded a {type(translator).__name__}")
    inputs = _inputs()
    model = keras.saving.load_model(
        os.path.join(directory, "parent.keras"), safe_mode=True
    )
    _save_outputs(
        os.path.join(directory, "child_on_parent.npz"), _predict(model, inputs)
    )
    own = build_model()
    own.save(os.path.join(directory, "child.keras"))
    _save_outputs(
        os.path.join(directory, "child_own.npz"), _predict(own, inputs)
    )


def test_model_with_every_layer_loads_across_backends(tmp_path):
    inputs = _inputs()
    model = build_model()
    expected = _predict(model, inputs)
    model.save(os.path.join(tmp_path, "parent.keras"))
    _translator().save(os.path.join(tmp_path, "translator.keras"))

    env = subprocesses.environment(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    done = subprocesses.run_python(
        ["-m", "tests.test_cross_backend", str(tmp_path)],
        env=env,
        timeout=CHILD_TIMEOUT_S,
    )
    assert "loaded a Translator" in done.stdout, done.stdout
    assert "jax" in done.stdout, done.stdout

    # Saved under TensorFlow, predicted under JAX.
    got = _load_outputs(os.path.join(tmp_path, "child_on_parent.npz"))
    _assert_same(got, expected, "TF-saved model under JAX")

    # Saved under JAX, predicted under TensorFlow.
    loaded = keras.saving.load_model(
        os.path.join(tmp_path, "child.keras"), safe_mode=True
    )
    want = _load_outputs(os.path.join(tmp_path, "child_own.npz"))
    _assert_same(_predict(loaded, inputs), want, "JAX-saved model under TF")


if __name__ == "__main__":
    child(sys.argv[1])
    print(f"child ran on {keras.backend.backend()}")
