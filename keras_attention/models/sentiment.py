"""A sentence classifier built on structured self-attention (Lin et al.).

`build_sentiment_classifier` assembles the model of the sentiment example:
raw strings → the adapted `TextVectorization` (inside the model, so a saved
`.keras` file takes raw text) → `Embedding(mask_zero=True)` → a BiLSTM →
`keras_attention.StructuredSelfAttention` → an MLP → softmax. The helpers
below read the attention back per sentence and score it: how much of it
lands on the tokens that decide the label (`attention_on_cues`) and how
much the hops repeat each other (`attention_redundancy`).

Training. On every backend and under every strategy the model is fit
through `token_id_model(model)`, its view from token ids on, with the
vectorizer applied in the `tf.data` pipeline (`make_dataset`), as Keras
recommends for distributed training; the model that is returned, saved
and exported is the raw-string one, which shares the trained layers.
`train_sentiment_classifier`, `evaluate_sentiment_classifier` and
`save_attention_report` are the example's steps, on the scaffold of
`keras_attention.models.fitting`.

Backends. Only TensorFlow runs string tensors inside a model. On JAX (and
PyTorch) the same model is built, saved and loaded (the `.keras` file is
identical: raw strings in) and run through `token_id_model(model)` with
the vectorizer applied eagerly; `predict_sentiment` does this by itself.
"""

import os
import re
import warnings

import keras
import numpy as np

from keras_attention import text
from keras_attention.layers.structured import StructuredSelfAttention
from keras_attention.models import distribute
from keras_attention.models import fitting

#: Keys of the model's output dict, in `keras.tree.flatten` (sorted) order.
OUTPUT_NAMES = ("attention", "embedding", "probabilities")

# A whitespace token made only of what the vectorizer strips yields no
# position.
_PUNCTUATION = re.compile(text.STRIP_PUNCTUATION_REGEX)


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
    """
    names = getattr(model, "label_names", None)
    if names is not None:
        return tuple(names)
    count = model.get_layer("probabilities").output.shape[-1]
    return tuple(str(i) for i in range(count))


def predict_labels(model, sentences, batch_size=64):
    """The predicted class name of each sentence.

    Args:
        model: A model from `build_sentiment_classifier` (or loaded from
            its `.keras` file).
        sentences: A string, a list of strings or a NumPy string array.
        batch_size: Sentences per call. Defaults to `64`.

    Returns:
        A list with one name (`class_names(model)`) per sentence.
    """
    probabilities, _ = predict_sentiment(
        model, text.as_text_list(sentences, "sentences"), batch_size=batch_size
    )
    names = class_names(model)
    return [names[i] for i in probabilities.argmax(axis=-1)]


def classifier_for_training(model):
    """The probabilities-only view of `model`, sharing its layers.

    Compile and fit this view (`sparse_categorical_crossentropy`,
    `accuracy`): its loss is on the class probabilities alone, plus the
    attention penalty that the layer adds. Training it trains `model`.
    """
    return keras.Model(
        model.input,
        model.get_layer("probabilities").output,
        name=f"{model.name}_probabilities",
    )


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
    return keras.Model(
        token_ids, after_vectorizer(token_ids), name=f"{model.name}_token_ids"
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
    """
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


def cue_positions(sentence, cue_mask, num_positions=None):
    """Maps a per-whitespace-token cue mask onto the model's positions.

    `TextVectorization` strips punctuation before splitting on whitespace,
    so a token made only of punctuation (`"--"`, `","`) has no position and
    the tokens after it move left. This follows that rule.

    Args:
        sentence: The sentence, as given to the model.
        cue_mask: Booleans, one per whitespace token of `sentence`.
        num_positions: The model's number of positions for the sentence
            (e.g. from `predict_sentiment`); the mask is truncated to it.

    Returns:
        A boolean array with one entry per model position.
    """
    words = sentence.split()
    cue_mask = np.asarray(cue_mask, dtype=bool)
    if len(words) != len(cue_mask):
        raise ValueError(
            f"The cue mask has {len(cue_mask)} entries but the sentence has "
            f"{len(words)} whitespace tokens: {sentence!r}"
        )
    kept = [bool(_PUNCTUATION.sub("", word)) for word in words]
    positions = cue_mask[np.array(kept, dtype=bool)]
    if num_positions is not None:
        positions = positions[:num_positions]
    return positions


def attention_on_cues(attention, sentences, cue_masks):
    """Mean share of the attention (averaged over hops) on cue tokens.

    For each sentence the weights `(num_hops, length)` are averaged over
    the hops into one distribution over its positions; its mass on the cue
    positions is the sentence's share. Sentences with no attention at all
    (empty after vectorization) are skipped.

    Args:
        attention: One `(num_hops, length)` array per sentence, as from
            `predict_sentiment`.
        sentences: The sentences.
        cue_masks: One boolean array per sentence, one entry per
            whitespace token, `True` on the tokens that decide the label.

    Returns:
        The mean share, a float in `[0, 1]`.
    """
    shares = []
    for weights, sentence, mask in zip(
        attention, sentences, cue_masks, strict=True
    ):
        weights = np.asarray(weights, dtype="float64").mean(axis=0)
        cues = cue_positions(sentence, mask, num_positions=weights.shape[0])
        if cues.shape[0] != weights.shape[0]:
            raise ValueError(
                f"{weights.shape[0]} attention positions but "
                f"{cues.shape[0]} tokens after vectorization: {sentence!r}"
            )
        total = weights.sum()
        if total > 0:
            shares.append(weights[cues].sum() / total)
    return float(np.mean(shares)) if shares else float("nan")


