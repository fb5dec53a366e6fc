"""examples/translation.py end to end, on small data."""

import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "translation.py")

# Measured with these arguments on 2 shared CPU cores: BLEU 99.6 and
# alignment accuracy 0.99 in 35-50 s. The bars leave a wide margin.
SMALL = ["--num-examples", "1500", "--epochs", "6", "--quiet"]
MIN_BLEU = 85.0
MIN_ALIGNMENT_ACCURACY = 0.85


def _example():
    spec = importlib.util.spec_from_file_location("translation_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    output = str(tmp_path_factory.mktemp("translation"))
    metrics = _example().main([*SMALL, "--output", output])
    return output, metrics


@pytest.mark.backend_independent
def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _example().main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in (
        "--data",
        "--train",
        "--validation",
        "--test",
        "--source",
        "--target",
        "--epochs",
        "--batch-size",
        "--output",
        "--beam-width",
        "--distribute",
        "--translate",
    ):
        assert option in text


def test_synthetic_run_translates_and_attends_to_the_right_words(
    synthetic_run,
):
    output, metrics = synthetic_run
    for name in ("model.keras", "metrics.json", "alignment.png"):
        assert os.path.exists(os.path.join(output, name))
    with open(os.path.join(output, "metrics.json")) as f:
        written = json.load(f)
    assert written["bleu"] == pytest.approx(metrics["bleu"])
    assert written["bleu"] >= MIN_BLEU
    assert written["alignment_accuracy"] >= MIN_ALIGNMENT_ACCURACY
    # A finished run leaves no backup behind.
    assert not os.path.exists(os.path.join(output, "backup"))


def test_translate_mode_uses_the_saved_model(synthetic_run, capsys):
    from keras_attention.data.translation import SYNTHETIC_LEXICON

    output, _ = synthetic_run
    source = list(SYNTHETIC_LEXICON)
    # determiner noun verb: no reordering.
    sentence = " ".join([source[0], source[15], source[35]])
    _example().main(["--output", output, "--translate", sentence])
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert printed == " ".join(SYNTHETIC_LEXICON[w] for w in sentence.split())


def test_parallel_files_run(tmp_path):
    from keras_attention.data.translation import make_synthetic_translation

    for split, seed in (("train", 0), ("val", 1), ("test", 2)):
        data = make_synthetic_translation(40, seed=seed)
        for suffix, lines in (("de", data.sources), ("en", data.targets)):
            with open(tmp_path / f"{split}.{suffix}", "w") as f:
                f.write("\n".join(lines) + "\n")
    output = str(tmp_path / "run")
    metrics = _example().main(
        [
            "--train",
            str(tmp_path / "train"),
            "--validation",
            str(tmp_path / "val"),
            "--test",
            str(tmp_path / "test"),
            "--epochs",
            "1",
            "--units",
            "8",
            "--embedding-dim",
            "8",
            "--beam-width",
            "2",
            "--distribute",
            "mirrored",
            "--quiet",
            "--output",
            output,
        ]
    )
    assert 0.0 <= metrics["bleu"] <= 100.0
    assert "alignment_accuracy" not in metrics
    assert metrics["beam_width"] == 2
    assert os.path.exists(os.path.join(output, "model.keras"))


def test_train_without_test_files_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _example().main(["--train", "x"])
    assert exit_info.value.code == 2
    assert "go together" in capsys.readouterr().err
