"""SavedModel export for TF Serving (`keras_attention.export_for_serving`).

Each example model is exported, loaded back with `tf.saved_model.load`
(what TF Serving reads) and its signatures are compared with the Keras
model it came from: the sentiment classifier on raw strings, the
translator on source ids (greedy and beam search) and on raw text.
"""

import contextlib
import importlib.util
import io
import os
import re

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention import text
from keras_attention.text import detokenize
from keras_attention.text import tokenize

# The example models take strings or decode with TensorFlow string ops:
# TensorFlow backend only. A numeric model exports on every backend.
tensorflow_only = pytest.mark.tensorflow_only

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAVED_MODELS = os.path.join(ROOT, "saved_models")
SCRIPT = os.path.join(ROOT, "examples", "export_model.py")
# Held-out synthetic sentences plus upper case, punctuation, an unknown
# word and the empty string.
TRANSLATOR_TEXTS = [
    "de tumi zefa poro",
    "De TUMI, zefa poro!",
    "zyxw tumi (zefa) poro?",
    "",
]


def _golden_input(name):
    with np.load(os.path.join(SAVED_MODELS, f"{name}.golden.npz")) as golden:
        return golden["x"]


def _script():
    spec = importlib.util.spec_from_file_location("export_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sentiment(tmp_path_factory):
    """The sentiment model and its export by `examples/export_model.py`."""
    source = os.path.join(SAVED_MODELS, "sentiment_synthetic.keras")
    path = str(tmp_path_factory.mktemp("export") / "sentiment" / "1")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert _script().main([source, path]) == path
    printed = printed.getvalue()
    assert f"wrote {path}" in printed
    assert "in sentence: string (None, 1)" in printed
    assert "out probabilities: float32 (None, 2)" in printed
    return keras.saving.load_model(source), path


@pytest.fixture(scope="module")
def translator():
    return keras.saving.load_model(
        os.path.join(SAVED_MODELS, "translator_synthetic.keras")
    )


@pytest.fixture(scope="module")
def translator_export(translator, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("export") / "translator")
    keras_attention.export_for_serving(translator, path)
    return path


def _numpy(outputs):
    return {k: np.asarray(v) for k, v in outputs.items()}


@pytest.mark.heavy
@tensorflow_only
def test_sentiment_signature_takes_strings_and_matches_keras(sentiment):
    import tensorflow as tf

    model, path = sentiment
    sentences = _golden_input("sentiment_synthetic").astype(object)
    expected = model.predict(sentences, verbose=0)
    served = tf.saved_model.load(path)
    assert set(served.signatures) == {"serve", "serving_default"}
    spec = served.signatures["serving_default"].structured_input_signature
    assert spec[1]["sentence"].dtype == tf.string
    for name in ("serve", "serving_default"):
        got = _numpy(
            served.signatures[name](
                sentence=tf.constant(sentences.reshape(-1, 1))
            )
        )
        assert set(got) == set(expected)
        for key, value in expected.items():
            np.testing.assert_allclose(
                got[key], value, rtol=1e-5, atol=1e-6, err_msg=key
            )


@pytest.mark.heavy
@tensorflow_only
def test_sentiment_export_handles_another_batch(sentiment):
    import tensorflow as tf

    model, path = sentiment
    sentences = np.array(["not a bad film", "Never GOOD."], dtype=object)
    # Keep the loaded object alive while its function runs.
    served = tf.saved_model.load(path)
    got = _numpy(served.serve(tf.constant(sentences[:, None])))
    expected = model.predict(sentences, verbose=0)
    np.testing.assert_allclose(
        got["probabilities"], expected["probabilities"], rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(got["probabilities"].sum(-1), 1.0, rtol=1e-5)


def _check_decoded(got, expected):
    np.testing.assert_array_equal(got["tokens"], np.asarray(expected.tokens))
    np.testing.assert_allclose(
        got["scores"], np.asarray(expected.scores), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        got["alignments"], np.asarray(expected.alignments), atol=1e-5
    )


@pytest.mark.heavy
@tensorflow_only
def test_translator_serve_signature_decodes_greedily(
    translator, translator_export
):
    import tensorflow as tf

    ids = _golden_input("translator_synthetic")
    served = tf.saved_model.load(translator_export)
    assert {"serve", "translate", "serving_default"} <= set(served.signatures)
    expected = translator.decode(ids, beam_width=1)
    _check_decoded(_numpy(served.serve(tf.constant(ids))), expected)
    default = served.signatures["serving_default"]
    _check_decoded(_numpy(default(source_ids=tf.constant(ids))), expected)


@pytest.mark.heavy
@tensorflow_only
def test_translator_translate_signature_matches_keras(
    translator, translator_export
):
    import tensorflow as tf

    served = tf.saved_model.load(translator_export)
    got = _numpy(served.translate(tf.constant(TRANSLATOR_TEXTS)))
    translations = [t.decode("utf-8") for t in got["translations"]]
    # The served graph decodes a text without a word from an empty
    # source; `translate` refuses one (keras_attention.text.check_words):
    # they agree on the others.
    worded = [keras_attention.text.has_words(t) for t in TRANSLATOR_TEXTS]
    assert [t for t, w in zip(translations, worded, strict=True) if w] == (
        translator.translate(
            [t for t, w in zip(TRANSLATOR_TEXTS, worded, strict=True) if w]
        )
    )
    ids = translator.vectorize_sources(TRANSLATOR_TEXTS)
    _check_decoded(got, translator.decode(ids, beam_width=1))


@pytest.mark.heavy
@tensorflow_only
def test_translator_beam_search_export(translator, tmp_path):
    import tensorflow as tf

    path = str(tmp_path / "beam")
    keras_attention.export_for_serving(translator, path, beam_width=3)
    ids = _golden_input("translator_synthetic")[:4]
    served = tf.saved_model.load(path)
    got = _numpy(served.serve(tf.constant(ids)))
    _check_decoded(got, translator.decode(ids, beam_width=3))


@pytest.mark.heavy
def test_functional_model_of_package_layers_exports(tmp_path):
    """On JAX, Keras converts the model with jax2tf; TensorFlow loads it."""
    import tensorflow as tf

    inputs = keras.Input((6, 8))
    x = keras_attention.SelfAttention(num_heads=2)(inputs)
    x = keras_attention.MultiHeadAttention(2, 4, score="additive")(x, x)
    outputs = keras_attention.Attention(score="bilinear")(x[:, 0], x)
    model = keras.Model(inputs, outputs)
    path = keras_attention.export_for_serving(model, str(tmp_path / "m"))
    x = np.random.default_rng(0).random((3, 6, 8)).astype("float32")
    served = tf.saved_model.load(path)
    got = np.asarray(served.serve(tf.constant(x)))
    np.testing.assert_allclose(
        got, keras.ops.convert_to_numpy(model(x)), rtol=1e-5, atol=1e-6
    )


@tensorflow_only
@pytest.mark.parametrize(
    "sentence",
    [
        "Zwei Männer, die lachen.",
        "L'homme (à gauche) dit: «ça va?!»",
        "x_y 3.5 -- ÉTÉ\tdone",
        "",
    ],
)
def test_tensorflow_tokenizer_matches_python(sentence):
    got = text.tf_tokenize(np.array([sentence], dtype=object))
    got = " ".join(got.numpy()[0].decode("utf-8").split())
    assert got == tokenize(sentence)
    tokens = tokenize(sentence)
    back = text.tf_detokenize(np.array([tokens], dtype=object))
    assert back.numpy()[0].decode("utf-8") == detokenize(tokens)


def test_script_help(capsys):
    with pytest.raises(SystemExit) as info:
        _script().main(["--help"])
    assert info.value.code == 0
    assert "--beam-width" in capsys.readouterr().out


@tensorflow_only
def test_script_reports_a_broken_model_file(tmp_path, capsys):
    broken = tmp_path / "model.keras"
    broken.write_bytes(b"PK\x03\x04 cut here")
    with pytest.raises(SystemExit) as info:
        _script().main([str(broken), str(tmp_path / "out")])
    assert info.value.code == 2
    error = capsys.readouterr().err
    assert f"{broken} is not a valid .keras file" in error
    assert "probably truncated" in error
    assert not (tmp_path / "out").exists()


@pytest.mark.heavy
@tensorflow_only
def test_serving_doc_python_blocks_run(tmp_path, monkeypatch):
    """docs/serving.md's Python blocks, in order, from a scratch folder."""
    with open(os.path.join(ROOT, "docs", "serving.md"), encoding="utf-8") as f:
        text = f.read()
    # Titled "TensorFlow only": a SavedModel needs TensorFlow.
    fence = r'^```python title="TensorFlow only"\n(.*?)^```'
    blocks = re.findall(fence, text, re.M | re.S)
    assert len(blocks) == 2
    os.symlink(SAVED_MODELS, tmp_path / "saved_models")
    monkeypatch.chdir(tmp_path)
    namespace = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for block in blocks:
            exec(compile(block, "docs/serving.md", "exec"), namespace)
    assert printed.getvalue().strip() == "[b'rax nakox dimex vilix']"
    for name in ("translator", "translator_beam"):
        assert (tmp_path / "exported" / name / "1" / "saved_model.pb").exists()
