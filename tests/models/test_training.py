import json
import os

import keras
import numpy as np
import pytest

from keras_attention.models import training

TINY_MODEL = dict(
    embedding_dim=8, lstm_units=4, attention_units=4, num_hops=2, mlp_units=4
)


def _split(n):
    return training.SentimentSplit(
        [f"sentence {i}" for i in range(n)], np.arange(n) % 2
    )


def _write_tsv(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        for sentence, label in rows:
            f.write(f"{sentence}\t{label}\n")
    return str(path)


def test_split_off_is_seeded_disjoint_and_complete():
    rest, validation, test = training.split_off(_split(100), (0.1, 0.2), 3)
    assert (len(rest), len(validation), len(test)) == (70, 10, 20)
    names = rest.sentences + validation.sentences + test.sentences
    assert sorted(names) == sorted(_split(100).sentences)
    again = training.split_off(_split(100), (0.1, 0.2), 3)
    assert again[1].sentences == validation.sentences
    other = training.split_off(_split(100), (0.1, 0.2), 4)
    assert other[1].sentences != validation.sentences


@pytest.mark.parametrize("fractions", [(0.5, 0.5), (0.0,), (-0.1,)])
def test_split_off_rejects_bad_fractions(fractions):
    with pytest.raises(ValueError, match="fractions"):
        training.split_off(_split(10), fractions)


def test_split_off_needs_training_examples_left():
    with pytest.raises(ValueError, match="keep any for training"):
        training.split_off(_split(2), (0.1, 0.1))


def test_synthetic_splits_keep_cue_masks():
    splits = training.load_sentiment_splits("synthetic", num_examples=200)
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
    given = training.load_sentiment_splits(train, validation=dev, test=dev)
    assert [len(s) for s in given.values()] == [50, 7, 7]
    assert given["train"].cue_masks is None
    carved = training.load_sentiment_splits(train, test=dev)
    assert [len(s) for s in carved.values()] == [45, 5, 7]
    both = training.load_sentiment_splits(train, seed=1)
    assert [len(s) for s in both.values()] == [40, 5, 5]


def test_get_strategy_rejects_unknown_names():
    with pytest.raises(ValueError, match="Received: distribute='tpu'"):
        training.get_strategy("tpu")


@pytest.mark.parametrize(
    "config, index",
    [
        (None, 0),
        (
            {
                "cluster": {"worker": ["a", "b"]},
                "task": {"type": "worker", "index": 0},
            },
            0,
        ),
        (
            {
                "cluster": {"worker": ["a", "b"]},
                "task": {"type": "worker", "index": 1},
            },
            1,
        ),
        (
            {
                "cluster": {"chief": ["c"], "worker": ["a"]},
                "task": {"type": "chief", "index": 0},
            },
            0,
        ),
        (
            {
                "cluster": {"chief": ["c"], "worker": ["a"]},
                "task": {"type": "worker", "index": 0},
            },
            1,
        ),
    ],
)
def test_worker_index_reads_tf_config(monkeypatch, config, index):
    if config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    assert training.worker_index() == index


class _Killed(Exception):
    pass


class _KillAfterSecondEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1:
            raise _Killed()


def test_interrupted_training_resumes_from_backup(tmp_path):
    splits = training.load_sentiment_splits("synthetic", num_examples=100)
    kwargs = dict(epochs=4, batch_size=16, verbose=0, **TINY_MODEL)
    with pytest.raises(_Killed):
        training.train_sentiment_classifier(
            splits, str(tmp_path), callbacks=[_KillAfterSecondEpoch()], **kwargs
        )
    assert os.path.exists(tmp_path / "backup")
    result = training.train_sentiment_classifier(
        splits, str(tmp_path), **kwargs
    )
    # Epochs 1 and 2 were backed up; only epochs 3 and 4 run again.
    assert result.epochs_trained == 2
    assert not os.path.exists(tmp_path / "backup")
    assert os.path.exists(tmp_path / "checkpoint.weights.h5")


def test_evaluate_and_report(tmp_path):
    splits = training.load_sentiment_splits("synthetic", num_examples=60)
    result = training.train_sentiment_classifier(
        splits, str(tmp_path), epochs=1, verbose=0, **TINY_MODEL
    )
    metrics, probabilities, attention = training.evaluate_sentiment_classifier(
        result.model, splits["test"]
    )
    assert set(metrics) == {
        "accuracy",
        "examples",
        "attention_redundancy",
        "attention_on_cues",
    }
    assert 0 <= metrics["attention_on_cues"] <= 1
    assert probabilities.shape == (6, 2) and len(attention) == 6
    paths = training.save_attention_report(
        result.model, splits["test"], probabilities, attention, tmp_path
    )
    assert all(os.path.getsize(p) > 0 for p in paths)
