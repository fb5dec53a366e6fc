"""The shared training scaffold, through the sentiment example."""

import json
import os

import keras
import pytest

from keras_attention.data.splits import load_sentiment_splits
from keras_attention.models import distribute
from keras_attention.models import fitting
from keras_attention.models import sentiment

TINY_MODEL = dict(
    embedding_dim=8, lstm_units=4, attention_units=4, num_hops=2, mlp_units=4
)


def test_get_strategy_rejects_unknown_names():
    with pytest.raises(ValueError, match="Received: distribute='tpu'"):
        distribute.get_strategy("tpu")


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
    assert distribute.tf_config_index() == index


class _Killed(Exception):
    pass


class _KillAfterSecondEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1:
            raise _Killed()


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """A run of 4 epochs killed after its second, then resumed.

    Returns `(splits, output directory, whether the kill left a backup,
    the resumed run's FitResult)`; one training for the tests below.
    """
    output = tmp_path_factory.mktemp("resumed")
    splits = load_sentiment_splits("synthetic", num_examples=100)
    kwargs = dict(epochs=4, batch_size=16, verbose=0, **TINY_MODEL)
    with pytest.raises(_Killed):
        sentiment.train_sentiment_classifier(
            splits, str(output), callbacks=[_KillAfterSecondEpoch()], **kwargs
        )
    backed_up = os.path.exists(output / "backup")
    result = sentiment.train_sentiment_classifier(splits, str(output), **kwargs)
    return splits, output, backed_up, result


@pytest.mark.heavy
def test_interrupted_training_resumes_from_backup(resumed):
    _, output, backed_up, result = resumed
    assert backed_up
    # Epochs 1 and 2 were backed up; only epochs 3 and 4 run again.
    assert result.epochs_trained == 2
    assert result.epochs_restored == 2
    assert result.epochs_total == 4
    # The restored epochs' time, recorded by the killed run, is counted in
    # the total and not in this call's seconds.
    assert result.restored_seconds > 0
    assert result.train_seconds_total == pytest.approx(
        result.train_seconds + result.restored_seconds
    )
    # The training split of 100 examples in batches of 16: 5 steps an
    # epoch, 10 in this call; the kept weights are those of the resumed
    # epoch with the lower validation loss.
    losses = result.history["val_loss"]
    assert fitting.training_metrics(result) == {
        "epochs_trained": 2,
        "epochs_restored": 2,
        "epochs_total": 4,
        "train_seconds": round(result.train_seconds, 1),
        "train_seconds_total": round(result.train_seconds_total, 1),
        "checkpoint_epoch": 3 + losses.index(min(losses)),
        "train_steps": 10,
        "steps_per_second": round(10 / result.train_seconds, 4),
        "time_limit_stopped": False,
    }
    assert not os.path.exists(output / "backup")
    assert os.path.exists(output / "checkpoint.weights.h5")
    assert isinstance(result, fitting.FitResult)


@pytest.mark.heavy
def test_evaluate_and_report(resumed, tmp_path):
    # A run that restored nothing (its own epochs and seconds are the
    # total): the examples' synthetic sentiment run's metrics.json.
    splits, _, _, result = resumed
    metrics, probabilities, attention = sentiment.evaluate_sentiment_classifier(
        result.model, splits["test"]
    )
    assert set(metrics) == {
        "accuracy",
        "examples",
        "attention_redundancy",
        "attention_on_cues",
    }
    assert 0 <= metrics["attention_on_cues"] <= 1
    examples = len(splits["test"].sentences)
    assert metrics["examples"] == examples
    assert probabilities.shape == (examples, 2)
    assert len(attention) == examples
    paths = sentiment.save_attention_report(
        result.model, splits["test"], probabilities, attention, tmp_path
    )
    assert all(os.path.getsize(p) > 0 for p in paths)


def test_callbacks_back_up_first_then_stop_then_checkpoint(tmp_path):
    extra = keras.callbacks.TerminateOnNaN()
    callbacks = fitting.make_callbacks(str(tmp_path), 2, [extra])
    assert [type(c).__name__ for c in callbacks] == [
        "BackupAndRestore",
        "EarlyStopping",
        "ModelCheckpoint",
        "TerminateOnNaN",
    ]


def test_write_run_writes_model_and_metrics_on_the_chief(tmp_path):
    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    assert fitting.write_run(str(tmp_path / "run"), model, {"bleu": 1.0})
    with open(tmp_path / "run" / "metrics.json") as f:
        assert json.load(f) == {"bleu": 1.0}
    assert os.path.getsize(tmp_path / "run" / "model.keras") > 0
