"""`examples/long_context.py`: a model trains with its sequence split
over devices (ring attention), and its errors are one line."""

import json
import os

import keras
import pytest

from tests import subprocesses as processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "long_context.py")


@pytest.mark.heavy
@pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="runs in the JAX lane"
)
def test_the_key_crosses_the_ring_of_four_devices(tmp_path):
    # The key is at position 0, on the first device only: every other
    # device's queries reach it through the ring, or guess (chance 1/16).
    output = tmp_path / "run"
    done = processes.run_python(
        [
            SCRIPT,
            "--cpu-devices",
            "4",
            "--length",
            "64",
            "--chunk-size",
            "16",
            "--num-examples",
            "256",
            "--epochs",
            "3",
            "--quiet",
            "--output",
            str(output),
        ],
        env=processes.environment(KERAS_BACKEND="jax"),
    )
    assert "mesh: sequence 4; 16 positions each" in done.stdout
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["devices"] == 4
    assert metrics["test_accuracy"] > 0.95, metrics


@pytest.mark.heavy
@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "args, backend, fragment",
    [
        ([], "tensorflow", "needs the JAX backend"),
        (["--length", "10", "--devices", "4"], "jax", "not a multiple of"),
        (["--epochs", "0"], "jax", "--epochs must be positive"),
    ],
)
def test_errors_are_one_line_with_exit_2(args, backend, fragment):
    done = processes.run_python(
        [SCRIPT, *args],
        env=processes.environment(KERAS_BACKEND=backend),
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and fragment in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
