"""Training and evaluation of the sentiment classifier, shared by scripts.

The sentiment example (`examples/sentiment_classifier.py`) and the SST-2
benchmark are thin: they parse arguments and call the functions here,
which load and split the data, pick a distribution (`tf.distribute` or
`keras.distribution`, see `keras_attention.models.distribute`), train with
progress bar, early stopping, checkpoints and resumable backups, and score
the model (accuracy, where the attention lands, how redundant the hops
are). TensorFlow is imported inside the functions that need it (`tf.data`,
`tf.distribute`), so importing this module does not.

Splits. When a split is not given, it is carved out of the training data
with a seeded permutation: `validation_fraction` (default 10%) and
`test_fraction` (default 10%) of the training examples go to validation
and test, the rest stays for training. Synthetic data is generated with
`num_examples` sentences and split the same way.
"""

import dataclasses
import os
import time

import keras
import numpy as np

from keras_attention.models import distribute
from keras_attention.models import sentiment as sentiment_lib

#: Default number of synthetic sentences before the split.
SYNTHETIC_EXAMPLES = 6000
VALIDATION_FRACTION = 0.1
TEST_FRACTION = 0.1


@dataclasses.dataclass
class SentimentSplit:
    """One split: sentences, integer labels and, if known, cue masks."""

    sentences: list[str]
    labels: np.ndarray
    cue_masks: list[np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.sentences)

    def take(self, indices) -> "SentimentSplit":
        """The examples at `indices`, in that order."""
        return SentimentSplit(
            [self.sentences[i] for i in indices],
            np.asarray(self.labels)[indices],
            None
            if self.cue_masks is None
            else [self.cue_masks[i] for i in indices],
        )


def split_off(
    split: SentimentSplit, fractions: tuple[float, ...], seed: int = 0
) -> list[SentimentSplit]:
    """Splits off shares of `split` with a seeded permutation.

    Args:
        split: The examples to divide.
        fractions: Share of the examples for each split carved out; each
            gets at least one example. The rest is returned first.
        seed: Seed of the permutation. Defaults to `0`.

    Returns:
        `[rest, part_1, part_2, ...]`.
    """
    if sum(fractions) >= 1 or any(f <= 0 for f in fractions):
        raise ValueError(
            "Received invalid split fractions: each must be positive and "
            f"they must sum to less than 1. Received: fractions={fractions}"
        )
    order = np.random.default_rng(seed).permutation(len(split))
    sizes = [max(1, int(round(f * len(split)))) for f in fractions]
    if sum(sizes) >= len(split):
        raise ValueError(
            f"Cannot split {len(split)} examples into {fractions} and keep "
            "any for training."
        )
    parts = []
    start = 0
    for size in sizes:
        parts.append(split.take(order[start : start + size]))
        start += size
    return [split.take(order[start:]), *parts]


def _read(data, data_dir):
    from keras_attention import data as data_lib

    if data == "imdb":
        return data_lib.load_tfds_sentiment("imdb_reviews", "train", data_dir)
    if data == "sst2":
        return data_lib.load_tfds_sentiment("glue/sst2", "train", data_dir)
    return data_lib.read_sentiment_tsv(data)


def _read_held_out(data, path, data_dir):
    from keras_attention import data as data_lib

    if path is not None:
        return data_lib.read_sentiment_tsv(path)
    # The named sets come with a labelled held-out split of their own.
    if data == "imdb":
        return data_lib.load_tfds_sentiment("imdb_reviews", "test", data_dir)
    return data_lib.load_tfds_sentiment("glue/sst2", "validation", data_dir)


