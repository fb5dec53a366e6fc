"""Training, validation and test splits of the sentiment data."""

import numpy as np
import pytest

from keras_attention.data import splits as splits_lib


def _split(n):
    return splits_lib.SentimentSplit(
        [f"sentence {i}" for i in range(n)], np.arange(n) % 2
    )


def _write_tsv(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        for sentence, label in rows:
            f.write(f"{sentence}\t{label}\n")
    return str(path)


def test_split_off_is_seeded_disjoint_and_complete():
    rest, validation, test = splits_lib.split_off(_split(100), (0.1, 0.2), 3)
    assert (len(rest), len(validation), len(test)) == (70, 10, 20)
    names = rest.sentences + validation.sentences + test.sentences
    assert sorted(names) == sorted(_split(100).sentences)
    again = splits_lib.split_off(_split(100), (0.1, 0.2), 3)
    assert again[1].sentences == validation.sentences
    other = splits_lib.split_off(_split(100), (0.1, 0.2), 4)
    assert other[1].sentences != validation.sentences


@pytest.mark.parametrize("fractions", [(0.5, 0.5), (0.0,), (-0.1,)])
def test_split_off_rejects_bad_fractions(fractions):
    with pytest.raises(ValueError, match="fractions"):
        splits_lib.split_off(_split(10), fractions)


def test_split_off_needs_training_examples_left():
    with pytest.raises(ValueError, match="keep any for training"):
        splits_lib.split_off(_split(2), (0.1, 0.1))


def test_synthetic_splits_keep_cue_masks():
    splits = splits_lib.load_sentiment_splits("synthetic", num_examples=200)
    assert [len(s) for s in splits.values()] == [160, 20, 20]
    for split in splits.values():
        assert len(split.cue_masks) == len(split)
        for sentence, mask in zip(
            split.sentences, split.cue_masks, strict=True
        ):
            assert len(sentence.split()) == len(mask)


def test_tsv_splits_use_given_files_or_carve_them_out(tmp_path):
    rows = [(f"film {i}", i % 2) for i in range(50)]
    train = _write_tsv(tmp_path / "train.tsv", rows)
    dev = _write_tsv(tmp_path / "dev.tsv", rows[:7])
    given = splits_lib.load_sentiment_splits(train, validation=dev, test=dev)
    assert [len(s) for s in given.values()] == [50, 7, 7]
    assert given["train"].cue_masks is None
    carved = splits_lib.load_sentiment_splits(train, test=dev)
    assert [len(s) for s in carved.values()] == [45, 5, 7]
    both = splits_lib.load_sentiment_splits(train, seed=1)
    assert [len(s) for s in both.values()] == [40, 5, 5]
