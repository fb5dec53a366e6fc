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


def _roofline():
    return _benchmark("roofline")


@pytest.mark.parametrize(
    "mask, n, documents, window, pairs",
    [
        ("none", 4, 1, 1, 16),
        # Query i sees keys 0..i: 1 + 2 + 3 + 4.
        ("causal", 4, 1, 1, 10),
        # Two documents of two, each seen whole from inside: 2 * 2^2.
        ("documents", 4, 2, 1, 8),
        # Three documents of 5 in 15 and four of 3, 3, 3, 3 in 12.
        ("documents", 15, 3, 1, 75),
        ("documents", 12, 4, 1, 36),
        # The 2 most recent keys, the query's own included: 1 + 2 + 2 + 2.
        ("window", 4, 1, 2, 7),
        # A window as long as the sequence is causal.
        ("window", 4, 1, 4, 10),
        ("window", 4, 1, 9, 10),
    ],
)
def test_roofline_counts_the_pairs_each_mask_keeps(
    mask, n, documents, window, pairs
):
    assert _roofline().allowed_pairs(mask, n, documents, window) == pairs


def test_roofline_useful_flops_are_4_d_a_pair_and_3_5x_for_fwd_bwd():
    module = _roofline()
    spec = {"batch": 2, "heads": 3, "head_dim": 5, "documents": 2}
    spec["window"] = 2
    # Causal N = 4: 10 pairs, 4 * 5 FLOPs each, for 2 x 3 heads.
    assert module.useful_flops(spec, "causal", 4, "forward") == 1200
    assert module.useful_flops(spec, "causal", 4, "backward") == 4200
    assert module.useful_flops(spec, "none", 4, "forward") == 1920


@pytest.mark.parametrize("mask", ["none", "causal", "documents", "window"])
def test_roofline_counts_what_the_kernels_are_given(mask):
    """The count, the boolean mask the anchors get and the mask mod ours
    gets keep the same pairs (documents of 4, 4 and 4; a window of 5)."""
    import keras

    module = _roofline()
    n, documents, window = 12, 3, 5
    pairs = module.allowed_pairs(mask, n, documents, window)
    dense = module.dense_mask(mask, n, documents, window)
    assert (n * n if dense is None else int(dense.sum())) == pairs
    mod = module.our_mask_mod(mask, n, documents, window)
    assert (mod is None) == (mask == "none")
    if mod is not None:
        q, kv = keras.ops.arange(n)[:, None], keras.ops.arange(n)[None]
        kept = keras.ops.broadcast_to(mod(0, 0, q, kv), (n, n))
        assert keras.ops.convert_to_numpy(kept).tolist() == dense.tolist()


def _roofline_results():
    """Made-up measurements: a roof of 100 GFLOP/s; ours forward at half
    of it, its fwd+bwd 3x its forward; an anchor that did not run and
    one whose output differs."""
    flops = 4 * 64 * 1024 * 1024 * 8  # N = 1024, no mask
    row = {"backend": "tensorflow", "n": 1024, "mask": "none"}
    ours = {**row, "implementation": "ours: flex_attention", "kernel": "ours"}
    keras_row = {
        **row,
        "implementation": "keras.ops.dot_product_attention",
        "kernel": "keras",
    }
    seconds = flops / 50e9
    rows = [
        {**ours, "pass": "forward", "flops": flops, "seconds": seconds},
        {
            **ours,
            "pass": "backward",
            "flops": 3.5 * flops,
            "seconds": 3 * seconds,
            "path": "blocks",
        },
        {**keras_row, "pass": "forward", "flops": flops, "error": "no mask"},
        {
            **keras_row,
            "mask": "causal",
            "pass": "forward",
            "flops": flops / 2,
            "seconds": seconds,
            "max_diff": 0.5,
        },
    ]
    return {
        "tensorflow": {
            "gflops": 100.0,
            "roofs": [90.0, 100.0],
            "versions": "Keras 3, tensorflow 2",
            "rows": rows,
            "error": None,
        },
        "jax": {
            "gflops": None,
            "versions": "jax",
            "rows": [],
            "error": "the process ended with status -9 after 0 rows: Killed",
        },
    }


def test_roofline_table_gives_the_fraction_of_the_roof(monkeypatch, tmp_path):
    import json

    module = _roofline()
    calls = []

    def run_backend(args, backend):
        calls.append(backend)
        return _roofline_results()[backend]

    monkeypatch.setattr(module, "run_backend", run_backend)
    monkeypatch.setattr(module, "commit", lambda: "abc1234")
    monkeypatch.setattr(os, "getloadavg", lambda: (1.5, 1.0, 0.5))
    path = tmp_path / "rows.json"
    argv = ["--backends", "tensorflow", "jax", "--json", str(path)]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert module.main(argv) == 0
    lines = out.getvalue().splitlines()
    assert calls == ["tensorflow", "jax"]
    text = out.getvalue()
    assert "Commit abc1234." in text
    assert "avx512f: " in text and "avx512_bf16: " in text
    assert "before 1.50, 1.00, 0.50; after 1.50, 1.00, 0.50" in text
    assert (
        "tensorflow 100.0 GFLOP/s (before the rows 90.0, after 100.0; "
        "Keras 3, tensorflow 2)" in text
    )
    assert "3.5x" in text
    table = [line for line in lines if line.startswith("| tensorflow ")]
    assert table == [
        "| tensorflow | 1024 | none | ours: flex_attention | forward | "
        "42.9 | - | 0.50 |",
        "| tensorflow | 1024 | none | ours: flex_attention (blocks) | "
        "fwd+bwd | 128.8 | 3.00 | 0.58 |",
        "| tensorflow | 1024 | none | keras.ops.dot_product_attention | "
        "forward | n/a | - | - |",
        "| tensorflow | 1024 | causal | keras.ops.dot_product_attention | "
        "forward | 42.9 | - | 0.25 |",
    ]
    assert (
        "- n/a: tensorflow, keras.ops.dot_product_attention, forward "
        "(N=1024 none): no mask" in lines
    )
    assert any(
        line.startswith("- differs from ours: tensorflow, keras.ops")
        and "5.0e-01" in line
        for line in lines
    )
    assert lines[-1].startswith("- jax: the process ended with status -9")
    saved = json.loads(path.read_text())
    assert saved["machine"]["commit"] == "abc1234"
    assert saved["roofs"]["jax"]["gflops"] is None
    assert [round(r["fraction"] or 0, 3) for r in saved["rows"]] == [
        0.5,
        0.583,
        0,
        0.25,
    ]


