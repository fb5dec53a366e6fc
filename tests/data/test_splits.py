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


# Sentence-level SST splits (keras_attention.data.sst) on a tiny fixture
# laid out as ../shared/data: SST-5 sentences (cased, five classes) and
# SST-2 phrases of the same sentences (lower-cased, binary).
_SST5 = [
    (f"Film {i} is {word} , Really .", label)
    for i, (word, label) in enumerate(
        [("awful", 0), ("dull", 1), ("plain", 2), ("fine", 3), ("great", 4)] * 4
    )
] + [("Really .", 3)]  # a part of every other sentence


def _sst_root(tmp_path):
    from keras_attention.data import sst

    (tmp_path / "sst5").mkdir()
    (tmp_path / "sst2").mkdir()
    _write_tsv(tmp_path / "sst5" / "train.tsv", _SST5)
    phrases = []
    for sentence, label in _SST5[:-1]:
        if label != 2:
            tokens = sentence.lower().split()
            binary = int(label > 2)
            # The whole sentence, a sub-phrase and a single word of it.
            phrases += [
                (" ".join(tokens), binary),
                (" ".join(tokens[:3]), binary),
                (tokens[2], binary),
            ]
    phrases.append(("a phrase of no sentence", 1))
    _write_tsv(tmp_path / "sst2" / "train.tsv", phrases[::2])
    _write_tsv(tmp_path / "sst2" / "dev.tsv", phrases[1::2])
    assert sorted(sst.DATA_FILES) == sorted(
        str(p.relative_to(tmp_path)) for p in tmp_path.glob("*/*.tsv")
    )
    return str(tmp_path)


def _inside_a_held_out_sentence(splits, phrase):
    """Whether `phrase` occurs, as whole tokens, in a held-out sentence."""
    held_out = splits["validation"].sentences + splits["test"].sentences
    return any(
        f" {' '.join(phrase.lower().split())} " in f" {s.lower()} "
        for s in held_out
    )


@pytest.mark.backend_independent
def test_sst_splits_hold_out_whole_sentences_and_their_phrases(tmp_path):
    from keras_attention.data import sst

    root = _sst_root(tmp_path)
    # Seed 0 leaves "Really ." in training, inside every held-out sentence.
    sst2 = sst.load_sst_splits("sst2", root, 0.2, 0.2, seed=0)
    sst5 = sst.load_sst_splits("sst5", root, 0.2, 0.2, seed=0)
    # One permutation for both tasks: 4 test and 4 validation sentences
    # of the 20, the neutral ones dropped for SST-2.
    for name in ("validation", "test"):
        assert len(sst5[name]) == 4
        assert sst2[name].sentences == [
            s.lower()
            for s, y in zip(
                sst5[name].sentences, sst5[name].labels, strict=True
            )
            if y != 2
        ]
        assert sst2[name].labels.tolist() == [
            int(y > 2) for y in sst5[name].labels if y != 2
        ]
    assert set(sst5["test"].sentences).isdisjoint(sst5["validation"].sentences)
    assert len(sst5["train"]) == 21 - 8 - 1
    # No part of a held-out sentence is trained on, in either task...
    for split in (sst2["train"], sst5["train"]):
        for phrase in split.sentences:
            assert not _inside_a_held_out_sentence(sst5, phrase), phrase
    # ...and everything else is: the other phrases, each once.
    kept = {sst.normalise_tokens(s) for s in sst2["train"].sentences}
    assert ("a", "phrase", "of", "no", "sentence") in kept
    assert len(kept) == len(sst2["train"])
    expected_sentences = [
        tuple(s.lower().split())
        for s, y in zip(
            sst5["train"].sentences, sst5["train"].labels, strict=True
        )
        if y != 2
    ]
    assert set(expected_sentences) <= kept
    assert {tokens[:3] for tokens in expected_sentences} <= kept
    assert sst2["train"].label_names == sst.SST2_NAMES
    assert sst5["test"].label_names == sst.SST5_NAMES
    without = sst.load_sst_splits("sst2", root, 0.2, 0.2, 0, phrases=False)
    assert sorted(without["train"].sentences) == sorted(
        " ".join(t) for t in expected_sentences
    )


@pytest.mark.backend_independent
def test_sst_splits_are_seeded(tmp_path):
    from keras_attention.data import sst

    root = _sst_root(tmp_path)
    first = sst.load_sst_splits("sst2", root, seed=3)
    again = sst.load_sst_splits("sst2", root, seed=3)
    other = sst.load_sst_splits("sst2", root, seed=4)
    for name in ("train", "validation", "test"):
        assert first[name].sentences == again[name].sentences
        assert first[name].labels.tolist() == again[name].labels.tolist()
    assert first["test"].sentences != other["test"].sentences


@pytest.mark.backend_independent
def test_sst_splits_refuse_missing_files_and_bad_tasks(tmp_path):
    from keras_attention.data import sst

    with pytest.raises(FileNotFoundError, match="sst5/train.tsv"):
        sst.load_sst_splits("sst2", str(tmp_path))
    with pytest.raises(ValueError, match="task='sst3'"):
        sst.load_sst_splits("sst3", str(tmp_path))
