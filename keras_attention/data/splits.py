"""Training, validation and test splits of the sentiment data.

`load_sentiment_splits` loads the data of the sentiment example. When a
split is not given, it is carved out of the training data with a seeded
permutation (`split_off`): `validation_fraction` (default 10%) and
`test_fraction` (default 10%) of the training examples go to validation
and test, the rest stays for training. Synthetic data is generated with
`num_examples` sentences and split the same way.
"""

import dataclasses

import numpy as np

from keras_attention.data.named import load_tfds_sentiment
from keras_attention.data.sentiment import make_synthetic_sentiment
from keras_attention.data.sentiment import read_sentiment_tsv

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
    if data == "imdb":
        return load_tfds_sentiment("imdb_reviews", "train", data_dir)
    if data == "sst2":
        return load_tfds_sentiment("glue/sst2", "train", data_dir)
    return read_sentiment_tsv(data)


def _read_held_out(data, path, data_dir):
    if path is not None:
        return read_sentiment_tsv(path)
    # The named sets come with a labelled held-out split of their own.
    if data == "imdb":
        return load_tfds_sentiment("imdb_reviews", "test", data_dir)
    return load_tfds_sentiment("glue/sst2", "validation", data_dir)


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
    if data == "synthetic":
        generated = make_synthetic_sentiment(num_examples, seed=seed)
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
        validation_split = SentimentSplit(*read_sentiment_tsv(validation))
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
