"""examples/decoder_lm.py end to end, on a tiny model.

The run (train, generate, save, reload, generate again, and the full
model's greedy ids) is in the TensorFlow lane only (`tensorflow_lane`);
on every backend `tests/models/test_generation.py` checks the compiled,
cached generation against the full model.
"""

import importlib.util
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "decoder_lm.py")

TINY = [
    "--num-examples",
    "150",
    "--epochs",
    "1",
    "--model-dim",
    "16",
    "--num-heads",
    "2",
    "--num-layers",
    "1",
    "--eval-examples",
    "1",
    "--quiet",
]


def _example():
    spec = importlib.util.spec_from_file_location("decoder_lm_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.tensorflow_lane
def test_a_run_saves_a_model_that_reloads_and_generates_the_same(
    tmp_path, capsys
):
    output = str(tmp_path)
    metrics = _example().main([*TINY, "--output", output])
    for name in ("model.keras", "vocabulary.json", "metrics.json"):
        assert os.path.getsize(os.path.join(output, name)) > 0
    with open(os.path.join(output, "metrics.json")) as f:
        written = json.load(f)
    assert written["val_loss"] == pytest.approx(metrics["val_loss"])
    assert 0.0 <= written["continuation_accuracy"] <= 1.0
    (sample,) = written["samples"]
    # docs/examples.md's table of metrics.json names every key.
    with open(os.path.join(ROOT, "docs", "examples.md")) as f:
        section = f.read().split("## Decoder-only language model")[1]
    row = next(x for x in section.splitlines() if x.startswith("| `metrics"))
    missing = [key for key in written if f"`{key}`" not in row]
    assert not missing, missing
    assert sample["prompt"].endswith(" =")
    # Reloaded from model.keras, the model continues the prompt the same.
    continuation = _example().main(
        [
            "--output",
            output,
            "--generate",
            sample["prompt"],
            "--max-new-tokens",
            str(sample["new_tokens"]),
        ]
    )
    assert continuation == sample["continuation"]
    # The text stops at [end], then one line of speed; unknown words are
    # named on stderr, and a --max-new-tokens past the context clipped.
    capsys.readouterr()
    _example().main(
        [
            "--output",
            output,
            "--generate",
            f"zzqx {sample['prompt']} qxzz",
            "--max-new-tokens",
            "1000",
        ]
    )
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert len(lines) == 2 and "[end]" not in lines[0], out
    assert re.fullmatch(r"\d+ tokens in [\d.]+ s: [\d.]+ tokens/s .*", lines[1])
    assert "read as [UNK]: zzqx, qxzz" in err
    assert "--max-new-tokens 1000 clipped to" in err
    assert "context is 64 positions" in err
    # A prompt that fills the context is one error line.
    with pytest.raises(SystemExit) as exit_info:
        _example().main(["--output", output, "--generate", "de " * 64])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: the prompt's 64 words fill the model's")
    # And the cached, compiled generation is the full model's greedy one.
    import keras

    from keras_attention.data import language
    from keras_attention.models import Generator

    model = keras.saving.load_model(os.path.join(output, "model.keras"))
    with open(os.path.join(output, "vocabulary.json")) as f:
        vocabulary = json.load(f)
    prompt = [language.to_ids(sample["prompt"], vocabulary)]
    ids = Generator(model).generate_uncached(prompt, sample["new_tokens"])
    assert language.decode(ids[0, len(prompt[0]) :], vocabulary) == continuation


@pytest.mark.backend_independent
def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _example().main(["--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for option in (
        "--data {synthetic,multi30k}",
        "--data-dir",
        "--sliding-window",
        "--num-key-value-heads",
        "--cache-dtype",
        "--layer-types",
        "--max-new-tokens",
        "--generate PROMPT",
        "--output",
    ):
        assert option in text
    assert "(default: runs/decoder_lm)" in text


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--num-heads", "3"], "--num-heads 3 must divide --model-dim 64"),
        (["--data", "multi30k", "--data-dir", "nowhere"], "nowhere/train.en"),
        (["--generate", "de feza ="], "no trained model in"),
        (["--epochs", "0"], "expected a positive integer, got '0'"),
        (["--layer-types", "linear,mamba"], "got 'linear,mamba'"),
    ],
)
def test_bad_input_is_one_error_line_and_status_2(
    argv, message, tmp_path, capsys
):
    with pytest.raises(SystemExit) as exit_info:
        _example().main([*argv, "--output", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert message in err


@pytest.mark.backend_independent
@pytest.mark.parametrize("backend", ["torch", "jax", "tensorflow"])
def test_generating_imports_tensorflow_on_its_backend_only(
    backend, monkeypatch
):
    """On PyTorch `--generate` printed TensorFlow's C++ log lines: it
    imported TensorFlow, which generating there never needs."""
    example = _example()
    imported = []
    monkeypatch.setenv("KERAS_BACKEND", backend)
    monkeypatch.setattr(
        example.cli, "import_tensorflow", lambda: imported.append(1)
    )
    monkeypatch.setattr(example, "generate", lambda args: "generated")
    assert example.main(["--generate", "de feza ="]) == "generated"
    assert imported == ([1] if backend == "tensorflow" else [])
