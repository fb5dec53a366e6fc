"""Shared test set-up: fresh Keras state, hypothesis profiles and the lanes.

The README's test command runs the suite once per Keras backend (a lane):

- TensorFlow: every test but those marked `jax_lane` (deselected: costly,
  and a cheaper test that their docstring names covers the same code on
  the other backends).
- JAX: every test but those marked `tensorflow_only` (skipped, with the
  reason), `backend_independent` (deselected: they check documentation,
  data files or argument parsing, which the TensorFlow lane already proves)
  and `tensorflow_lane` (deselected, as `jax_lane` in the TensorFlow lane).
- PyTorch: the tests of the library itself, which do not need TensorFlow
  (`TORCH_LANE` below); the examples, their data pipelines and the
  TensorFlow-only features are deselected.

`tests/legacy/` is not part of any lane: it compares our layers with the
retired Keras-2 packages themselves, which need their own environment
(docs/testing.md, "The retired packages themselves"), and is collected
only with `--legacy`.
"""

import os
import pathlib
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tests import subprocesses  # noqa: E402

# Before Keras imports a backend: see subprocesses.FAST_XLA_COMPILES.
os.environ["XLA_FLAGS"] = subprocesses.with_fast_xla_compiles(
    os.environ.get("XLA_FLAGS", "")
)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tests import profiles  # noqa: E402, F401 - loads the hypothesis profile

BACKEND = keras.backend.backend()
ROOT = pathlib.Path(__file__).resolve().parents[1]

# Test paths (relative to the repository root) of the PyTorch lane: the
# ops, scores, layers, seq2seq, saving and error checks, the layout map of
# tensor parallelism (built on every backend) and the language model's
# generation (eager on PyTorch, as keras-hub's) and the documentation's
# code blocks.
TORCH_LANE = (
    "tests/ops/",
    "tests/scores/",
    "tests/test_properties.py",
    "tests/test_saving.py",
    "tests/test_saved_models.py",
    "tests/test_errors_doc.py",
    "tests/test_check.py",
    "tests/test_bad_inputs.py",
    "tests/test_sweep.py",
    "tests/test_distribution.py",
    "tests/layers/",
    "tests/seq2seq/",
    "tests/visualize/test_collect.py",
    "tests/models/test_generation.py",
    "tests/test_doc_blocks.py",
    "tests/test_hub.py",
    "tests/test_hub_generation.py",
    "tests/test_hub_qwen3_5.py",
)


def pytest_addoption(parser):
    parser.addoption(
        "--legacy",
        action="store_true",
        help="run tests/legacy/ (only): our layers against the retired "
        "Keras-2 packages, in the environment docs/testing.md describes",
    )


def pytest_ignore_collect(collection_path, config):
    """`tests/legacy/` with `--legacy`, everything else without it."""
    legacy = ROOT / "tests" / "legacy"
    inside = collection_path == legacy or legacy in collection_path.parents
    if config.getoption("--legacy"):
        return None if inside or collection_path in legacy.parents else True
    return True if inside else None


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Each test starts with float32, a fixed seed and no leftover names."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
    # free_memory=True would run gc.collect() after every test: about
    # 0.6 s each on 2 cores, most of the suite's time.
    keras.backend.clear_session(free_memory=False)


@pytest.fixture
def rng():
    """A NumPy generator seeded with 0, new for each test.

    A test draws the same data whichever tests ran before it, and on
    whichever pytest-xdist worker. Hypothesis tests cannot take it (a
    function-scoped fixture is not reset between examples): they seed
    their own generator from a drawn integer.
    """
    return np.random.default_rng(0)


@pytest.fixture
def rand(rng):
    """`rand(*shape, scale=1.0)`: float32 normal draws from `rng`.

    A test that takes both gets one stream: `rand` and `rng` draw in turn.
    """

    def rand(*shape, scale=1.0):
        return (scale * rng.normal(size=shape)).astype("float32")

    return rand


@pytest.fixture
def plans(monkeypatch):
    """The `Plan`s made while the test runs: `keras_attention.ops.plan.
    plan_attention` recorded (the engine plans through that name)."""
    from keras_attention.ops import plan as plan_lib

    made = []
    original = plan_lib.plan_attention

    def recording(*args, **kwargs):
        made.append(original(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(plan_lib, "plan_attention", recording)
    return made


def _in_lane(item) -> bool:
    if BACKEND == "tensorflow":
        return "jax_lane" not in item.keywords
    if "backend_independent" in item.keywords:
        return False
    if "tensorflow_lane" in item.keywords:
        return False
    if BACKEND == "torch":
        if "jax_lane" in item.keywords:
            return False
        path = os.path.relpath(str(item.path), str(item.config.rootpath))
        return path.replace(os.sep, "/").startswith(TORCH_LANE)
    return True


def _heavy_modules_first(items):
    """Modules with a `heavy` test first, each module's order kept.

    pytest-xdist (`--dist loadfile`, `--no-loadscope-reorder` in
    `setup.cfg`) hands the modules out in this order: the long ones start
    while the cheap ones fill in beside them, instead of one long module
    running alone at the end of the lane. (Its own reorder, by number of
    tests, put the examples' few long tests last.)
    """
    heavy = {item.path for item in items if "heavy" in item.keywords}
    items.sort(key=lambda item: item.path not in heavy)


def pytest_collection_modifyitems(config, items):
    """Selects this backend's lane; skips `tensorflow_only` tests in it."""
    dropped = [item for item in items if not _in_lane(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if _in_lane(item)]
    _heavy_modules_first(items)
    if BACKEND == "tensorflow":
        return
    skip = pytest.mark.skip(
        reason=f"needs the TensorFlow backend; this lane runs {BACKEND}"
    )
    for item in items:
        if "tensorflow_only" in item.keywords:
            item.add_marker(skip)


# JAX's persistent compilation cache, shared by the lane's processes: tests
# that build the same model (the same HLO) compile it once per lane instead
# of once per test and worker. A new, empty folder for each run (a fresh
# clone's run is no faster than any other), removed at the end; set
# JAX_COMPILATION_CACHE_DIR to keep one.
_JAX_CACHE = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
}


def _share_jax_compilations(config):
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        # The first process (pytest-xdist's controller, or a run without
        # it) makes the folder; the workers and the examples' subprocesses
        # inherit the variables.
        folder = tempfile.mkdtemp(prefix="keras-attention-jax-cache-")
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
        os.environ["JAX_COMPILATION_CACHE_DIR"] = folder
        for name, value in _JAX_CACHE.items():
            os.environ.setdefault(name, value)
    import jax

    # This process imported JAX before the variables were set.
    jax.config.update(
        "jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"]
    )
    for name in _JAX_CACHE:
        kind = type(getattr(jax.config, name.lower()))
        jax.config.update(name.lower(), kind(os.environ[name]))


def pytest_configure(config):
    if BACKEND == "jax":
        _share_jax_compilations(config)


def pytest_report_header(config):
    return f"lane: Keras backend {BACKEND} (see tests/conftest.py)"
