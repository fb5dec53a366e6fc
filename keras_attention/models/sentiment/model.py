"""The sentiment example's model: raw strings in, attention out.

`build_sentiment_classifier` assembles it: raw strings → the adapted
`TextVectorization` (inside the model, so a saved `.keras` file takes raw
text) → `Embedding(mask_zero=True)` → a BiLSTM →
`keras_attention.StructuredSelfAttention` → an MLP → softmax, a
`keras_attention.text.TextModel`.
"""

import keras
import numpy as np

from keras_attention import text
from keras_attention.layers.structured import StructuredSelfAttention

#: Keys of the model's output dict, in `keras.tree.flatten` (sorted) order.
OUTPUT_NAMES = ("attention", "embedding", "probabilities")


def build_sentiment_classifier(
    vectorizer,
    embedding_dim=64,
    lstm_units=64,
    attention_units=32,
    num_hops=4,
    penalty_coefficient=0.1,
    mlp_units=64,
    num_classes=None,
    dropout=0.2,
    recurrent_dropout=0.0,
    spatial_dropout=0.0,
    name="sentiment_classifier",
    label_names=None,
):
    """Builds the raw-text BiLSTM + structured self-attention classifier.

    The model takes one string per example (`keras.Input(shape=(1,),
    dtype="string")`; a plain `(batch_size,)` array of Python strings
    works too) and returns a dict:

    - `"probabilities"`: class probabilities `(batch_size, num_classes)`,
      computed in `float32`;
    - `"embedding"`: the flattened sentence embedding `M`,
      `(batch_size, num_hops * 2 * lstm_units)`;
    - `"attention"`: the hop weights `A`, `(batch_size, num_hops, time)`,
      zero on padding. `time` is the longest sentence of the batch (unless
      the vectorizer has an `output_sequence_length`), so
      `model.predict` over batches of different lengths returns a ragged
      tensor for it; `predict_sentiment` trims each sentence instead.

    `keras.tree.flatten` orders the outputs by name: attention, embedding,
    probabilities (`OUTPUT_NAMES`). Train with the loss on the
    probabilities only, e.g. on `classifier_for_training(model)`; the
    attention penalty joins the loss through `model.losses`.

    Args:
        vectorizer: An adapted `keras.layers.TextVectorization` with
            `output_mode="int"` (0 = padding), e.g. from
            `keras_attention.data.make_text_vectorizer`.
        embedding_dim: Word embedding size. Defaults to `64`.
        lstm_units: Units of each direction of the BiLSTM. Defaults to
            `64`.
        attention_units: Hidden size `d_a` of the attention MLP. Defaults
            to `32`.
        num_hops: Attention hops `r`. Defaults to `4`.
        penalty_coefficient: Weight of the `‖AAᵀ − I‖²_F` penalty.
            Defaults to `0.1`.
        mlp_units: Hidden units of the classifier MLP. Defaults to `64`.
        num_classes: Number of classes. Defaults to the number of
            `label_names`, or `2` without them.
        dropout: Dropout rate on the sentence embedding and in the MLP.
            Defaults to `0.2`.
        recurrent_dropout: Dropout rate on the LSTM's recurrent state.
            Defaults to `0.0`.
        spatial_dropout: Rate of `keras.layers.SpatialDropout1D` on the
            word embeddings: in training, each embedding channel is
            dropped for the whole sentence at once. Defaults to `0.0`
            (no such layer).
        name: Model name. Defaults to `"sentiment_classifier"`.
        label_names: Optional names of the classes (label `i` is
            `label_names[i]`), saved with the model as `model.label_names`.

    Returns:
        A functional `keras_attention.text.TextModel` (its `predict` takes
        a string, a list of strings or a NumPy string array) with the dict
        outputs above.

    Raises:
        ValueError: `num_classes` disagrees with `label_names`, or is
            below 2.

    Example:

    >>> from keras_attention.data import make_text_vectorizer
    >>> vectorizer = make_text_vectorizer(["a good film", "a bad film"])
    >>> model = keras_attention.models.build_sentiment_classifier(
    ...     vectorizer, embedding_dim=8, lstm_units=4, num_hops=2
    ... )
    >>> outputs = model.predict(
    ...     np.array(["not a bad film"], dtype=object), verbose=0
    ... )
    >>> outputs["probabilities"].shape, outputs["attention"].shape
    ((1, 2), (1, 2, 4))
    """
    num_classes = _num_classes(num_classes, label_names)
    vocabulary_size = vectorizer.vocabulary_size()
    sentences = keras.Input(shape=(1,), dtype="string", name="sentence")
    token_ids = vectorizer(sentences)
    embedded = keras.layers.Embedding(
        vocabulary_size, embedding_dim, mask_zero=True, name="embedding"
    )(token_ids)
    if spatial_dropout:
        embedded = keras.layers.SpatialDropout1D(
            spatial_dropout, name="spatial_dropout"
        )(embedded)
    hidden = keras.layers.Bidirectional(
        keras.layers.LSTM(
            lstm_units,
            return_sequences=True,
            recurrent_dropout=recurrent_dropout,
        ),
        name="bilstm",
    )(embedded)
    embedding, attention = StructuredSelfAttention(
        units=attention_units,
        num_hops=num_hops,
        penalty_coefficient=penalty_coefficient,
        name="attention",
    )(hidden, return_attention_scores=True)
    x = keras.layers.Dropout(dropout, name="embedding_dropout")(embedding)
    x = keras.layers.Dense(mlp_units, activation="relu", name="mlp")(x)
    x = keras.layers.Dropout(dropout, name="mlp_dropout")(x)
    probabilities = keras.layers.Dense(
        num_classes, activation="softmax", dtype="float32", name="probabilities"
    )(x)
    outputs = {
        "probabilities": probabilities,
        "embedding": embedding,
        "attention": attention,
    }
    return text.TextModel(
        sentences, outputs, name=name, label_names=label_names
    )


