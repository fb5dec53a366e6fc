"""examples/sentiment_classifier.py end to end, on small data."""

import importlib.util
import json
import os
import zipfile

import keras
import numpy as np
import pytest

from keras_attention.data import make_synthetic_sentiment
from tests import subprocesses
from tests.data.test_sst import _sst_root

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "sentiment_classifier.py")
SST2 = os.path.join(ROOT, os.pardir, "shared", "data", "sst2")

# Measured with these arguments on 2 shared CPU cores: test accuracy 0.98
# and 0.61 of the attention on cue tokens (chance: about 0.22) in about
# 17 s. The bars leave a wide margin.
SMALL = ["--num-examples", "3000", "--epochs", "6", "--quiet"]
MIN_TEST_ACCURACY = 0.9
MIN_ATTENTION_ON_CUES = 0.45


def _example():
    spec = importlib.util.spec_from_file_location("sentiment_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    output = str(tmp_path_factory.mktemp("sentiment"))
    metrics = _example().main([*SMALL, "--output", output])
    return output, metrics


@pytest.mark.heavy
@pytest.mark.backend_independent
def test_help_lists_the_options():
    result = subprocesses.run_python([SCRIPT, "--help"])
    for option in (
        "--data",
        "--validation",
        "--test",
        "--epochs",
        "--batch-size",
        "--output",
        "--distribute",
        "--seed",
        "--num-hops",
        "--penalty",
    ):
        assert option in result.stdout


@pytest.mark.backend_independent
def test_presets_set_defaults_that_flags_override(tmp_path):
    from keras_attention.data import sst

    root = _sst_root(tmp_path)
    example = _example()
    assert example.SST_FILES == sst.DATA_FILES
    for name, preset in example.PRESETS.items():
        args = example.parse_args(["--preset", name, "--data-root", root])
        assert {dest: getattr(args, dest) for dest in preset} == preset
    args = example.parse_args(
        ["--preset", "sst2", "--data-root", root, "--lstm-units", "8"]
    )
    assert args.lstm_units == 8
    assert args.embedding_dim == example.PRESETS["sst2"]["embedding_dim"]
    assert example.parse_args([]).data == "synthetic"
    fractions = ["--validation-fraction", "0.2", "--test-fraction", "0.2"]
    for name in ("sst2", "sst5"):
        loaded = example.load_splits(
            example.parse_args(
                ["--preset", name, "--data-root", root, *fractions]
            )
        )
        expected = sst.load_sst_splits(name, root, 0.2, 0.2, seed=0)
        for split in ("train", "validation", "test"):
            assert loaded[split].sentences == expected[split].sentences


@pytest.mark.backend_independent
def test_help_lists_what_each_preset_sets(capsys):
    example = _example()
    with pytest.raises(SystemExit) as exit_info:
        example.parse_args(["--help"])
    assert exit_info.value.code == 0
    # Without whitespace: the help wraps lines, at hyphens too.
    text = "".join(capsys.readouterr().out.split())
    for name, preset in example.PRESETS.items():
        settings = " ".join(
            f"--{dest.replace('_', '-')} {value}"
            for dest, value in preset.items()
        )
        assert "".join(f"{name}: {settings}".split()) in text


@pytest.mark.backend_independent
def test_presets_without_their_data_are_a_one_line_error(tmp_path, capsys):
    root = _sst_root(tmp_path)
    for args, fragment in (
        (["--preset", "sst5"], str(tmp_path / "absent" / "sst5" / "train.tsv")),
        (["--data", "sst2-sentences", "--test", __file__], "--test cannot"),
        (["--preset", "sst2", "--pretrain-epochs", "1"], "needs --data sst5"),
        (["--preset", "sst5", "--pretrain-epochs", "-1"], "0 or more, got -1"),
    ):
        data_root = str(tmp_path / "absent") if len(args) == 2 else root
        with pytest.raises(SystemExit) as exit_info:
            _example().main([*args, "--data-root", data_root])
        assert exit_info.value.code == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ")
        assert fragment in lines[0]


@pytest.mark.heavy
@pytest.mark.tensorflow_lane
def test_synthetic_run_classifies_and_attends_to_cues(synthetic_run):
    """The Quickstart's job, small. On JAX the script runs end to end in
    tests/examples/test_distributed.py (`test_jax_data_and_model_parallel_
    over_four_local_devices`, two processes in `test_jax_multi_process_
    data_parallel_with_two_processes`), and its model takes a training
    step in tests/models/sentiment/test_model.py: the JAX lane leaves
    out this run (25 s) and its accuracy bar."""
    output, metrics = synthetic_run
    for name in (
        "model.keras",
        "metrics.json",
        "attention.png",
        "attention.html",
        "attention_hops.html",
        "rollout.txt",
    ):
        assert os.path.getsize(os.path.join(output, name)) > 0
    with open(os.path.join(output, "metrics.json")) as f:
        written = json.load(f)
    assert written["test_accuracy"] == metrics["test_accuracy"]
    assert written["test_accuracy"] >= MIN_TEST_ACCURACY
    assert written["attention_on_cues"] >= MIN_ATTENTION_ON_CUES
    assert not os.path.exists(os.path.join(output, "backup"))
    # A run that restored nothing: its own epochs and seconds are the total
    # (tests/models/test_fitting.py resumes one).
    assert written["epochs_restored"] == 0
    assert written["epochs_total"] == written["epochs_trained"]
    assert written["train_seconds_total"] == written["train_seconds"]


@pytest.mark.heavy
@pytest.mark.tensorflow_only
def test_saved_model_takes_raw_strings(synthetic_run):
    output, _ = synthetic_run
    model = keras.saving.load_model(
        os.path.join(output, "model.keras"), safe_mode=True
    )
    outputs = model.predict(
        np.array(["never dull", "not good"], dtype=object), verbose=0
    )
    assert outputs["probabilities"].shape == (2, 2)
    assert outputs["attention"].shape == (2, 2, 2)


@pytest.mark.heavy
@pytest.mark.tensorflow_lane
def test_saved_model_predicts_with_predict_sentiment(synthetic_run):
    """On JAX: tests/models/sentiment/test_inference.py predicts with a
    saved model of the same builder (this one needs the synthetic run)."""
    from keras_attention.models.sentiment import predict_sentiment

    output, metrics = synthetic_run
    model = keras.saving.load_model(
        os.path.join(output, "model.keras"), safe_mode=True
    )
    probabilities, attention = predict_sentiment(
        model, ["never dull", "not good"]
    )
    assert probabilities.argmax(-1).tolist() == [1, 0]
    assert [w.shape for w in attention] == [(2, 2), (2, 2)]


def _write_tsv(path, data):
    with open(path, "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        for sentence, label in zip(data.sentences, data.labels, strict=True):
            f.write(f"{sentence.capitalize()}, really!\t{label}\n")
    return str(path)


def _with_neutral(path, count):
    """Appends `count` sentences of a third class, label 2, to a TSV file."""
    with open(path, "a", encoding="utf-8") as f:
        for i in range(count):
            f.write(f"A plain film, number {i}.\t2\n")
    return path


@pytest.mark.heavy
@pytest.mark.tensorflow_lane
def test_three_class_tsv_files_under_mirrored_strategy(tmp_path):
    """Three labels from TSV files: the data path is the same on every backend.

    Other lanes (15 s on JAX): `tests/examples/test_distributed.py` runs
    the script data parallel there (`test_jax_multi_process_data_parallel_
    with_two_processes`, and the batch axis of `test_jax_data_and_model_
    parallel_over_four_local_devices`), and `test_synthetic_run_classifies_
    and_attends_to_cues` trains, evaluates and saves it.
    """
    train = _write_tsv(tmp_path / "train.tsv", make_synthetic_sentiment(120))
    dev = _write_tsv(tmp_path / "dev.tsv", make_synthetic_sentiment(20, 1))
    test = _write_tsv(tmp_path / "test.tsv", make_synthetic_sentiment(30, 2))
    for path, count in ((train, 30), (dev, 6), (test, 9)):
        _with_neutral(path, count)
    output = str(tmp_path / "run")
    metrics = _example().main(
        [
            "--data",
            train,
            "--validation",
            dev,
            "--test",
            test,
            "--label-names",
            "negative,positive,neutral",
            # One padded length: JAX compiles once, not once per length.
            "--max-length",
            "24",
            "--epochs",
            "1",
            "--distribute",
            "mirrored",
            "--quiet",
            "--output",
            output,
        ]
    )
    assert metrics["test_examples"] == 39
    assert metrics["label_names"] == ["negative", "positive", "neutral"]
    assert 0.0 <= metrics["test_accuracy"] <= 1.0
    assert "attention_on_cues" not in metrics
    assert os.path.exists(os.path.join(output, "attention.html"))
    # The names are saved with the model (loading it is tested in
    # tests/models/test_sentiment.py).
    with zipfile.ZipFile(os.path.join(output, "model.keras")) as archive:
        config = json.loads(archive.read("config.json"))
    assert config["config"]["label_names"] == [
        "negative",
        "positive",
        "neutral",
    ]
    assert config["config"]["layers"][-1]["config"]["units"] == 3


@pytest.mark.slow
def test_sst2_brief_run(tmp_path):
    if not os.path.isdir(SST2):
        pytest.skip(f"{SST2} is absent")
    output = str(tmp_path / "sst2")
    metrics = _example().main(
        [
            "--data",
            os.path.join(SST2, "train.tsv"),
            "--test",
            os.path.join(SST2, "dev.tsv"),
            "--epochs",
            "1",
            "--batch-size",
            "128",
            "--embedding-dim",
            "64",
            "--lstm-units",
            "32",
            "--num-hops",
            "4",
            "--penalty",
            "1.0",
            "--recurrent-dropout",
            "0.0",
            "--quiet",
            "--output",
            output,
        ]
    )
    # One epoch of a small model; CNN-rand reaches 0.827 fully trained.
    assert metrics["test_accuracy"] >= 0.75
    assert os.path.exists(os.path.join(output, "model.keras"))
