"""Training, validation and test splits of the sentiment data.

`load_sentiment_splits` loads the data of the sentiment example. When a
split is not given, it is carved out of the training data with a seeded
permutation (`split_off`): `validation_fraction` (default 10%) and
`test_fraction` (default 10%) of the training examples go to validation
and test, the rest stays for training. Synthetic data is generated with
`num_examples` sentences and split the same way.

Classes. Labels are integers `0 .. num_classes - 1`, any number of
classes. The classes are named by `label_names` (label `i` is
`label_names[i]`); without names, the synthetic data and the named sets
(`imdb`, `sst2`) are `("negative", "positive")` and a file's classes are
`"0", "1", ...` up to its largest training label. Every split's labels are
checked against them when read (a bad one is a `ValueError` naming the
file and line, or the dataset and example), a training set with a single
class is refused and any other split with a single class gets a warning.
"""

import dataclasses
import warnings

import numpy as np

from keras_attention.data.named import load_tfds_sentiment
from keras_attention.data.sentiment import make_synthetic_sentiment
from keras_attention.data.sentiment import read_sentiment_tsv
from keras_attention.text import has_words

#: Default number of synthetic sentences before the split.
SYNTHETIC_EXAMPLES = 6000
VALIDATION_FRACTION = 0.1
TEST_FRACTION = 0.1


@dataclasses.dataclass
class SentimentSplit:
    """One split: sentences, integer labels and, if known, cue masks.

    `label_names`, when set, names the classes: label `i` is
    `label_names[i]` (`load_sentiment_splits` sets it on every split).
    """

    sentences: list[str]
    labels: np.ndarray
    cue_masks: list[np.ndarray] | None = None
    label_names: tuple[str, ...] | None = None

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
            self.label_names,
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


_NAMED = {
    "imdb": ("imdb_reviews", "train", "test"),
    "sst2": ("glue/sst2", "train", "validation"),
}
#: Class names of the synthetic data and of the named sets.
SENTIMENT_NAMES = ("negative", "positive")


@dataclasses.dataclass
class _Read:
    """Labels as read, with where they came from (for error messages)."""

    sentences: list
    labels: np.ndarray
    source: str
    from_file: bool

    def where(self, index: int) -> str:
        # A TSV row `i` is on line `i + 2`: the header is line 1, and a
        # blank line before a row is refused by the reader.
        if self.from_file:
            return f"{self.source}, line {index + 2}"
        return f"{self.source}, example {index}"


def _read_tsv(path):
    return _Read(*read_sentiment_tsv(path), str(path), True)


def _read_named(data, which, data_dir):
    name, *splits = _NAMED[data]
    split = splits[which]
    sentences, labels = load_tfds_sentiment(name, split, data_dir)
    return _Read(sentences, labels, f"{name} ({split})", False)


def as_label_names(label_names) -> tuple[str, ...] | None:
    """`label_names` as a tuple of strings (label `i` is entry `i`).

    Args:
        label_names: `None`, a list or tuple of distinct non-empty strings,
            or a dict from every label `0 .. k - 1` to its name.

    Returns:
        A tuple of at least two names, or `None`.

    Raises:
        ValueError: naming `label_names` and the value received.
    """
    if label_names is None:
        return None
    names = label_names
    if isinstance(names, dict):
        if sorted(names) != list(range(len(names))):
            raise ValueError(
                "Received an invalid value for argument `label_names`: a "
                "dict must map every label 0, 1, ..., k - 1 to a name. "
                f"Received: label_names={label_names!r}"
            )
        names = [names[i] for i in range(len(names))]
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
        names = None
    elif not all(isinstance(n, str) and n.strip() for n in names):
        names = None
    if names is None or len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(
            "Received an invalid value for argument `label_names`, expected "
            "at least two distinct non-empty names (a list, or a dict from "
            f"label to name). Received: label_names={label_names!r}"
        )
    return tuple(n.strip() for n in names)


def _check_range(read: _Read, names, known: str) -> None:
    bad = np.flatnonzero(np.asarray(read.labels) >= len(names))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{read.where(i)}: label {int(read.labels[i])} is not one of the "
            f"{len(names)} classes 0-{len(names) - 1} ({known}: "
            f"{', '.join(names)})."
        )


