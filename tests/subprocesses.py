"""The one helper for tests that start a subprocess.

`run_python` runs `python ARGS` to the end and returns what it printed
(failing the test with its stderr when it fails or hangs); `start`, `kill`,
`wait_all` and `run` drive the example scripts in the background
(clusters, kills, timeouts), their output going to a log file.
"""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = {
    "sentiment": os.path.join(ROOT, "examples", "sentiment_classifier.py"),
    "translation": os.path.join(ROOT, "examples", "translation.py"),
}
# Small runs: enough data that an epoch takes about a second on 2 cores
# (so a run can be caught between epochs), small enough to stay fast.
SMALL = {
    "sentiment": ["--num-examples", "600", "--quiet"],
    "translation": [
        "--num-examples",
        "600",
        "--units",
        "16",
        "--embedding-dim",
        "16",
        "--quiet",
    ],
}
# Generous: the machine that runs the tests may be busy.
TIMEOUT_SECONDS = 240


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports that are free on 127.0.0.1 right now."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


# XLA compiles the tests' programs (each eager JAX op, every `jax.jit`,
# TensorFlow's `jit_compile=True`) with LLVM's optimizations off and the
# older loop emitters: the programs are tiny, so compiling, not running,
# is the cost. The programs' meaning is the same; users and the
# benchmarks keep XLA's defaults. tests/conftest.py sets them before Keras
# imports a backend; the workers and the examples' subprocesses inherit
# them, beside the flags a test gives.
FAST_XLA_COMPILES = (
    "--xla_backend_optimization_level=0",
    "--xla_cpu_use_fusion_emitters=false",
)


def with_fast_xla_compiles(flags: str) -> str:
    """`flags` (an `XLA_FLAGS` value) with `FAST_XLA_COMPILES` added,
    each unless `flags` sets it already."""
    given = flags.split()
    names = {flag.split("=")[0] for flag in given}
    added = [f for f in FAST_XLA_COMPILES if f.split("=")[0] not in names]
    return " ".join(given + added)


def environment(**extra) -> dict:
    """This process's environment, quiet, CPU only, plus `extra`."""
    env = dict(os.environ)
    env.update(
        TF_CPP_MIN_LOG_LEVEL="3",
        CUDA_VISIBLE_DEVICES="",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    env["XLA_FLAGS"] = with_fast_xla_compiles(env.get("XLA_FLAGS", ""))
    return env


def start(name: str, args: list[str], log_path, env=None):
    """Starts example `name` with `args`; stdout and stderr go to a file."""
    log = open(log_path, "w")
    try:
        return subprocess.Popen(
            [sys.executable, SCRIPTS[name], *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env or environment(),
            cwd=ROOT,
            start_new_session=True,
        )
    finally:
        log.close()


def kill(process) -> None:
    """SIGKILL to `process` and its children, then reap it."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def tail(path, lines: int = 40) -> str:
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def wait_all(processes, logs, timeout=TIMEOUT_SECONDS) -> list[int]:
    """Waits for every process; kills them all and fails past `timeout`."""
    deadline = time.monotonic() + timeout
    try:
        for process in processes:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        for process in processes:
            kill(process)
        pytest.fail(
            f"not finished within {timeout} s:\n"
            + "\n".join(f"--- {log}\n{tail(log)}" for log in logs)
        )
    return [process.returncode for process in processes]


def run(name: str, args: list[str], log_path, env=None, timeout=None):
    """Runs example `name` to the end; fails with its log if it fails."""
    process = start(name, args, log_path, env)
    (code,) = wait_all([process], [log_path], timeout or TIMEOUT_SECONDS)
    assert code == 0, f"exit code {code}:\n{tail(log_path)}"
    with open(log_path, errors="replace") as f:
        return f.read()


def run_python(args, env=None, timeout=TIMEOUT_SECONDS, check=True):
    """Runs `python *args` from the repository root and waits for it.

    Args:
        args: Arguments after the interpreter, e.g. `["-c", code]`.
        env: The environment; defaults to `environment()`.
        timeout: Seconds before the test fails (the process is killed).
        check: Fail the test, with the end of its stderr, when the exit
            status is not 0. Defaults to `True`.

    Returns:
        The `subprocess.CompletedProcess`, with text `stdout` and `stderr`.
    """
    try:
        done = subprocess.run(
            [sys.executable, *args],
            capture_output=True,
            text=True,
            env=env or environment(),
            cwd=ROOT,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        stderr = error.stderr or b""
        if isinstance(stderr, bytes):
            stderr = stderr.decode(errors="replace")
        pytest.fail(f"ran over {timeout} s; stderr:\n{stderr[-4000:]}")
    if check:
        assert done.returncode == 0, (
            f"exit status {done.returncode}; stderr:\n{done.stderr[-4000:]}"
        )
    return done
