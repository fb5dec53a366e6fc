"""Training helpers of the sentiment model (`models/sentiment/training.py`).

Moved from `tests/models/test_sentiment.py` with the module split.
"""

import os

import numpy as np
import pytest

import keras_attention
from keras_attention.models import sentiment
from tests.models.sentiment._models import SENTENCES
from tests.models.sentiment._models import _model


@pytest.mark.backend_independent
def test_label_names_set_the_classes_and_survive_saving(tmp_path):
    names = ("bad", "so-so", "good")
    model = _model(label_names=names)
    assert model.get_layer("probabilities").output.shape[-1] == 3
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras_attention.load_model(path)
    assert loaded.label_names == names
    probabilities, _ = sentiment.predict_sentiment(loaded, SENTENCES)
    assert probabilities.shape == (4, 3)
    labels = sentiment.predict_labels(loaded, SENTENCES)
    assert labels == [names[i] for i in probabilities.argmax(-1)]
    # A model without names (as the committed ones) names classes by index;
    # this one starts from `model` (as SST-5 from SST-2), with a copy of its
    # vocabulary and the weights of every layer but the 3-class output.
    vectorizer = sentiment.copy_vectorizer(sentiment.vectorizer_of(model))
    assert vectorizer.get_vocabulary() == (
        sentiment.vectorizer_of(model).get_vocabulary()
    )
    other = sentiment.build_sentiment_classifier(
        vectorizer,
        embedding_dim=8,
        lstm_units=4,
        attention_units=6,
        num_hops=3,
        mlp_units=5,
        num_classes=4,
    )
    assert sentiment.class_names(other) == ("0", "1", "2", "3")
    copied = sentiment.copy_matching_weights(model, other)
    assert copied == ["embedding", "bilstm", "attention", "mlp"]
    for name in copied:
        for a, b in zip(
            model.get_layer(name).get_weights(),
            other.get_layer(name).get_weights(),
            strict=True,
        ):
            np.testing.assert_array_equal(a, b)
    assert other.get_layer("probabilities").get_weights()[0].shape == (5, 4)
    # The copy starts a model of its own (a shared layer would not).
    view = sentiment.token_id_model(other, probabilities_only=True)
    assert view.output.shape[-1] == 4
