"""Every committed `saved_models/*.keras` loads and reproduces its goldens.

Loading uses `safe_mode=True` and no `custom_objects`: importing
`keras_attention` must be enough. `NAME.golden.npz` holds the input `x` and
the outputs `y0`, `y1`, ... of `model.predict(x)` in `keras.tree.flatten`
order. String inputs are stored as fixed-width unicode (no pickle) and
given to the model as an object array; such a model runs its
`TextVectorization` inside, which only TensorFlow can, so it is
`tensorflow_only`. A model on raw text also lists in `refused` texts that
the package's rule for empty text (`keras_attention.text.check_words`)
refuses: loaded with `keras_attention.load_model`, it raises for each,
on every backend.
"""

import glob
import os
import re

import keras
import numpy as np
import pytest

import keras_attention  # noqa: F401

SAVED_MODELS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), os.pardir, "saved_models"
)
PATHS = sorted(glob.glob(os.path.join(SAVED_MODELS, "*.keras")))


def _golden(path):
    golden_path = path[: -len(".keras")] + ".golden.npz"
    assert os.path.exists(golden_path), f"{golden_path} is missing"
    with np.load(golden_path, allow_pickle=False) as golden:
        x = golden["x"]
        outputs = []
        while f"y{len(outputs)}" in golden:
            outputs.append(golden[f"y{len(outputs)}"])
    if x.dtype.kind in "US":
        x = x.astype(object)
    return x, outputs


def _needs_tensorflow(path):
    """String inputs go through `TextVectorization`, which only TF runs."""
    golden_path = path[: -len(".keras")] + ".golden.npz"
    if not os.path.exists(golden_path):
        return False
    with np.load(golden_path, allow_pickle=False) as golden:
        return golden["x"].dtype.kind in "US"


def _cases():
    for path in PATHS:
        marks = [pytest.mark.tensorflow_only] if _needs_tensorflow(path) else []
        yield pytest.param(path, marks=marks, id=os.path.basename(path))


def test_there_are_saved_models():
    assert PATHS, f"no .keras files in {SAVED_MODELS}"


@pytest.mark.parametrize("path", list(_cases()))
def test_saved_model_loads_safely_and_matches_golden(path):
    x, expected = _golden(path)
    model = keras.saving.load_model(path, safe_mode=True)
    got = keras.tree.flatten(model.predict(x, verbose=0))
    assert len(got) == len(expected), (
        f"{len(got)} outputs, golden file has {len(expected)}"
    )
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        g = keras.ops.convert_to_numpy(g)
        assert g.shape == e.shape, f"y{i}: shape {g.shape} vs {e.shape}"
        np.testing.assert_allclose(
            g, e, rtol=1e-5, atol=1e-5, err_msg=f"y{i} of {path}"
        )


def _text_model_paths():
    """The saved models that are `TextModel`s (raw text in)."""
    return [
        path
        for path in PATHS
        if '"class_name": "TextModel"' in _config_text(path)
    ]


def _config_text(path):
    import zipfile

    with zipfile.ZipFile(path) as archive:
        return archive.read("config.json").decode("utf-8")


@pytest.mark.backend_independent
def test_every_sentiment_model_has_a_text_model_version():
    # Older saves (plain functional models) stay as golden fixtures; each
    # sentiment model has a TextModel successor that takes plain strings.
    names = [os.path.basename(p) for p in _text_model_paths()]
    assert "sentiment_synthetic_text.keras" in names, names


def _text_input_paths():
    """The saved models on raw text, `TextModel`s or older plain ones."""
    return [path for path in PATHS if _needs_tensorflow(path)]


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("path", _text_input_paths(), ids=os.path.basename)
def test_text_model_predicts_from_a_string_a_list_or_a_numpy_array(path):
    # `keras_attention.load_model` gives the older plain functional model
    # back as a TextModel (issue 54): the same inputs, the same rules.
    x, expected = _golden(path)
    model = keras_attention.load_model(path, safe_mode=True)
    assert isinstance(model, keras_attention.text.TextModel)
    sentences = [str(s) for s in x]
    for given in (sentences, np.array(sentences), np.array(sentences, "U")):
        got = keras.tree.flatten(model.predict(given, verbose=0))
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    # A text without a word is refused (issue 30's one rule for empty
    # text), by the loaded model's own class.
    with pytest.raises(ValueError, match=r"Received: x\[1\]=''"):
        model.predict([sentences[0], ""], verbose=0)
    # One sentence alone: an output over its tokens is as long as the
    # sentence, the golden one padded (with zeros) to the batch's longest.
    one = keras.tree.flatten(model.predict(sentences[0], verbose=0))
    for g, e in zip(one, expected, strict=True):
        g, e = g[0], e[0]
        np.testing.assert_allclose(
            g, e[..., : g.shape[-1]], rtol=1e-5, atol=1e-5
        )
        assert not np.any(e[..., g.shape[-1] :])


@pytest.mark.parametrize("path", _text_input_paths(), ids=os.path.basename)
def test_text_models_refuse_empty_text_no_texts_and_none(path):
    # sentiment_synthetic.keras, a plain functional model, failed inside
    # Keras on each (issue 54): a TensorFlow InvalidArgumentError for
    # [""] (an LSTM over zero steps), an UnboundLocalError for no rows, a
    # KeyError for None. Refused before any backend work, on every one.
    with np.load(path[: -len(".keras")] + ".golden.npz") as golden:
        refused = [str(text) for text in golden["refused"]]
        assert not any(keras_attention.text.has_words(t) for t in refused)
        kept = [str(text) for text in golden["x"]]
    assert all(keras_attention.text.has_words(t) for t in kept)
    model = keras_attention.load_model(path, safe_mode=True)
    rule = re.escape("at least one word (a letter or a digit) in every text")
    for text in refused:
        with pytest.raises(ValueError, match=rule) as error:
            model.predict(np.array([text], dtype=object), verbose=0)
        assert str(error.value).endswith(f"Received: x[0]={text!r}")
    with pytest.raises(ValueError, match="`x` holds no text: nothing to"):
        model.predict(np.array([], dtype=object), verbose=0)
    with pytest.raises(ValueError, match="Received: x=None"):
        model.predict(None, verbose=0)