def test_roofline_keeps_the_higher_of_the_roofs_before_and_after_the_rows():
    import json

    module = _roofline()
    result = {"gflops": None, "versions": "jax", "rows": [], "roofs": []}
    gemm = {"kind": "gemm", "backend": "jax", "versions": "Keras 3, jax 0"}
    row = {"backend": "jax", "n": 1024, "mask": "none", "kernel": "ours"}
    row.update(implementation="ours", flops=1e9, seconds=0.01)
    lines = [
        {**gemm, "gflops": 150.0},
        {**row, "pass": "forward"},
        {**gemm, "gflops": 180.0},
    ]
    with contextlib.redirect_stderr(io.StringIO()):
        for line in lines:
            module._take(module.ROW + json.dumps(line), result)
    assert result["roofs"] == [150.0, 180.0]
    assert result["gflops"] == 180.0
    (measured,) = module.finish({"jax": result})
    assert round(measured["fraction"], 3) == round(100 / 180, 3)


def test_roofline_reads_the_cpu_and_its_avx512_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Test CPU 9000\n"
        "flags\t\t: fpu avx2 avx512f avx512bw\n\n"
        "processor\t: 1\nmodel name\t: Other\nflags\t\t: fpu\n"
    )
    info = _roofline().machine(str(cpuinfo))
    assert info["cpu"] == "Test CPU 9000"
    assert info["avx512f"] is True
    assert info["avx512_bf16"] is False


def test_roofline_quick_is_small():
    args = _roofline().parse_args(["--quick"])
    assert (args.lengths, args.repeats, args.gemm_size) == ([256], 1, 512)
    assert args.window == 64
    args = _roofline().parse_args([])
    assert (args.lengths, args.repeats, args.gemm_size) == (
        [1024, 4096],
        5,
        4096,
    )
    assert (args.window, args.documents, args.heads, args.head_dim) == (
        256,
        8,
        8,
        64,
    )
    assert args.backends == ["tensorflow", "jax", "torch"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--lengths", "0"], "argument --lengths: a positive integer"),
        (["--lengths", "1k"], "argument --lengths: a positive integer"),
        (["--backends", "numpy"], "argument --backends: invalid choice"),
        (["--masks", "alibi"], "argument --masks: invalid choice"),
        (["--repeats", "-1"], "argument --repeats: a positive integer"),
        (["--max-gib", "0"], "--max-gib must be positive"),
        (["--lengths", "4", "--documents", "8"], "--documents (8) must not"),
    ],
)
def test_roofline_bad_arguments_are_a_one_line_error(argv, message):
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        with pytest.raises(SystemExit) as exit_info:
            _roofline().main(argv)
    assert exit_info.value.code == 2
    lines = stderr.getvalue().splitlines()
    assert ": error: " in lines[-1], lines
    assert message in lines[-1], lines


class _InterruptedWorker:
    """A worker process whose output stops with Ctrl-C after one row."""

    killed = False

    def __init__(self, command, **kwargs):
        self.returncode = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.returncode = -9 if _InterruptedWorker.killed else 0

    @property
    def stdout(self):
        import json

        row = {"backend": "jax", "n": 8, "mask": "none", "pass": "forward"}
        row.update(kernel="ours", seconds=0.001)
        gemm = {"kind": "gemm", "gflops": 1.0, "versions": "jax"}
        yield "@row " + json.dumps(gemm) + "\n"
        yield "some log line\n"
        yield "@row " + json.dumps(row) + "\n"
        raise KeyboardInterrupt

    def kill(self):
        _InterruptedWorker.killed = True


def test_roofline_interrupted_worker_is_killed_and_its_rows_kept(
    monkeypatch,
):
    module = _roofline()
    monkeypatch.setattr(module.subprocess, "Popen", _InterruptedWorker)
    _InterruptedWorker.killed = False
    args = module.parse_args(["--quick"])
    with contextlib.redirect_stderr(io.StringIO()):
        result = module.run_backend(args, "jax")
    assert _InterruptedWorker.killed
    assert result["interrupted"]
    assert result["error"] == "interrupted after 1 rows"
    assert (result["gflops"], result["versions"]) == (1.0, "jax")
    assert [row["kernel"] for row in result["rows"]] == ["ours"]


def test_roofline_stops_at_an_interrupted_backend_and_prints(monkeypatch):
    module = _roofline()
    results = _roofline_results()
    results["tensorflow"]["interrupted"] = True
    calls = []

    def run_backend(args, backend):
        calls.append(backend)
        return results[backend]

    monkeypatch.setattr(module, "run_backend", run_backend)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert module.main(["--backends", "tensorflow", "jax"]) == 0
    assert calls == ["tensorflow"]
    assert (
        "| tensorflow | 1024 | none | ours: flex_attention |" in out.getvalue()
    )
