"""benchmarks/preset_step_time.py: the FLOPs it divides the step time by."""

import importlib.util
import json
import os
import subprocess

import pytest

pytestmark = pytest.mark.backend_independent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "preset_step_time.py")


def _script():
    spec = importlib.util.spec_from_file_location("preset_step_time", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_forward_flops_by_hand():
    # Width 2, feed-forward 4, one block each side, 3 target words; one
    # pair of one source and one target token. Encoder: q, k, v, o
    # (4·2·2) and the feed-forward (2·2·4) per token, twice for the
    # multiply-adds, 64, plus scores and weighted sum 4·1·1·2 = 8. Decoder:
    # self q, k, v, o and cross q, o (6·2·2) and the feed-forward, 80;
    # cross k, v on the source token, 16; self and cross attention, 16.
    # Output layer 2·2·3 = 12.
    preset = {"embedding_dim": 2, "feed_forward_dim": 4, "num_layers": 1}
    assert _script().forward_flops(preset, 3, 1, 1, 1) == 72 + 112 + 12
    # Attention grows with the square of the length, the rest linearly.
    two = _script().forward_flops(preset, 3, 1, 2, 2)
    assert two == 2 * (64 + 80 + 16 + 12) + 4 * (8 + 16)


def test_bad_step_counts_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _script().parse_args(["--steps", "0"])
    assert exit_info.value.code == 2
    assert "Received: --steps 0" in capsys.readouterr().err


def test_a_policy_that_fails_is_a_row_not_the_end(monkeypatch):
    # oneDNN capped to AVX2 builds no bfloat16 matmul: that policy's
    # worker dies, and the table says so and goes on to the next row.
    script = _script()
    result = {
        "policy": "float32",
        "onednn": True,
        "isa": "AVX2",
        "median_s": 0.5,
        "p90_s": 0.6,
        "gflop_per_step": 50.0,
        "gflops": 100.0,
        "peak_gflops": 200.0,
    }

    def fake_run(command, env, **kwargs):
        policy = command[command.index("--worker") + 1]
        if policy == "mixed_bfloat16":
            return subprocess.CompletedProcess(
                command, 1, "", "Traceback ...\nRuntimeError: no bf16 matmul"
            )
        return subprocess.CompletedProcess(
            command, 0, "noise\nRESULT " + json.dumps(result) + "\n", ""
        )

    monkeypatch.setattr(script.subprocess, "run", fake_run)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    args = script.parse_args([])
    failed = script._row(script._run(args, "mixed_bfloat16", "on"))
    assert failed == (
        "| mixed_bfloat16 | on (AVX2) | fails: RuntimeError: no bf16 matmul |"
    )
    row = script._row(script._run(args, "float32", "on"))
    assert row == (
        "| float32 | on (AVX2) | 0.500 | 0.600 | 50.0 | 100.0 | 200.0 | 50% |"
    )
