"""benchmarks/long_sequences.py draws its figure only where `--plot` says.

The committed `benchmarks/long_sequences.png` is the full run's figure: a
quick or one-size run must never overwrite it. The measurements
(`run_one`, a subprocess per cell) are replaced by made-up rows, so
nothing here measures anything.
"""

import contextlib
import importlib.util
import io
import os

import pytest

# Argument parsing and a plot, no backend work: TF lane only.
pytestmark = pytest.mark.backend_independent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "long_sequences.py")


def _benchmark(name):
    """`benchmarks/NAME.py`, imported as a module."""
    path = os.path.join(ROOT, "benchmarks", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"{name}_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _script(monkeypatch, plots):
    spec = importlib.util.spec_from_file_location("long_sequences_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def run_one(args, mode, impl, n):
        return {
            "mode": mode,
            "impl": impl,
            "n": n,
            "first_step_s": 1.0,
            "seconds": None,
            "peak_gib": n / 1024,
            "base_gib": 0.5,
        }

    real_plot = module.plot

    def plot(results, path):
        plots.append(path)
        real_plot(results, path)

    def speed(args):
        raise AssertionError("the speed table ran")

    monkeypatch.setattr(module, "run_one", run_one)
    monkeypatch.setattr(module, "plot", plot)
    monkeypatch.setattr(module, "speed", speed)
    return module


@pytest.mark.parametrize(
    "argv", [["--quick"], ["--table", "memory", "--sizes", "256"], []]
)
def test_a_run_without_plot_writes_no_figure(argv, tmp_path, monkeypatch):
    # From a copy of the repository's layout, so that a default path,
    # relative or not, would show up here rather than in the checkout.
    (tmp_path / "benchmarks").mkdir()
    monkeypatch.chdir(tmp_path)
    plots = []
    module = _script(monkeypatch, plots)
    monkeypatch.setattr(
        module, "__file__", str(tmp_path / "benchmarks" / "long_sequences.py")
    )
    with contextlib.redirect_stdout(io.StringIO()) as out:
        module.main([*argv, "--modes", "tf_function"])
    assert "| tf_function |" in out.getvalue()
    assert plots == []
    assert list(tmp_path.rglob("*.png")) == []


def test_plot_writes_the_figure_where_asked(tmp_path, monkeypatch):
    plots = []
    module = _script(monkeypatch, plots)
    path = tmp_path / "memory.png"
    with contextlib.redirect_stdout(io.StringIO()) as out:
        module.main(["--quick", "--modes", "tf_function", "--plot", str(path)])
    assert plots == [str(path)]
    assert path.stat().st_size > 0
    assert f"plot: {path}" in out.getvalue()


def test_plot_with_the_speed_table_is_a_one_line_error(monkeypatch):
    module = _script(monkeypatch, [])
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        with pytest.raises(SystemExit) as exit_info:
            module.main(["--table", "speed", "--plot", "speed.png"])
    assert exit_info.value.code == 2
    lines = stderr.getvalue().splitlines()
    assert "error: --plot" in lines[-1], lines


def _latent_cache():
    return _benchmark("latent_cache")


def test_latent_cache_reads_the_bytes_from_the_caches():
    # DeepSeek-V2's Table 1: MLA caches d_c + d_h^R numbers a token,
    # MHA 2 n_h d_h and GQA 2 n_g d_h.
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert _latent_cache().main(["--quick"]) == 0
    rows = {
        line.split(" | ")[0].strip("| "): line.split(" | ")[1:]
        for line in out.getvalue().splitlines()
        if line.startswith("| ") and "Attention" in line
    }
    numbers = {name.split()[0]: int(row[0]) for name, row in rows.items()}
    assert numbers == {
        "MultiHeadAttention": 2 * 16 * 64,
        "GroupedQueryAttention": 2 * 4 * 64,
        "MultiHeadLatentAttention": 256 + 32,
    }


def test_latent_cache_bad_lengths_are_a_one_line_error():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = _latent_cache().main(["--max-length", "3", "--steps", "4"])
    assert code == 2
    assert out.getvalue().startswith("error: --max-length must exceed")


def _gqa_speed():
    return _benchmark("gqa_speed")


def test_gqa_speed_shape_is_parsed():
    module = _gqa_speed()
    assert module.parse_args([]).shape is None
    args = module.parse_args(["--shape", "8,2048,1024,64,16,4"])
    assert args.shape == (8, 2048, 1024, 64, 16, 4)


@pytest.mark.parametrize(
    "shape", ["8,512,256", "8,512,256,32,8,x", "0,1,1,1,1,1"]
)
def test_gqa_speed_bad_shape_is_a_one_line_error(shape):
    module = _gqa_speed()
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        with pytest.raises(SystemExit) as exit_info:
            module.parse_args(["--shape", shape])
    assert exit_info.value.code == 2
    lines = stderr.getvalue().splitlines()
    assert "--shape: six positive integers" in lines[-1], lines


def _serving_caches():
    return _benchmark("serving_caches")


def test_serving_caches_reads_the_bytes_from_the_caches():
    # 2 K/V heads of 64: 256 numbers a position; the rolling cache keeps
    # 512 + 4 of them whatever was written, keras-hub's cache all.
    module = _serving_caches()
    rows = module.rolling_rows([40, 80], 20, dtypes=("float32",))
    assert [row[2] for row in rows] == [516 * 256 * 4] * 2
    assert [row[3] for row in rows] == [40 * 256 * 4, 80 * 256 * 4]
    assert max(row[4] for row in rows) < 1e-5
    rows, _ = module.quantized_rows(8, batch=1)
    per_token = {row[0].split()[0]: row[1] for row in rows}
    assert per_token == {
        "float32": 1024,
        "bfloat16": 512,
        "int8": 2 * 2 * (64 + 4),
        "float8_e4m3fn": 2 * 2 * (64 + 4),
    }
    # int8 keeps the logits within a few hundredths (about 4 here).
    assert 0 < rows[2][2] < 0.1
    # The logits are the layer's: their softmax is its weights.
    exact = [row for row in rows if not row[0].startswith("bfloat16")]
    assert max(row[-1] for row in exact) < 1e-5


def test_serving_caches_bad_lengths_are_a_one_line_error():
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        with pytest.raises(SystemExit) as exit_info:
            _serving_caches().parse_args(["--lengths", "0,8"])
    assert exit_info.value.code == 2
    lines = stderr.getvalue().splitlines()
    assert "comma-separated positive integers" in lines[-1], lines


def _quantized_cache_bleu():
    return _benchmark("quantized_cache_bleu")


@pytest.mark.backend_independent
def test_cache_bleu_copies_the_archive_with_each_cache_dtype_set(tmp_path):
    import json
    import zipfile

    module = _quantized_cache_bleu()
    config = {
        "class_name": "TextTranslator",
        "config": {"model": {"config": {"cache_dtype": None, "layers": []}}},
        "cache_dtype": None,
    }
    path = tmp_path / "model.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("model.weights.h5", b"weights")
    copy = module.with_cache_dtype(path, "int8", tmp_path)
    with zipfile.ZipFile(copy) as archive:
        patched = json.loads(archive.read("config.json"))
        assert archive.read("model.weights.h5") == b"weights"
    assert patched["cache_dtype"] == "int8"
    assert patched["config"]["model"]["config"]["cache_dtype"] == "int8"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", json.dumps({"config": {}}))
    with pytest.raises(ValueError, match="no `cache_dtype`"):
        module.with_cache_dtype(path, "int8", tmp_path)
