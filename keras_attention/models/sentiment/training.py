"""Training the sentiment model, with weight transfer from another one.

On every backend and under every strategy the model is fit through
`token_id_model(model)`, its view from token ids on, with the vectorizer
applied in the `tf.data` pipeline (`make_dataset`), as Keras recommends
for distributed training; the model that is returned, saved and exported
is the raw-string one, which shares the trained layers. The scaffold is
`keras_attention.models.fitting`.
"""

import keras
import numpy as np

from keras_attention.models import distribute
from keras_attention.models import fitting
from keras_attention.models.sentiment.inference import token_id_model
from keras_attention.models.sentiment.inference import vectorizer_of
from keras_attention.models.sentiment.model import build_sentiment_classifier


def make_dataset(split, batch_size, shuffle=False, seed=None, vectorizer=None):
    """A batched `tf.data.Dataset` of `(sentence, label)` pairs.

    With a `vectorizer`, the pairs are `(token_ids, label)` instead, the
    ids `int32`, vectorized in the pipeline: what the example fits, on
    every backend and under every strategy. Sharded by data under a
    multi-worker strategy.

    Args:
        split: A `keras_attention.data.splits.SentimentSplit`.
        batch_size: The global batch size.
        shuffle: Whether to shuffle, again each epoch. Defaults to `False`.
        seed: Seed of the shuffling.
        vectorizer: An adapted `keras.layers.TextVectorization`, or `None`
            to keep the strings.

    Returns:
        A `tf.data.Dataset`.
    """
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(
        (
            tf.constant(split.sentences, dtype=tf.string),
            tf.constant(np.asarray(split.labels, dtype="int32")),
        )
    )
    map_fn = None
    if vectorizer is not None:

        def map_fn(sentences, labels):
            return tf.cast(vectorizer(sentences), "int32"), labels

    return fitting.batched(dataset, batch_size, shuffle, seed, map_fn)


def train_sentiment_classifier(
    splits,
    output_dir,
    epochs=10,
    batch_size=32,
    learning_rate=1e-3,
    patience=3,
    strategy=None,
    seed=0,
    max_tokens=20000,
    max_length=None,
    verbose="auto",
    callbacks=None,
    initial_model=None,
    vocabulary_text=None,
    **model_kwargs,
):
    """Adapts the vectorizer, builds the classifier and fits it.

    The number of classes is that of `splits["train"].label_names` when
    set (`load_sentiment_splits` sets it), otherwise the largest training
    label plus one; the names are saved with the model. Labels outside the
    classes are refused before any training.

    The vectorizer is adapted on the training sentences only and runs in
    the `tf.data` pipeline; `token_id_model(model)` is fit from the ids,
    so every backend and every strategy sees integer tensors. The returned
    model is the raw-string model of `build_sentiment_classifier` (it
    shares the trained layers), with the best validation weights. Built
    in `strategy`'s scope; callbacks, backups and resuming as in
    `keras_attention.models.fitting`.

    Args:
        splits: `"train"` and `"validation"` `SentimentSplit`s.
        output_dir: Directory for checkpoints and backups (created).
        epochs: Most epochs to train. Defaults to `10`.
        batch_size: Global batch size. Defaults to `32`.
        learning_rate: Adam learning rate. Defaults to `1e-3`.
        patience: Epochs without a lower validation loss before stopping.
            Defaults to `3`.
        strategy: From `keras_attention.models.distribute.get_strategy`;
            defaults to no distribution.
        seed: Seed of the weights and of the shuffling. Defaults to `0`.
        max_tokens: Vocabulary size. Defaults to `20000`.
        max_length: Truncate sentences to this many tokens; `None` keeps
            them whole. Defaults to `None`.
        verbose: `fit` verbosity (`1` is the progress bar). Defaults to
            `"auto"`.
        callbacks: Extra Keras callbacks, run after the built-in ones.
        initial_model: A trained sentiment classifier to start from (e.g.
            one trained on other labels of the same text): its vectorizer
            is copied instead of adapting one (`max_tokens` and
            `max_length` are then its own), and every layer of the same name and
            weight shapes starts from its weights (`copy_matching_weights`;
            the output layer too when the classes are as many).
        vocabulary_text: More training-side sentences to adapt the
            vocabulary on besides the training split (never validation or
            test text). A model that will go on to other labels of the
            same text needs every word of that text: a word missing from
            the vocabulary becomes the OOV id, which the next training
            would otherwise tie to whatever the missing sentences share
            (SST-5's neutral sentences, absent from SST-2).
        **model_kwargs: Passed to `build_sentiment_classifier`.

    Returns:
        A `keras_attention.models.fitting.FitResult`.

    Raises:
        ValueError: A label of the training or validation split is not
            one of the classes.
    """
    from keras_attention.data.sentiment import make_text_vectorizer

    train, validation = splits["train"], splits["validation"]
    _set_classes(train, validation, model_kwargs)
    keras.utils.set_random_seed(seed)
    if initial_model is None:
        vectorizer = make_text_vectorizer(
            list(train.sentences) + list(vocabulary_text or ()),
            max_tokens=max_tokens,
            output_sequence_length=max_length,
        )
    else:
        vectorizer = copy_vectorizer(vectorizer_of(initial_model))
    with distribute.scope(strategy):
        model = build_sentiment_classifier(vectorizer, **model_kwargs)
        if initial_model is not None:
            copy_matching_weights(initial_model, model)
        trainer = token_id_model(model, probabilities_only=True)
    return fitting.fit(
        model,
        make_dataset(train, batch_size, True, seed, vectorizer),
        make_dataset(validation, batch_size, vectorizer=vectorizer),
        output_dir,
        trainer=trainer,
        # Under a `keras.distribution`, filler rows with weight 0 even out
        # the last batch; a weighted accuracy leaves them out, and is the
        # plain accuracy otherwise.
        compile_args=lambda: {
            "optimizer": keras.optimizers.Adam(learning_rate),
            "loss": "sparse_categorical_crossentropy",
            "weighted_metrics": ["accuracy"],
        },
        batch_size=batch_size,
        strategy=strategy,
        epochs=epochs,
        patience=patience,
        verbose=verbose,
        callbacks=callbacks,
        sample_weight=True,
    )


