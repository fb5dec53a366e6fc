"""The example scripts' command lines: fast --help, one-line user errors.

`--help` runs in a subprocess (it imports no TensorFlow, so it is cheap);
the error exits run in-process through `main(argv)`, none of them trains,
but for one that checks, in a fresh process, that TensorFlow's loading
adds nothing to the error line.
"""

import contextlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests import subprocesses

# Argument parsing and file checks, before any backend work: TF lane only.
pytestmark = pytest.mark.backend_independent

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
SCRIPTS = (
    "sentiment_classifier.py",
    "translation.py",
    "export_model.py",
    "long_context.py",
    "decoder_lm.py",
)

# Prints what the script imported by the time `--help` exited.
HELP_IMPORTS = """
import runpy, sys
sys.argv = [sys.argv[1], "--help"]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as exit:
    assert exit.code == 0, exit.code
print("IMPORTED", "tensorflow" in sys.modules, "keras" in sys.modules)
"""


def _example(script):
    spec = importlib.util.spec_from_file_location(
        script[:-3] + "_cli_test", os.path.join(EXAMPLES, script)
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _error(script, *args):
    """Runs `main(args)`; returns the one stderr line of its exit 2."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        with pytest.raises(SystemExit) as exit_info:
            _example(script).main(list(args))
    assert exit_info.value.code == 2, stderr.getvalue()
    lines = stderr.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def _write(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


@pytest.mark.heavy
@pytest.mark.parametrize("script", SCRIPTS)
def test_help_imports_no_tensorflow_and_shows_every_default(script):
    result = subprocesses.run_python(
        ["-c", HELP_IMPORTS, os.path.join(EXAMPLES, script)]
    )
    assert "IMPORTED False False" in result.stdout
    help_text = result.stdout.split("options:", 1)[1]
    # Each option's entry runs from its flag to the next flag.
    entries = re.split(r"\n  (?=-)", help_text)[1:]
    assert len(entries) >= 2
    for entry in entries:
        flag = entry.split()[0].rstrip(",")
        if flag in ("-h", "--help", "--quiet"):
            continue
        assert entry.count("(default:") == 1, f"{script} {flag}: {entry!r}"
    # Lines break at spaces, never inside a hyphenated word or flag.
    cut = [line for line in help_text.splitlines() if re.search(r"\w-$", line)]
    assert not cut, f"{script}: {cut}"


def test_every_file_in_examples_is_a_script():
    # examples/_cli.py was a helper module among the scripts: its --help
    # printed nothing and exited 0 (issue 54). It is
    # keras_attention/models/cli.py now; the test above runs the --help of
    # each file listed here.
    files = [
        name
        for name in os.listdir(EXAMPLES)
        if os.path.isfile(os.path.join(EXAMPLES, name))
    ]
    assert sorted(files) == sorted(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_preset_in_help_parses_back_to_the_preset(script, monkeypatch):
    # `--bucket-by-length True` was shown for a flag that takes no value
    # (issue 54): what --help shows must be copyable as it stands.
    module = _example(script)
    # A preset of real data checks that its files exist (../shared/data,
    # absent beside a fresh clone); the flags are what is checked here.
    for check in ("check_sst_files", "_check_preset_files"):
        if hasattr(module, check):
            monkeypatch.setattr(module, check, lambda args: None)
    presets = getattr(module, "PRESETS", {})
    help_text = " ".join(
        subprocesses.run_python(
            [os.path.join(EXAMPLES, script), "--help"]
        ).stdout.split()
    )
    for name in presets:
        shown = help_text.split(f" {name}: ", 1)[1]
        shown = re.split(r"; \S+: | \(default: ", shown)[0]
        copied = module.parse_args(shlex.split(shown))
        preset = module.parse_args(["--preset", name])
        assert {**vars(copied), "preset": name} == vars(preset), shown


def test_the_scripts_flags_agree_with_the_package():
    from keras_attention.data import splits
    from keras_attention.models import distribute

    cli = _example("sentiment_classifier.py")
    assert cli.cli.DISTRIBUTE_NAMES == tuple(distribute.NAMES)
    assert cli.SYNTHETIC_EXAMPLES == splits.SYNTHETIC_EXAMPLES
    assert cli.VALIDATION_FRACTION == splits.VALIDATION_FRACTION
    assert cli.TEST_FRACTION == splits.TEST_FRACTION


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--epochs", "0"], "argument --epochs: expected a positive integer"),
        (["--batch-size", "x"], "expected a positive integer, got 'x'"),
        (["--data", "absent.tsv"], "no such file: 'absent.tsv'"),
        (["--label-names", "good"], "at least two distinct"),
        (
            ["--validation-fraction", "0.6", "--test-fraction", "0.5"],
            "must sum to less than 1",
        ),
    ],
)
def test_sentiment_bad_arguments(args, fragment):
    assert fragment in _error("sentiment_classifier.py", *args)


@pytest.mark.parametrize("script", SCRIPTS[:2])
def test_an_output_that_cannot_be_a_directory_fails_before_training(
    tmp_path, script
):
    # Each was a FileExistsError / FileNotFoundError traceback, raised by
    # os.makedirs after the data had loaded.
    afile = _write(str(tmp_path), "afile", "x")
    for output, fragment in (
        (afile, "afile' is a file; the run directory must be a directory"),
        (os.path.join(afile, "run"), "cannot make"),
        ("/proc/keras_attention_run", "cannot make '/proc/keras_attention"),
    ):
        line = _error(script, "--output", output)
        assert "argument --output: " in line and fragment in line, line


def test_a_killed_runs_backup_is_resumed_only_with_its_settings(tmp_path):
    # Resuming with other sizes was Keras's 46-line "could not be loaded"
    # traceback; a finished run (no backup) may be rerun with anything.
    module = _example("sentiment_classifier.py")
    output = str(tmp_path / "run")
    first = ["--output", output, "--lstm-units", "16"]
    module.cli.make_run_directory(output)
    module.cli.check_resume(module.parse_args(first + ["--lstm-units", "8"]))
    module.cli.check_resume(module.parse_args(first))
    os.makedirs(os.path.join(output, "backup"))
    module.cli.check_resume(module.parse_args(first + ["--epochs", "3"]))
    line = _error("sentiment_classifier.py", *first, "--num-hops", "3")
    assert "backup is the backup of a killed run with other settings: " in line
    assert "--num-hops 2 (now 3)" in line


@pytest.mark.parametrize("script", SCRIPTS[:2])
def test_a_malformed_tf_config_is_one_line(monkeypatch, tmp_path, script):
    # Was a json.decoder.JSONDecodeError traceback.
    monkeypatch.setenv("TF_CONFIG", "{bad")
    line = _error(
        script, "--distribute", "multi-worker", "--output", str(tmp_path)
    )
    assert "TF_CONFIG must be a JSON object" in line


def test_sentiment_bad_files(tmp_path):
    folder = str(tmp_path)
    good = _write(folder, "good.tsv", "sentence\tlabel\na\t0\nb\t1\nc\t0\n")
    empty = _write(folder, "empty.tsv", "")
    blank = _write(folder, "blank.tsv", "\n\n")
    bad = _write(folder, "bad.tsv", "sentence\tlabel\na film\tyes\n")
    for args, fragment in (
        (["--data", folder], "is a directory, not a file"),
        (["--data", empty], "empty.tsv' is empty"),
        (["--data", blank], "blank.tsv is empty"),
        (["--data", bad], "bad.tsv, line 2: the label must be an integer"),
        (["--data", good, "--test", bad], "bad.tsv, line 2"),
    ):
        assert fragment in _error("sentiment_classifier.py", *args)


@pytest.mark.heavy
def test_an_error_after_loading_tensorflow_is_all_stderr_says(tmp_path):
    # In a fresh process, so TensorFlow loads with the script: TF 2.21
    # printed six lines of C++ INFO logging at import whatever
    # TF_CPP_MIN_LOG_LEVEL said, before the one `error: ...` line.
    bad = _write(str(tmp_path), "bad.tsv", "sentence\tlabel\na film\tyes\n")
    result = subprocess.run(
        [sys.executable, subprocesses.SCRIPTS["sentiment"], "--data", bad],
        capture_output=True,
        text=True,
        env=subprocesses.environment(),
        timeout=subprocesses.TIMEOUT_SECONDS,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"error: {bad}, line 2: the label must be an integer. Received: 'yes'"
    ]


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("tensorflow_datasets", "needs TensorFlow Datasets (pip install "),
        ("importlib_resources", "(pip install importlib_resources)"),
    ],
)
def test_sentiment_names_the_module_tfds_lacks(monkeypatch, name, fragment):
    # tensorflow-datasets 4.9.10 imports importlib_resources only when it
    # prepares a dataset; the error used to say to install TFDS itself.
    from keras_attention.data import splits

    def load(*args, **kwargs):
        raise ImportError(f"No module named '{name}'", name=name)

    monkeypatch.setattr(splits, "load_sentiment_splits", load)
    line = _error("sentiment_classifier.py", "--data", "imdb")
    assert fragment in line and f"No module named '{name}'" in line


def test_sentiment_labels_outside_the_classes(tmp_path):
    folder = str(tmp_path)
    three = _write(
        folder, "three.tsv", "sentence\tlabel\na\t0\nb\t1\nc\t2\nd\t0\n"
    )
    two = _write(folder, "two.tsv", "sentence\tlabel\na\t0\nb\t1\n")
    line = _error(
        "sentiment_classifier.py", "--data", three, "--label-names", "neg,pos"
    )
    assert "three.tsv, line 4: label 2 is not one of the 2 classes" in line
    assert "neg, pos" in line
    # A validation label the training data never had.
    line = _error(
        "sentiment_classifier.py", "--data", two, "--validation", three
    )
    assert "three.tsv, line 4: label 2 is not one of the 2 classes" in line


def test_sentiment_refuses_a_single_class(tmp_path):
    ones = _write(
        str(tmp_path), "ones.tsv", "sentence\tlabel\n" + "a film\t1\n" * 12
    )
    line = _error("sentiment_classifier.py", "--data", ones)
    assert "single class" in line and "ones.tsv" in line


def test_translation_errors(tmp_path):
    folder = str(tmp_path)
    line = _error(
        "translation.py", "--translate", "ein hund", "--output", folder
    )
    assert line == (
        f"error: no trained model in {folder}, train first with: python "
        f"examples/translation.py --output {folder}"
    )
    _write(folder, "t.de", "ein hund\n")
    _write(folder, "t.en", "a dog\ntwo dogs\n")
    prefix = os.path.join(folder, "t")
    args = ["--train", prefix, "--validation", prefix, "--test", prefix]
    assert "t.de has 1 lines but" in _error("translation.py", *args)
    missing = ["--train", prefix + "x", "--validation", prefix]
    assert "go together" in _error("translation.py", *missing)
    args = ["--train", prefix + "x", "--validation", prefix, "--test", prefix]
    assert "No such file or directory" in _error("translation.py", *args)
    _write(folder, "e.de", "")
    _write(folder, "e.en", "\n")
    prefix = os.path.join(folder, "e")
    args = ["--train", prefix, "--validation", prefix, "--test", prefix]
    assert "e.de is empty" in _error("translation.py", *args)
    # Was hold_out's "argument `count`, expected an integer in [1, 3)".
    _write(folder, "h.de", "ein hund\nzwei hunde\ndrei hunde\n")
    _write(folder, "h.en", "a dog\ntwo dogs\nthree dogs\n")
    prefix = os.path.join(folder, "h")
    args = ["--train", prefix, "--validation", prefix, "--hold-out", "3"]
    assert "argument --hold-out: 3 of the 3 pairs of " in _error(
        "translation.py", *args, "--output", os.path.join(folder, "run")
    )


def test_export_errors(tmp_path):
    folder = str(tmp_path)
    line = _error("export_model.py", os.path.join(folder, "x.keras"), folder)
    assert "no such file" in line
    broken = _write(folder, "broken.keras", "not a zip")
    line = _error("export_model.py", broken, os.path.join(folder, "out"))
    assert "broken.keras" in line


@pytest.mark.parametrize(
    "script, args, fragment",
    [
        (
            "sentiment_classifier.py",
            ["--penalty", "-1"],
            "argument --penalty: expected a non-negative number, got '-1'",
        ),
        (
            "sentiment_classifier.py",
            ["--max-tokens", "1"],
            "argument --max-tokens: expected an integer of at least 3",
        ),
        (
            "translation.py",
            ["--length-penalty", "nan"],
            "argument --length-penalty: expected a non-negative number",
        ),
        (
            "translation.py",
            ["--max-source-tokens", "2"],
            "argument --max-source-tokens: expected an integer of at least 3",
        ),
        # NumPy's "expected non-negative integer", after loading TensorFlow
        # (a traceback in the translation script).
        (
            "sentiment_classifier.py",
            ["--seed", "-1"],
            "argument --seed: expected an integer in [0, 2**32), got '-1'",
        ),
        (
            "translation.py",
            ["--seed", str(2**32)],
            "argument --seed: expected an integer in [0, 2**32)",
        ),
        # An empty sentence used to be falsy: the script trained a new
        # model over OUTPUT instead of translating.
        (
            "translation.py",
            ["--translate", " ", "--output", "/nonexistent"],
            "argument --translate: expected a sentence with at least one word",
        ),
    ],
)
def test_values_that_used_to_pass_parsing(script, args, fragment):
    assert fragment in _error(script, *args)
