"""Sentence-level SST-2 and SST-5 splits with no test sentence trained on.

The Stanford Sentiment Treebank (Socher et al. 2013) is read from two
files as `../shared/data` holds them (`DATA_FILES`, relative to a data
root): `sst5/train.tsv`, the 8,544 training sentences with fine-grained
labels (0 very negative .. 4 very positive, cased, PTB tokens), and
`sst2/train.tsv` + `sst2/dev.tsv`, GLUE's SST-2 training set: 67,349
labelled phrases of the same training trees (lower-cased, binary), the
whole sentences among them.

`load_sst_splits` holds out whole sentences of `sst5/train.tsv` with one
seeded permutation: `test_fraction` of them for the test set and
`validation_fraction` for validation (early stopping and every choice),
the same sentences for both tasks. For SST-2 the neutral sentences
(label 2) are dropped and 0-1 map to negative, 3-4 to positive. Every
phrase of the SST-2 files that occurs inside a held-out sentence (test or
validation: the same token sequence, contiguous, after `normalise_tokens`)
is removed from training, so that no part of a test sentence is trained
on (`remove_contained_phrases`). Training then has the remaining phrases
(with `phrases=True`, SST-2 only) and the remaining sentences, each
distinct phrase once.
"""

import os

import numpy as np

from keras_attention.data.sentiment import read_sentiment_tsv
from keras_attention.data.splits import SentimentSplit
from keras_attention.data.splits import split_off

#: The files `load_sst_splits` reads, relative to its `data_root`.
DATA_FILES = ("sst5/train.tsv", "sst2/train.tsv", "sst2/dev.tsv")
#: Class names of the two tasks.
SST2_NAMES = ("negative", "positive")
SST5_NAMES = (
    "very negative",
    "negative",
    "neutral",
    "positive",
    "very positive",
)
TASKS = ("sst2", "sst5")
#: Where to get the files when they are missing.
SOURCE = (
    "SST-2 train/dev TSVs as GLUE distributes them and the SST-5 training "
    "sentences as sentence<TAB>label (see the README's Sentiment "
    "classifier section)"
)


def normalise_tokens(sentence: str) -> tuple[str, ...]:
    """The tokens that phrases are matched on: lower-cased, split on spaces.

    Both files are tokenised the same way (PTB tokens separated by single
    spaces); SST-5 keeps the case and SST-2 does not.
    """
    return tuple(sentence.lower().split())


def contiguous_phrases(sentences) -> set[tuple[str, ...]]:
    """Every contiguous token sequence of every sentence (normalised)."""
    phrases = set()
    for sentence in sentences:
        tokens = normalise_tokens(sentence)
        for start in range(len(tokens)):
            for stop in range(start + 1, len(tokens) + 1):
                phrases.add(tokens[start:stop])
    return phrases


def remove_contained_phrases(split: SentimentSplit, held_out) -> SentimentSplit:
    """The examples of `split` that occur inside none of `held_out`.

    Args:
        split: Phrases (or sentences) to filter.
        held_out: Sentences of which no part may remain in `split`.

    Returns:
        The examples of `split` whose normalised tokens are no contiguous
        part of any held-out sentence, in their order.
    """
    inside = contiguous_phrases(held_out)
    keep = [
        i
        for i, sentence in enumerate(split.sentences)
        if normalise_tokens(sentence) not in inside
    ]
    return split.take(keep)


def to_binary(split: SentimentSplit) -> SentimentSplit:
    """SST-5 labels as SST-2's: drops 2, maps 0-1 to 0 and 3-4 to 1.

    The sentences are lower-cased as in the SST-2 files.
    """
    labels = np.asarray(split.labels)
    keep = np.flatnonzero(labels != 2)
    return SentimentSplit(
        [split.sentences[i].lower() for i in keep],
        (labels[keep] > 2).astype("int32"),
        None,
        SST2_NAMES,
    )


def missing_files(data_root: str) -> list[str]:
    """The paths of `DATA_FILES` under `data_root` that are absent."""
    paths = [os.path.join(data_root, name) for name in DATA_FILES]
    return [path for path in paths if not os.path.isfile(path)]


def _distinct(split: SentimentSplit) -> SentimentSplit:
    """Each normalised phrase once (its first occurrence)."""
    seen = set()
    keep = []
    for i, sentence in enumerate(split.sentences):
        tokens = normalise_tokens(sentence)
        if tokens and tokens not in seen:
            seen.add(tokens)
            keep.append(i)
    return split.take(keep)


def _read(path, names) -> SentimentSplit:
    sentences, labels = read_sentiment_tsv(path)
    bad = np.flatnonzero(labels >= len(names))
    if bad.size:
        raise ValueError(
            f"{path}, line {int(bad[0]) + 2}: label {int(labels[bad[0]])} "
            f"is not one of the {len(names)} classes 0-{len(names) - 1}."
        )
    return SentimentSplit(sentences, labels, None, names)


def _concatenate(first: SentimentSplit, second: SentimentSplit):
    return SentimentSplit(
        first.sentences + second.sentences,
        np.concatenate([first.labels, second.labels]).astype("int32"),
        None,
        first.label_names,
    )


def load_sst_splits(
    task: str = "sst2",
    data_root: str = os.path.join("..", "shared", "data"),
    validation_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 0,
    phrases: bool = True,
) -> dict[str, SentimentSplit]:
    """Sentence-level train/validation/test splits of SST-2 or SST-5.

    See the module docstring for how the sentences are held out and the
    phrases removed.

    Args:
        task: `"sst2"` (binary) or `"sst5"` (five classes).
        data_root: Folder holding `DATA_FILES`. Defaults to
            `../shared/data`.
        validation_fraction: Share of the SST-5 sentences held out for
            validation. Defaults to `0.1`.
        test_fraction: Share held out for the test. Defaults to `0.1`.
        seed: Seed of the permutation. Defaults to `0`.
        phrases: For SST-2, train on the SST-2 phrases (those outside the
            held-out sentences) as well as the training sentences.
            Defaults to `True`. SST-5 trains on sentences only.

    Returns:
        A dict with `"train"`, `"validation"` and `"test"`
        `SentimentSplit`s, named by `SST2_NAMES` or `SST5_NAMES`.

    Raises:
        ValueError: An unknown `task`, bad fractions or labels.
        FileNotFoundError: A file of `DATA_FILES` is absent.
    """
    if task not in TASKS:
        raise ValueError(
            f"Received an invalid value for argument `task`, expected one "
            f"of {TASKS}. Received: task={task!r}"
        )
    missing = missing_files(data_root)
    if missing:
        raise FileNotFoundError(
            f"SST data not found: {', '.join(missing)}; expected the {SOURCE}."
        )
    sentences = _read(os.path.join(data_root, DATA_FILES[0]), SST5_NAMES)
    train, test, validation = split_off(
        sentences, (test_fraction, validation_fraction), seed=seed
    )
    held_out = test.sentences + validation.sentences
    if task == "sst5":
        train = remove_contained_phrases(_distinct(train), held_out)
        return {"train": train, "validation": validation, "test": test}
    train = to_binary(train)
    if phrases:
        sst2 = [
            _read(os.path.join(data_root, n), SST2_NAMES)
            for n in DATA_FILES[1:]
        ]
        train = _concatenate(train, _concatenate(*sst2))
    train = remove_contained_phrases(_distinct(train), held_out)
    return {
        "train": train,
        "validation": to_binary(validation),
        "test": to_binary(test),
    }
