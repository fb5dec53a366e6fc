"""Training, validation and test splits of the sentiment data."""

import numpy as np
import pytest

from keras_attention.data import splits as splits_lib
from tests.data._tsv import write_tsv as _write_tsv


def _split(n):
    return splits_lib.SentimentSplit(
        [f"sentence {i}" for i in range(n)], np.arange(n) % 2
    )


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


def test_classes_are_inferred_from_training_labels_and_named(tmp_path):
    rows = [(f"s {i}", i % 3) for i in range(90)]
    train = _write_tsv(tmp_path / "train.tsv", rows)
    splits = splits_lib.load_sentiment_splits(train)
    for split in splits.values():
        assert split.label_names == ("0", "1", "2")
    names = {0: "bad", 1: "so-so", 2: "good"}
    splits = splits_lib.load_sentiment_splits(train, label_names=names)
    assert splits["test"].label_names == ("bad", "so-so", "good")
    assert splits_lib.load_sentiment_splits(num_examples=40)[
        "train"
    ].label_names == ("negative", "positive")


def test_every_split_is_checked_against_the_classes(tmp_path):
    rows = [(f"s {i}", i % 2) for i in range(9)]
    train = _write_tsv(tmp_path / "t.tsv", rows)
    three = _write_tsv(tmp_path / "d.tsv", [("a", 0), ("b", 1), ("c", 2)])
    # A held-out label that the training data never had.
    for where in ("validation", "test"):
        with pytest.raises(ValueError, match=r"d.tsv, line 4: label 2 is not"):
            splits_lib.load_sentiment_splits(train, **{where: three})
    # A training label outside the given names; the names are listed.
    with pytest.raises(
        ValueError, match=r"d.tsv, line 4: label 2 .*\(label_names: no, yes\)"
    ):
        splits_lib.load_sentiment_splits(three, label_names=["no", "yes"])


def test_single_class_training_data_is_refused(tmp_path):
    ones = _write_tsv(tmp_path / "ones.tsv", [("a film", 1)] * 12)
    with pytest.raises(ValueError, match="ones.tsv.*single class.* 1 "):
        splits_lib.load_sentiment_splits(ones)


def test_single_class_held_out_data_and_missing_classes_warn(tmp_path):
    rows = [(f"s {i}", i % 2) for i in range(60)]
    train = _write_tsv(tmp_path / "t.tsv", rows)
    ones = _write_tsv(tmp_path / "ones.tsv", [("a film", 1)] * 3)
    with pytest.warns(UserWarning, match=r"test data \(.*ones.tsv\) has a"):
        splits_lib.load_sentiment_splits(train, test=ones)
    with pytest.warns(UserWarning, match="no example of class 'c'"):
        splits_lib.load_sentiment_splits(train, label_names=["a", "b", "c"])


@pytest.mark.parametrize(
    "names", ["a,b", ["a"], ["a", "a"], ["a", ""], {0: "a", 2: "b"}, [1, 2]]
)
def test_bad_label_names_are_refused(names):
    with pytest.raises(ValueError, match="label_names"):
        splits_lib.as_label_names(names)