def copy_vectorizer(vectorizer):
    """A new `TextVectorization` with `vectorizer`'s settings and vocabulary.

    A layer called in one functional model cannot start another one (its
    output would belong to both), so a model that reuses the vocabulary
    of another gets this copy.

    Example:

    >>> from keras_attention.data import make_text_vectorizer
    >>> from keras_attention.models.sentiment import copy_vectorizer
    >>> vectorizer = make_text_vectorizer(["a good film"])
    >>> copy = copy_vectorizer(vectorizer)
    >>> vocabulary = vectorizer.get_vocabulary()
    >>> copy is not vectorizer, copy.get_vocabulary() == vocabulary
    (True, True)
    """
    copy = keras.layers.TextVectorization.from_config(vectorizer.get_config())
    copy.set_vocabulary(vectorizer.get_vocabulary())
    return copy


def copy_matching_weights(source, target):
    """Copies each layer's weights from `source` to `target`'s namesake.

    Only layers with weights whose shapes all match are copied (the
    vectorizer is left alone: its vocabulary is not a weight to train).

    Args:
        source: The model to copy from.
        target: The model to copy to (changed in place).

    Returns:
        The names of the layers copied.

    Example:

    >>> from keras_attention.models.sentiment import copy_matching_weights
    >>> def model():
    ...     inputs = keras.Input((3,))
    ...     outputs = keras.layers.Dense(2, name="dense")(inputs)
    ...     return keras.Model(inputs, outputs)
    >>> source, target = model(), model()
    >>> copy_matching_weights(source, target)
    ['dense']
    >>> np.allclose(source.get_weights()[0], target.get_weights()[0])
    True
    """
    names = {layer.name: layer for layer in source.layers}
    copied = []
    for layer in target.layers:
        other = names.get(layer.name)
        if (
            other is None
            or isinstance(layer, keras.layers.TextVectorization)
            or not layer.weights
        ):
            continue
        shapes = [tuple(w.shape) for w in layer.weights]
        if shapes == [tuple(w.shape) for w in other.weights]:
            layer.set_weights(other.get_weights())
            copied.append(layer.name)
    return copied


def _set_classes(train, validation, model_kwargs):
    names = model_kwargs.get("label_names", train.label_names)
    count = model_kwargs.get("num_classes") or (
        len(names) if names is not None else int(np.max(train.labels)) + 1
    )
    for name, split in (("train", train), ("validation", validation)):
        labels = np.asarray(split.labels)
        bad = np.flatnonzero((labels < 0) | (labels >= count))
        if bad.size:
            raise ValueError(
                f"Example {int(bad[0])} of the {name} split has label "
                f"{int(labels[bad[0]])}, outside the {count} classes "
                f"0-{count - 1}."
            )
    model_kwargs["num_classes"] = max(count, 2)
    model_kwargs["label_names"] = None if names is None else tuple(names)