def _num_classes(num_classes, label_names):
    if num_classes is None:
        num_classes = 2 if label_names is None else len(label_names)
    if (
        isinstance(num_classes, bool)
        or not isinstance(num_classes, (int, np.integer))
        or num_classes < 2
        or (label_names is not None and len(label_names) != num_classes)
    ):
        raise ValueError(
            "Received an invalid value for argument `num_classes`, expected "
            "an integer >= 2 (the number of `label_names` when given). "
            f"Received: num_classes={num_classes!r}, "
            f"label_names={label_names!r}"
        )
    return int(num_classes)


def class_names(model):
    """The names of `model`'s classes: its `label_names`, or `"0", "1", ...`.

    Models saved before label names existed (and models built without
    them) name their classes by their index.

    Example:

    >>> from keras_attention.data import make_text_vectorizer
    >>> from keras_attention.models import sentiment
    >>> model = sentiment.build_sentiment_classifier(
    ...     make_text_vectorizer(["a good film", "a bad film"]),
    ...     embedding_dim=8,
    ...     lstm_units=4,
    ...     num_hops=2,
    ... )

    >>> sentiment.class_names(model)
    ('0', '1')
    """
    names = getattr(model, "label_names", None)
    if names is not None:
        return tuple(names)
    count = model.get_layer("probabilities").output.shape[-1]
    return tuple(str(i) for i in range(count))


def classifier_for_training(model):
    """The probabilities-only view of `model`, sharing its layers.

    Compile and fit this view (`sparse_categorical_crossentropy`,
    `accuracy`): its loss is on the class probabilities alone, plus the
    attention penalty that the layer adds. Training it trains `model`.

    Example:

    >>> from keras_attention.data import make_text_vectorizer
    >>> from keras_attention.models import sentiment
    >>> model = sentiment.build_sentiment_classifier(
    ...     make_text_vectorizer(["a good film", "a bad film"]),
    ...     embedding_dim=8,
    ...     lstm_units=4,
    ...     num_hops=2,
    ... )

    >>> view = sentiment.classifier_for_training(model)
    >>> view.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    >>> loss = view.train_on_batch(np.array(["a good film"]), np.array([1]))
    >>> bool(np.isfinite(loss))
    True
    """
    return keras.Model(
        model.input,
        model.get_layer("probabilities").output,
        name=f"{model.name}_probabilities",
    )