def attention_redundancy(attention):
    """Mean off-diagonal entry of `AAᵀ`: how much the hops overlap.

    0 when the hops attend to disjoint positions, 1 when every hop puts all
    its weight on the same single token. This is the redundancy that the
    penalty `‖AAᵀ − I‖²_F` discourages.

    Args:
        attention: One `(num_hops, length)` array per sentence.

    Returns:
        The mean over sentences of the mean off-diagonal of `AAᵀ` (`0.0`
        for a single hop).
    """
    values = []
    for weights in attention:
        weights = np.asarray(weights, dtype="float64")
        hops = weights.shape[0]
        if hops < 2:
            return 0.0
        gram = weights @ weights.T
        values.append((gram.sum() - np.trace(gram)) / (hops * (hops - 1)))
    return float(np.mean(values)) if values else float("nan")


# Training, evaluation and reports of the example, on the shared scaffold
# (`keras_attention.models.fitting`).


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


def evaluate_sentiment_classifier(model, split, batch_size=64):
    """Accuracy and attention scores of `model` on `split`.

    Args:
        model: A model from `build_sentiment_classifier`.
        split: A `SentimentSplit`.
        batch_size: Sentences per call. Defaults to `64`.

    Returns:
        `(metrics, probabilities, attention)`: a dict with `accuracy`,
        `examples`, `attention_redundancy` and, when the split has cue
        masks, `attention_on_cues`; then what `predict_sentiment` returns.
    """
    probabilities, attention = predict_sentiment(
        model, split.sentences, batch_size=batch_size
    )
    predictions = probabilities.argmax(axis=-1)
    metrics = {
        "accuracy": float(np.mean(predictions == np.asarray(split.labels))),
        "examples": len(split),
        "attention_redundancy": attention_redundancy(attention),
    }
    if split.cue_masks is not None:
        metrics["attention_on_cues"] = attention_on_cues(
            attention, split.sentences, split.cue_masks
        )
    return metrics, probabilities, attention


def balanced_indices(labels, count):
    """Up to `count` indices, taking the classes in turn (round robin).

    Each class gives its examples in their order in `labels`, so the
    result has as many examples of each class as possible: with 6 and two
    classes, three of each (if both have three).
    """
    labels = np.asarray(labels)
    queues = [list(np.flatnonzero(labels == c)) for c in np.unique(labels)]
    chosen = []
    while len(chosen) < count and any(queues):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(int(queue.pop(0)))
    return chosen


def save_attention_report(
    model, split, probabilities, attention, output_dir, num_sentences=6
):
    """Writes `attention.png` (hops × tokens), `attention.html` and more.

    `num_sentences` sentences of `split` are shown, as many of each class
    as possible (`balanced_indices`), each titled with its true and its
    predicted class name (`class_names(model)`). The PNG has one heatmap
    per sentence (a row per hop), all on one colour scale; the HTML page
    highlights each token by its weight averaged over the hops (and says
    so); `attention_hops.html` is the interactive head view of the first
    sentence's hops and `rollout.txt` a rollout line per sentence
    (`keras_attention.visualize.save_hop_report`).

    Returns:
        The paths written; none, with a warning, if no sentence of `split`
        has a token to show.
    """
    from keras_attention import visualize
    from keras_attention.data.sentiment import tokens_for

    vectorizer = vectorizer_of(model)
    names = class_names(model)
    tokens_list, weights_list, titles = [], [], []
    for i in balanced_indices(split.labels, num_sentences):
        tokens = tokens_for(vectorizer, split.sentences[i])
        weights = attention[i]
        if not tokens or len(tokens) != weights.shape[1]:
            continue
        tokens_list.append(tokens)
        weights_list.append(weights)
        predicted = int(probabilities[i].argmax())
        titles.append(
            f"true: {names[int(split.labels[i])]}, predicted: "
            f"{names[predicted]} (p={float(probabilities[i, predicted]):.2f})"
        )
    if not weights_list:
        warnings.warn(
            "attention.png and attention.html not written: none of the "
            f"{len(split.sentences)} test sentences has a token to show "
            "(only punctuation or blanks).",
            stacklevel=2,
        )
        return []
    png = os.path.join(output_dir, "attention.png")
    page = os.path.join(output_dir, "attention.html")
    hops = [[f"hop {h + 1}" for h in range(w.shape[0])] for w in weights_list]
    visualize.plot_attention_grid(
        weights_list,
        tokens_list,
        hops,
        titles=titles,
        path=png,
        colorbar_label="attention weight (each hop sums to 1)",
    )
    num_hops = weights_list[0].shape[0] if weights_list else 0
    visualize.save_attention_html(
        page,
        tokens_list,
        [w.mean(axis=0) for w in weights_list],
        titles,
        note=f"The weights are averaged over the model's {num_hops} "
        "attention hops (attention.png shows each hop).",
    )
    # attention_hops.html (interactive, per hop) and rollout.txt.
    views = visualize.save_hop_report(
        output_dir, tokens_list, weights_list, titles
    )
    return [png, page, *views]