def load_sentiment_splits(
    data: str = "synthetic",
    validation: str | None = None,
    test: str | None = None,
    num_examples: int = SYNTHETIC_EXAMPLES,
    validation_fraction: float = VALIDATION_FRACTION,
    test_fraction: float = TEST_FRACTION,
    seed: int = 0,
    data_dir: str | None = None,
) -> dict[str, SentimentSplit]:
    """Loads training, validation and test data for the sentiment example.

    Args:
        data: `"synthetic"` (generated, with cue masks), `"imdb"` or
            `"sst2"` (TensorFlow Datasets; their own test /
            validation split serves as test set when `test` is not
            given), or the path of a `sentence<TAB>label` TSV file.
        validation: Optional TSV path of the validation data; otherwise
            `validation_fraction` of the training data.
        test: Optional TSV path of the test data; otherwise (except for
            the named sets) `test_fraction` of the training data.
        num_examples: Synthetic sentences to generate, before splitting.
        validation_fraction: Share of the training data held out for
            validation when `validation` is not given. Defaults to `0.1`.
        test_fraction: Share held out for testing when there is no test
            set. Defaults to `0.1`.
        seed: Seed of the synthetic data and of the splits.
        data_dir: TensorFlow Datasets directory for `"imdb"` / `"sst2"`.

    Returns:
        A dict with `"train"`, `"validation"` and `"test"`
        `SentimentSplit`s.
    """
    from keras_attention import data as data_lib

    if data == "synthetic":
        generated = data_lib.make_synthetic_sentiment(num_examples, seed=seed)
        train = SentimentSplit(
            list(generated.sentences), generated.labels, generated.cue_masks
        )
    else:
        train = SentimentSplit(*_read(data, data_dir))
    if test is not None or data in ("imdb", "sst2"):
        held_out = SentimentSplit(*_read_held_out(data, test, data_dir))
        test_split = held_out
        fractions = ()
    else:
        test_split = None
        fractions = (test_fraction,)
    if validation is not None:
        validation_split = SentimentSplit(
            *data_lib.read_sentiment_tsv(validation)
        )
    else:
        validation_split = None
        fractions = (validation_fraction, *fractions)
    if fractions:
        train, *parts = split_off(train, fractions, seed=seed)
        if validation_split is None:
            validation_split = parts.pop(0)
        if test_split is None:
            test_split = parts.pop(0)
    return {"train": train, "validation": validation_split, "test": test_split}


def get_strategy(name: str = "none"):
    """The distribution for `--distribute`, on the current backend.

    See `keras_attention.models.distribute.get_strategy`: on TensorFlow
    `"none"` is the default strategy, `"mirrored"` a
    `tf.distribute.MirroredStrategy` and `"multi-worker"` a
    `tf.distribute.MultiWorkerMirroredStrategy` (the cluster of
    `TF_CONFIG`); on JAX, `keras.distribution.DataParallel`.

    Args:
        name: `"none"`, `"mirrored"` or `"multi-worker"`.

    Returns:
        A `tf.distribute.Strategy`, a `keras.distribution.Distribution` or
        `None`. Build, compile and fit within
        `keras_attention.models.distribute.scope(strategy)`.
    """
    return distribute.get_strategy(name)


def worker_index() -> int:
    """This worker's index under `TF_CONFIG`; 0 for the chief (or alone).

    Without a `chief` task in the cluster, worker 0 acts as chief.
    """
    return distribute.tf_config_index()


