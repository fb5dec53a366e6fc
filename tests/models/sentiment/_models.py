"""The small sentiment model and inputs the sentiment tests share."""

import keras
import numpy as np

from keras_attention.data import make_text_vectorizer
from keras_attention.models import sentiment

SENTENCES = [
    "a good film",
    "a bad film, not good",
    "never dull and never boring",
    "the plot was weak",
]


def _model(penalty=0.1, **kwargs):
    vectorizer = make_text_vectorizer(SENTENCES)
    return sentiment.build_sentiment_classifier(
        vectorizer,
        embedding_dim=8,
        lstm_units=4,
        attention_units=6,
        num_hops=3,
        penalty_coefficient=penalty,
        mlp_units=5,
        **kwargs,
    )


def _strings(sentences):
    return np.array(sentences, dtype=object)


def _ids(model, sentences):
    """Token ids from the model's own vectorizer (run eagerly)."""
    vectorizer = model.get_layer(index=1)
    ids = keras.ops.convert_to_numpy(vectorizer(_strings(sentences)))
    return ids.astype("int32")


def _outputs(model, sentences):
    """The model's output dict, on any backend (strings on TensorFlow)."""
    if keras.backend.backend() == "tensorflow":
        return model.predict(_strings(sentences), verbose=0)
    ids = _ids(model, sentences)
    return sentiment.token_id_model(model).predict(ids, verbose=0)