def _class_names(train: _Read, label_names, default):
    """The class names, checked against the training labels."""
    names = as_label_names(label_names)
    if names is not None:
        _check_range(train, names, "label_names")
        return names
    largest = int(np.max(train.labels))
    if default is not None and largest < len(default):
        return default
    return tuple(str(i) for i in range(largest + 1))


def _check_classes(name, split, source, names):
    """Refuses a one-class training set; warns on other one-class sets."""
    present = np.unique(np.asarray(split.labels))
    if present.size == 1:
        only = names[int(present[0])]
        message = (
            f"the {name} data ({source}) has a single class: all its "
            f"{len(split.labels)} labels are {int(present[0])} ({only!r})"
        )
        if name == "train":
            raise ValueError(
                f"{message}; a classifier needs at least two classes to "
                "learn from."
            )
        warnings.warn(f"{message}; its accuracy says little.", stacklevel=3)
    missing = sorted(set(range(len(names))) - set(present.tolist()))
    if name == "train" and missing:
        warnings.warn(
            f"the training data ({source}) has no example of class "
            f"{', '.join(repr(names[i]) for i in missing)}; the model will "
            "not learn to predict it.",
            stacklevel=3,
        )


def _check_words(train: _Read) -> None:
    """Refuses training data without a single word (`text.check_words`)."""
    if not any(has_words(sentence) for sentence in train.sentences):
        raise ValueError(
            f"the training data ({train.source}) holds no word (a letter "
            f"or a digit) in any of its {len(train.sentences)} sentences: "
            "there is no vocabulary to learn."
        )


def load_sentiment_splits(
    data: str = "synthetic",
    validation: str | None = None,
    test: str | None = None,
    num_examples: int = SYNTHETIC_EXAMPLES,
    validation_fraction: float = VALIDATION_FRACTION,
    test_fraction: float = TEST_FRACTION,
    seed: int = 0,
    data_dir: str | None = None,
    label_names=None,
) -> dict[str, SentimentSplit]:
    """Loads training, validation and test data for the sentiment example.

    Labels may have any number of classes (module docstring): they are
    checked against `label_names` (or the classes of the training data)
    as they are read, and every returned split carries the names.

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
        label_names: Names of the classes, label `i` being `label_names[i]`
            (a list, or a dict from label to name); `None` infers them
            (module docstring).

    Returns:
        A dict with `"train"`, `"validation"` and `"test"`
        `SentimentSplit`s.

    Raises:
        ValueError: A label outside the classes (naming the file and line
            and the label), a training set with a single class, or bad
            `label_names`.
    """
    default = None if data not in ("synthetic", *_NAMED) else SENTIMENT_NAMES
    cue_masks = None
    if data == "synthetic":
        generated = make_synthetic_sentiment(num_examples, seed=seed)
        train = _Read(
            list(generated.sentences), generated.labels, "synthetic", False
        )
        cue_masks = generated.cue_masks
    elif data in _NAMED:
        train = _read_named(data, 0, data_dir)
    else:
        train = _read_tsv(data)
    names = _class_names(train, label_names, default)
    held_out = {}
    if test is not None:
        held_out["test"] = _read_tsv(test)
    elif data in _NAMED:
        # The named sets come with a labelled held-out split of their own.
        held_out["test"] = _read_named(data, 1, data_dir)
    if validation is not None:
        held_out["validation"] = _read_tsv(validation)
    known = "label_names" if label_names is not None else "as in training"
    for read in held_out.values():
        _check_range(read, names, known)
    sources = {name: read.source for name, read in held_out.items()}
    _check_classes("train", train, train.source, names)
    _check_words(train)
    splits = {
        name: SentimentSplit(read.sentences, read.labels, None, names)
        for name, read in held_out.items()
    }
    rest = SentimentSplit(train.sentences, train.labels, cue_masks, names)
    carved = [n for n in ("validation", "test") if n not in splits]
    fractions = {"validation": validation_fraction, "test": test_fraction}
    if carved:
        rest, *parts = split_off(
            rest, tuple(fractions[n] for n in carved), seed=seed
        )
        for name, part in zip(carved, parts, strict=True):
            splits[name] = part
            sources[name] = f"{fractions[name]:.0%} of {train.source}"
    sources["train"] = train.source
    splits["train"] = rest
    for name in ("validation", "test"):
        _check_classes(name, splits[name], sources[name], names)
    return {name: splits[name] for name in ("train", "validation", "test")}
