"""A run of each example killed with SIGKILL resumes where it stopped.

Each run splits the CPU into two logical devices and trains under
`MirroredStrategy` on both (`--cpu-devices 2 --distribute mirrored`): the
CPU is split before the strategy picks its devices, and with more than one
replica string inputs (sentiment) and the optimizer's variables used to
break the first step. One run of each example asserts both.

The TensorFlow lane only (`tensorflow_lane`): both examples resume through
the one training scaffold, which `tests/models/test_fitting.py` kills and
resumes in-process on every backend, and `MirroredStrategy` is
TensorFlow's (the JAX lane runs the examples over several devices in
`tests/examples/test_distributed.py`).
"""

import json
import math
import os
import re
import time

import keras
import numpy as np
import pytest

from keras_attention.models import sentiment
from tests import subprocesses as processes

pytestmark = [pytest.mark.tensorflow_lane, pytest.mark.heavy]

EPOCHS = 3
# `fit(verbose=2)` prints one line per finished epoch: "38/38 - 2s - ...".
_EPOCH_DONE = re.compile(r"^\d+/\d+ - .*loss", re.MULTILINE)
_EPOCH_START = re.compile(r"^Epoch (\d+)/\d+", re.MULTILINE)
_LOSS = re.compile(r" loss: ([-+.\deE]+|nan)")


def _backed_up_epochs(path):
    """Epochs recorded by BackupAndRestore, or None before the first one."""
    try:
        with open(path) as f:
            return json.load(f)["epoch"]
    except (OSError, ValueError, KeyError):
        # Absent, or caught while being written.
        return None


# The translation example resumes and runs on two workers through the same
# training scaffold as the sentiment one (models/fitting.py): its run is
# opt-in (-m slow), ~50-90 s of the lane for no code of its own.
@pytest.mark.parametrize(
    "name", ["sentiment", pytest.param("translation", marks=pytest.mark.slow)]
)
def test_killed_run_resumes_and_loses_at_most_one_epoch(name, tmp_path):
    output = str(tmp_path / "run")
    # No early stopping: every epoch runs, so the count is exact.
    args = [*processes.SMALL[name], "--epochs", str(EPOCHS)]
    args += ["--patience", str(EPOCHS), "--output", output]
    args += ["--cpu-devices", "2", "--distribute", "mirrored"]
    metadata = os.path.join(output, "backup", "training_metadata.json")
    first_log = tmp_path / "first.log"
    process = processes.start(name, args, first_log)
    deadline = time.monotonic() + processes.TIMEOUT_SECONDS
    # The callbacks write the backup at the end of each epoch: kill as soon
    # as the first one is there, in the middle of the next epoch.
    while not _backed_up_epochs(metadata):
        if process.poll() is not None:
            pytest.fail(
                f"exited ({process.returncode}) before an epoch was backed "
                f"up:\n{processes.tail(first_log)}"
            )
        if time.monotonic() > deadline:
            processes.kill(process)
            pytest.fail(f"no backup in time:\n{processes.tail(first_log)}")
        time.sleep(0.05)
    processes.kill(process)
    assert process.returncode == -9
    backed_up = _backed_up_epochs(metadata)
    finished = len(_EPOCH_DONE.findall(first_log.read_text()))
    assert 1 <= backed_up < EPOCHS, processes.tail(first_log)
    # The kill costs the epoch in progress and nothing else.
    assert finished - backed_up <= 1
    assert not os.path.exists(os.path.join(output, "model.keras"))

    printed = processes.run(name, args, tmp_path / "second.log")
    assert "replicas: 2" in first_log.read_text()
    assert "replicas: 2" in printed
    # The killed run may stop before it prints its first epoch's line.
    losses = _LOSS.findall(printed)
    assert losses and all(math.isfinite(float(v)) for v in losses)
    started = [int(e) for e in _EPOCH_START.findall(printed)]
    assert started == list(range(backed_up + 1, EPOCHS + 1))
    with open(os.path.join(output, "metrics.json")) as f:
        metrics = json.load(f)
    # This invocation's epochs, those it restored and the whole run's.
    assert metrics["epochs_trained"] == EPOCHS - backed_up
    assert metrics["epochs_restored"] == backed_up
    assert metrics["epochs_total"] == EPOCHS
    assert metrics["train_seconds_total"] > metrics["train_seconds"]
    assert not os.path.exists(os.path.join(output, "backup"))
    model = keras.saving.load_model(
        os.path.join(output, "model.keras"), safe_mode=True
    )
    if name == "sentiment":
        probabilities, _ = sentiment.predict_sentiment(model, ["not bad"])
        assert probabilities.shape == (1, 2)
        np.testing.assert_allclose(probabilities.sum(-1), 1.0, rtol=1e-5)
        assert 0.0 <= metrics["test_accuracy"] <= 1.0
    else:
        assert isinstance(model.translate(["de tumi zefa poro"])[0], str)
        assert 0.0 <= metrics["bleu"] <= 100.0