def make_dataset(
    split: SentimentSplit,
    batch_size: int,
    shuffle: bool = False,
    seed: int | None = None,
    vectorizer=None,
):
    """A batched `tf.data.Dataset` of `(sentence, label)` pairs.

    With a `vectorizer`, the pairs are `(token_ids, label)` instead, the
    ids `int32` (for backends that cannot take strings). Sharded by data
    (not by file) under a multi-worker strategy.
    """
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(
        (
            tf.constant(split.sentences, dtype=tf.string),
            tf.constant(np.asarray(split.labels, dtype="int32")),
        )
    )
    if shuffle:
        dataset = dataset.shuffle(
            len(split), seed=seed, reshuffle_each_iteration=True
        )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    dataset = dataset.batch(batch_size)
    if vectorizer is not None:
        dataset = dataset.map(
            lambda text, label: (tf.cast(vectorizer(text), "int32"), label),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


@dataclasses.dataclass
class TrainingResult:
    """What `train_sentiment_classifier` returns."""

    model: keras.Model
    history: dict
    train_seconds: float
    epochs_trained: int


def train_sentiment_classifier(
    splits: dict[str, SentimentSplit],
    output_dir: str,
    epochs: int = 10,
    batch_size: int = 32,
    learning_rate: float = 1e-3,
    patience: int = 3,
    strategy=None,
    seed: int = 0,
    max_tokens: int | None = 20000,
    max_length: int | None = None,
    verbose="auto",
    callbacks=None,
    **model_kwargs,
) -> TrainingResult:
    """Adapts the vectorizer, builds, compiles and fits the classifier.

    The vectorizer is adapted on the training sentences only. The model is
    built and compiled inside `strategy.scope()`. Callbacks:
    `EarlyStopping` on the validation loss (with
    `restore_best_weights=True`), `ModelCheckpoint` of the best weights to
    `output_dir/checkpoint.weights.h5`, and `BackupAndRestore` to
    `output_dir/backup`, so that a run killed midway resumes from its last
    finished epoch when started again with the same arguments (the backup
    is deleted when training ends). Under a multi-worker strategy the
    workers other than the chief write their checkpoints and backups to
    `output_dir/worker-<index>/`.

    On backends other than TensorFlow, which cannot run string tensors in
    a model, the vectorizer runs in the `tf.data` pipeline instead and
    `token_id_model(model)` is fit; the returned model is the same
    raw-string model (see `keras_attention.models.sentiment`).

    Args:
        splits: `"train"` and `"validation"` `SentimentSplit`s.
        output_dir: Directory for checkpoints and backups (created).
        epochs: Most epochs to train. Defaults to `10`.
        batch_size: Global batch size. Defaults to `32`.
        learning_rate: Adam learning rate. Defaults to `1e-3`.
        patience: Epochs without a lower validation loss before stopping.
            Defaults to `3`.
        strategy: From `get_strategy`: a `tf.distribute.Strategy` or a
            `keras.distribution.Distribution`; defaults to no
            distribution.
        seed: Seed of the weights and of the shuffling. Defaults to `0`.
        max_tokens: Vocabulary size. Defaults to `20000`.
        max_length: Truncate sentences to this many tokens; `None` keeps
            them whole. Defaults to `None`.
        verbose: `fit` verbosity (`1` is the progress bar). Defaults to
            `"auto"`.
        callbacks: Extra Keras callbacks, run after the built-in ones.
        **model_kwargs: Passed to `build_sentiment_classifier`.

    Returns:
        A `TrainingResult` whose model is the three-output model of
        `build_sentiment_classifier` with the best validation weights.
    """
    from keras_attention import data as data_lib

    if strategy is None:
        strategy = get_strategy("none")
    keras.utils.set_random_seed(seed)
    work_dir = distribute.work_dir(output_dir, strategy)
    os.makedirs(work_dir, exist_ok=True)
    train, validation = splits["train"], splits["validation"]
    vectorizer = data_lib.make_text_vectorizer(
        train.sentences,
        max_tokens=max_tokens,
        output_sequence_length=max_length,
    )
    # Only TensorFlow runs the vectorizer inside the model; elsewhere it
    # runs in the tf.data pipeline and the model is fit from token ids on.
    on_strings = keras.backend.backend() == "tensorflow"
    pipeline_vectorizer = None if on_strings else vectorizer
    with distribute.scope(strategy):
        model = sentiment_lib.build_sentiment_classifier(
            vectorizer, **model_kwargs
        )
        if on_strings:
            trainer = sentiment_lib.classifier_for_training(model)
        else:
            trainer = sentiment_lib.token_id_model(
                model, probabilities_only=True
            )
        # Under a `keras.distribution`, filler rows with weight 0 even out
        # the last batch (`distribute.even_batches`); a weighted accuracy
        # leaves them out, and is the plain accuracy otherwise.
        trainer.compile(
            optimizer=keras.optimizers.Adam(learning_rate),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"] if on_strings else None,
            weighted_metrics=None if on_strings else ["accuracy"],
        )
    callbacks = [
        # First, so that an epoch is backed up before any later callback
        # can stop the run.
        keras.callbacks.BackupAndRestore(os.path.join(work_dir, "backup")),
        keras.callbacks.EarlyStopping(
            monitor="val_loss",
            patience=patience,
            restore_best_weights=True,
        ),
        keras.callbacks.ModelCheckpoint(
            os.path.join(work_dir, "checkpoint.weights.h5"),
            monitor="val_loss",
            save_best_only=True,
            save_weights_only=True,
        ),
        *(callbacks or []),
    ]
    start = time.perf_counter()
    with distribute.fit_scope(strategy, trainer):
        history = trainer.fit(
            distribute.even_batches(
                make_dataset(
                    train,
                    batch_size,
                    shuffle=True,
                    seed=seed,
                    vectorizer=pipeline_vectorizer,
                ),
                batch_size,
                strategy,
                sample_weight=True,
            ),
            validation_data=distribute.even_batches(
                make_dataset(
                    validation, batch_size, vectorizer=pipeline_vectorizer
                ),
                batch_size,
                strategy,
                sample_weight=True,
            ),
            epochs=epochs,
            callbacks=callbacks,
            # The dataset shuffles itself, with `seed`.
            shuffle=False,
            verbose=verbose,
        )
    seconds = time.perf_counter() - start
    return TrainingResult(
        model=model,
        history=dict(history.history),
        train_seconds=seconds,
        epochs_trained=len(history.history.get("loss", [])),
    )


def evaluate_sentiment_classifier(
    model, split: SentimentSplit, batch_size: int = 64
) -> tuple[dict, np.ndarray, list[np.ndarray]]:
    """Accuracy, and where the attention goes, on one split.

    Returns:
        `(metrics, probabilities, attention)`. `metrics` has `accuracy`,
        `examples`, `attention_redundancy` (see
        `sentiment.attention_redundancy`) and, when the split has cue
        masks, `attention_on_cues` (see `sentiment.attention_on_cues`).
    """
    probabilities, attention = sentiment_lib.predict_sentiment(
        model, split.sentences, batch_size=batch_size
    )
    predictions = probabilities.argmax(axis=-1)
    metrics = {
        "accuracy": float(np.mean(predictions == np.asarray(split.labels))),
        "examples": len(split),
        "attention_redundancy": sentiment_lib.attention_redundancy(attention),
    }
    if split.cue_masks is not None:
        metrics["attention_on_cues"] = sentiment_lib.attention_on_cues(
            attention, split.sentences, split.cue_masks
        )
    return metrics, probabilities, attention


def save_attention_report(
    model,
    split: SentimentSplit,
    probabilities: np.ndarray,
    attention: list[np.ndarray],
    output_dir: str,
    num_sentences: int = 6,
) -> list[str]:
    """Writes `attention.png` (hops × tokens) and `attention.html`.

    The first `num_sentences` sentences of `split` are shown: the PNG has
    one heatmap per sentence (a row per hop), the HTML page highlights each
    token by its weight averaged over the hops.

    Returns:
        The paths written.
    """
    from keras_attention import data as data_lib
    from keras_attention import visualize

    vectorizer = sentiment_lib._vectorizer_of(model)
    tokens_list, weights_list, titles = [], [], []
    for i in range(min(num_sentences, len(split))):
        tokens = data_lib.tokens_for(vectorizer, split.sentences[i])
        weights = attention[i]
        if not tokens or len(tokens) != weights.shape[1]:
            continue
        tokens_list.append(tokens)
        weights_list.append(weights)
        titles.append(
            f"label {int(split.labels[i])}, predicted "
            f"{int(probabilities[i].argmax())} "
            f"(p={float(probabilities[i].max()):.2f})"
        )
    png = os.path.join(output_dir, "attention.png")
    page = os.path.join(output_dir, "attention.html")
    hops = [[f"hop {h + 1}" for h in range(w.shape[0])] for w in weights_list]
    visualize.plot_attention_grid(
        weights_list, tokens_list, hops, titles=titles, path=png
    )
    visualize.save_attention_html(
        page, tokens_list, [w.mean(axis=0) for w in weights_list], titles
    )
    return [png, page]
