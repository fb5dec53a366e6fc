"""Running the sentiment model (`models/sentiment/inference.py`).

Moved from `tests/models/test_sentiment.py` with the module split.
"""

import os
import warnings

import keras
import numpy as np
import pytest

from keras_attention.models import sentiment
from tests.models.sentiment._models import SENTENCES
from tests.models.sentiment._models import _ids
from tests.models.sentiment._models import _model
from tests.models.sentiment._models import _outputs
from tests.models.sentiment._models import _strings


def test_save_and_load_then_predict_sentiment_on_any_backend(tmp_path):
    model = _model()
    sentences = SENTENCES + ["Unknown WORDS here!"]
    expected, _ = sentiment.predict_sentiment(model, sentences)
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.inputs[0].dtype == "string"
    got, attention = sentiment.predict_sentiment(loaded, sentences)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert [w.shape[1] for w in attention] == [3, 5, 5, 4, 3]


@pytest.mark.heavy
def test_token_id_model_shares_weights_and_penalty():
    model = _model(penalty=1.0)
    view = sentiment.token_id_model(model, probabilities_only=True)
    assert view.inputs[0].dtype == "int32"
    assert {id(w) for w in view.weights} == {id(w) for w in model.weights}
    ids = _ids(model, SENTENCES)
    view.compile("adam", "sparse_categorical_crossentropy")
    before = [w.copy() for w in model.get_weights()]
    # The ids stay int32 from the view's input on: no int64 (the
    # vectorizer's symbolic output) reaches JAX, which warned that it
    # truncates it at every fit, evaluate and predict (#30 item 11).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        view.fit(ids, np.array([1, 0, 1, 0]), verbose=0)
        full = sentiment.token_id_model(model).predict(ids, verbose=0)
    assert any(
        not np.allclose(a, b)
        for a, b in zip(before, model.get_weights(), strict=True)
    )
    view(ids)
    assert len(view.losses) == 1
    np.testing.assert_allclose(
        view.predict(ids, verbose=0), full["probabilities"], atol=1e-6
    )


@pytest.mark.tensorflow_only
def test_token_id_model_agrees_with_the_raw_string_model():
    model = _model()
    from_ids = sentiment.token_id_model(model).predict(
        _ids(model, SENTENCES), verbose=0
    )
    from_strings = model.predict(_strings(SENTENCES), verbose=0)
    for name in sentiment.OUTPUT_NAMES:
        np.testing.assert_allclose(
            from_ids[name], from_strings[name], atol=1e-6
        )


def test_predict_sentiment_trims_each_sentence_across_batches():
    model = _model()
    sentences = ["good"] * 3 + ["never dull and never boring at all"] * 3
    probabilities, attention = sentiment.predict_sentiment(
        model, sentences, batch_size=2
    )
    assert probabilities.shape == (6, 2)
    shapes = [(3, 1)] * 3 + [(3, 7)] * 3
    assert [w.shape for w in attention] == shapes
    full = _outputs(model, sentences[2:])
    np.testing.assert_allclose(attention[3], full["attention"][1], atol=1e-6)
    # A short text gets what it gets next to a longer one.
    np.testing.assert_allclose(
        probabilities[2:], full["probabilities"], atol=1e-6
    )


@pytest.mark.parametrize("wordless", ["", "  ", "!?"])
def test_predict_sentiment_refuses_a_text_without_a_word(wordless):
    # The package's one rule (#30 item 1), as TextModel.predict and
    # Translator.translate: nothing to attend to is an error, not an answer.
    with pytest.raises(ValueError, match=r"Received: sentences\[1\]="):
        sentiment.predict_sentiment(_model(), ["good", wordless])


def test_predict_sentiment_rejects_models_without_vectorizer():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    with pytest.raises(ValueError, match="no TextVectorization layer"):
        sentiment.predict_sentiment(model, ["a"])
