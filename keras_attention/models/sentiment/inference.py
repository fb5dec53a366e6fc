"""Running the sentiment model: its token-id view, its vectorizer, predictions.

Only TensorFlow runs string tensors inside a model. On JAX (and PyTorch)
the same model is built, saved and loaded (the `.keras` file is identical:
raw strings in) and run through `token_id_model(model)` with the
vectorizer applied eagerly; `predict_sentiment` does this by itself.
"""

import keras
import numpy as np

from keras_attention import text
from keras_attention.models.sentiment.model import class_names


def predict_labels(model, sentences, batch_size=64):
    """The predicted class name of each sentence.

    Args:
        model: A model from `build_sentiment_classifier` (or loaded from
            its `.keras` file).
        sentences: A string, a list of strings or a NumPy string array.
        batch_size: Sentences per call. Defaults to `64`.

    Returns:
        A list with one name (`class_names(model)`) per sentence.

    Example:

    >>> from keras_attention.data import make_text_vectorizer
    >>> from keras_attention.models import sentiment
    >>> model = sentiment.build_sentiment_classifier(
    ...     make_text_vectorizer(["a good film", "a bad film"]),
    ...     embedding_dim=8,
    ...     lstm_units=4,
    ...     num_hops=2,
    ... )

    >>> labels = sentiment.predict_labels(model, ["a good film", "bad"])
    >>> len(labels), set(labels) <= {"0", "1"}
    (2, True)
    """
    probabilities, _ = predict_sentiment(
        model, text.as_text_list(sentences, "sentences"), batch_size=batch_size
    )
    names = class_names(model)
    return [names[i] for i in probabilities.argmax(axis=-1)]


def token_id_model(model, probabilities_only=False):
    """The part of `model` after its vectorizer: token ids in.

    It shares `model`'s layers and weights (training it trains `model`),
    takes `int32` ids `(batch_size, time)` as the vectorizer makes them (0
    is padding) and runs on every backend, where `model` itself takes
    strings and runs on TensorFlow only.

    Args:
        model: A model from `build_sentiment_classifier` (or loaded from
            its `.keras` file).
        probabilities_only: Return only the class probabilities (the view
            to compile and fit, as `classifier_for_training`) instead of the
            output dict. Defaults to `False`.

    Returns:
        A functional `keras.Model`.

    Example:

    >>> from keras_attention.data import make_text_vectorizer
    >>> from keras_attention.models import sentiment
    >>> model = sentiment.build_sentiment_classifier(
    ...     make_text_vectorizer(["a good film", "a bad film"]),
    ...     embedding_dim=8,
    ...     lstm_units=4,
    ...     num_hops=2,
    ... )

    >>> ids_model = sentiment.token_id_model(model)
    >>> outputs = ids_model.predict(np.array([[2, 3, 4, 0]]), verbose=0)
    >>> outputs["probabilities"].shape, outputs["attention"].shape
    ((1, 2), (1, 2, 4))
    """
    vectorizer = vectorizer_of(model)
    outputs = (
        model.get_layer("probabilities").output
        if probabilities_only
        else model.output
    )
    after_vectorizer = keras.Model(vectorizer.output, outputs)
    length = vectorizer.get_config()["output_sequence_length"]
    token_ids = keras.Input(shape=(length,), dtype="int32", name="token_ids")
    # The graph after the vectorizer again, with the same layers, from an
    # int32 input: `vectorizer.output` is int64, and a model on it would
    # convert every batch to int64 (which JAX truncates, with a warning).
    from_ids = keras.models.clone_model(
        after_vectorizer,
        input_tensors=token_ids,
        clone_function=lambda layer: layer,
    )
    return keras.Model(
        token_ids, from_ids.output, name=f"{model.name}_token_ids"
    )


def vectorizer_of(model):
    """The `TextVectorization` layer of a sentiment classifier.

    Args:
        model: A model from `build_sentiment_classifier` (or loaded from
            its `.keras` file).

    Returns:
        Its `keras.layers.TextVectorization`.

    Raises:
        ValueError: `model` has no such layer.

    Example:

    >>> from keras_attention.data import make_text_vectorizer
    >>> from keras_attention.models import sentiment
    >>> model = sentiment.build_sentiment_classifier(
    ...     make_text_vectorizer(["a good film", "a bad film"]),
    ...     embedding_dim=8,
    ...     lstm_units=4,
    ...     num_hops=2,
    ... )

    >>> vocabulary = sentiment.vectorizer_of(model).get_vocabulary()
    >>> [str(word) for word in vocabulary[:3]]
    ['', '[UNK]', 'film']
    """
    for layer in model.layers:
        if isinstance(layer, keras.layers.TextVectorization):
            return layer
    raise ValueError(
        f"Model {model.name!r} has no TextVectorization layer; expected a "
        "model from `build_sentiment_classifier`."
    )


def predict_sentiment(model, sentences, batch_size=64):
    """Runs `model` batch by batch and trims each sentence's attention.

    Args:
        model: A model from `build_sentiment_classifier` (or loaded from
            its `.keras` file).
        sentences: A list of strings.
        batch_size: Sentences per call. Defaults to `64`.

    Returns:
        `(probabilities, attention)`: a `(num_sentences, num_classes)`
        array and a list with one `(num_hops, length)` array per sentence,
        `length` being its number of non-padding positions.

    Raises:
        ValueError: A sentence holds no word (a letter or a digit), as in
            `TextModel.predict`: there is nothing to attend to.

    Example:

    >>> from keras_attention.data import make_text_vectorizer
    >>> from keras_attention.models import sentiment
    >>> model = sentiment.build_sentiment_classifier(
    ...     make_text_vectorizer(["a good film", "a bad film"]),
    ...     embedding_dim=8,
    ...     lstm_units=4,
    ...     num_hops=2,
    ... )

    >>> probabilities, attention = sentiment.predict_sentiment(
    ...     model, ["a good film", "bad"]
    ... )
    >>> probabilities.shape, [a.shape for a in attention]
    ((2, 2), [(2, 3), (2, 1)])
    """
    text.check_words(sentences, "sentences")
    vectorizer = vectorizer_of(model)
    # String tensors exist on TensorFlow only; elsewhere the vectorizer
    # runs eagerly and the model from token ids on does the rest.
    on_strings = keras.backend.backend() == "tensorflow"
    ids_model = None if on_strings else token_id_model(model)
    probabilities = []
    attention = []
    for start in range(0, len(sentences), batch_size):
        batch = np.asarray(sentences[start : start + batch_size], dtype=object)
        ids = keras.ops.convert_to_numpy(vectorizer(batch)).astype("int32")
        if on_strings and ids.shape[-1] > 0:
            outputs = model.predict_on_batch(batch)
        else:
            # A batch of texts without a token: one padding step, as it
            # would get next to a longer text (an RNN takes no 0 steps).
            ids_model = ids_model or token_id_model(model)
            steps = np.zeros((len(ids), max(ids.shape[-1], 1)), "int32")
            steps[:, : ids.shape[-1]] = ids
            outputs = ids_model.predict_on_batch(steps)
        lengths = np.sum(ids != 0, axis=-1)
        probabilities.append(np.asarray(outputs["probabilities"]))
        weights = np.asarray(outputs["attention"])
        attention += [w[:, :n] for w, n in zip(weights, lengths, strict=True)]
    if not probabilities:
        raise ValueError("`sentences` is empty: nothing to predict.")
    return np.concatenate(probabilities), attention
