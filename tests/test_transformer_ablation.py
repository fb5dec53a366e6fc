"""benchmarks/transformer_ablation.py: its command lines, resuming and table.

The example itself is never run: `subprocess.run` is replaced by a stand-in
that writes the `metrics.json` a run would write.
"""

import importlib.util
import json
import os

import pytest

# Argument parsing and files, no backend work: TF lane only.
pytestmark = pytest.mark.backend_independent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "transformer_ablation.py")


def _script():
    spec = importlib.util.spec_from_file_location("ablation_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _data(tmp_path):
    data = tmp_path / "multi30k"
    data.mkdir()
    for name in ("train.de", "train.en", "val.de", "val.en"):
        (data / name).write_text("ein hund\n")
    return str(data)


def _fake_runs(module, monkeypatch, calls):
    def run(cmd, check):
        calls.append(cmd)
        output = cmd[cmd.index("--output") + 1]
        os.makedirs(output, exist_ok=True)
        bleu = 30.0 + len(calls)
        with open(os.path.join(output, "metrics.json"), "w") as f:
            json.dump({"validation_bleu": bleu, "epochs_trained": 3}, f)

    monkeypatch.setattr(module.subprocess, "run", run)


def test_runs_each_variant_once_and_tables_val_bleu(
    tmp_path, monkeypatch, capsys
):
    module = _script()
    calls = []
    _fake_runs(module, monkeypatch, calls)
    output = str(tmp_path / "runs")
    argv = ["--data-dir", _data(tmp_path), "--output", output, "--minutes", "2"]
    argv += ["--variants", "preset", "tied"]
    assert module.main(argv) == 0
    assert len(calls) == 2
    assert calls[1][-1] == "--tie-embeddings"
    assert calls[0][calls[0].index("--max-minutes") + 1] == "2.0"
    table = capsys.readouterr().out
    assert "| preset | `(the preset)` | 31 |" in table
    assert "| tied | `--tie-embeddings` | 32 |" in table
    with open(os.path.join(output, "ablation.json")) as f:
        assert json.load(f)["tied"]["validation_bleu"] == 32.0
    # Finished runs of the same command are read, not run again; another
    # budget is another command.
    assert module.main(argv) == 0
    assert len(calls) == 2
    assert module.main([*argv, "--minutes", "3"]) == 0
    assert len(calls) == 4


def test_missing_data_and_a_bad_budget_are_one_line_errors(tmp_path, capsys):
    module = _script()
    argv = ["--data-dir", str(tmp_path), "--output", str(tmp_path / "r")]
    assert module.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "train.de is missing" in err
    assert "\n" not in err
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--minutes", "0"])
    assert exit_info.value.code == 2


def test_list_names_every_variant_and_runs_nothing(capsys, monkeypatch):
    module = _script()
    monkeypatch.setattr(module.subprocess, "run", None)
    assert module.main(["--list"]) == 0
    out = capsys.readouterr().out
    for name in module.VARIANTS:
        assert f"{name}: " in out


def test_every_variant_is_a_valid_command_line_of_the_example(tmp_path):
    module = _script()
    spec = importlib.util.spec_from_file_location("example", module.EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    args = module.parse_args(["--data-dir", _data(tmp_path)])
    for variant in module.VARIANTS:
        parsed = example.parse_args(module.command(args, variant)[2:])
        assert parsed.model == "transformer" and parsed.beam_width == 1
        assert parsed.max_minutes == 10.0
        if variant == "tied":
            assert parsed.tie_embeddings
        if variant == "width192":
            assert (parsed.embedding_dim, parsed.feed_forward_dim) == (192, 768)
