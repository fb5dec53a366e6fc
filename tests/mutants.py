"""Proof that the suite has teeth: plants known bugs, one at a time.

Each mutant replaces one exact piece of the package's source in a copy of
the repository (the working tree is never touched), runs the test command of
a lane in that copy and lists the tests that fail. A mutant that no test
catches is a hole in the suite.

    python -m tests.mutants                   # every mutant, TF lane
    python -m tests.mutants NAME -- ARGS...   # one mutant, pytest ARGS

Not collected by pytest (the file name has no `test_` prefix).
"""

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    path: str
    old: str
    new: str


MUTANTS = (
    Mutant(
        "layout_output_axis",
        "layout_map splits the output kernel over its output dim, not its "
        "input heads (a column split where Megatron's is a row split)",
        "keras_attention/distribution.py",
        '(_ANY + r"attention_output/kernel", (_MODEL,), "heads", True),',
        '(_ANY + r"attention_output/kernel", (None, None, _MODEL), "heads", '
        "True),",
    ),
    Mutant(
        "masked_softmax",
        "masked_softmax ignores its mask",
        "keras_attention/ops/attend.py",
        '    checks.broadcasts_to("masked_softmax", mask, logits)\n',
        '    checks.broadcasts_to("masked_softmax", mask, logits)\n'
        "    mask = None\n",
    ),
    Mutant(
        "frobenius_identity",
        "the Frobenius penalty drops the identity: ‖AAᵀ‖² for ‖AAᵀ − I‖²",
        "keras_attention/ops/attend.py",
        "ops.square(gram - identity)",
        "ops.square(gram)",
    ),
    Mutant(
        "mha_key_projection",
        "MultiHeadAttention projects `value` where it should project `key`",
        "keras_attention/layers/_multi_head_base.py",
        "self._key_dense(key)",
        "self._key_dense(value)",
    ),
    Mutant(
        "plan_threshold",
        "the planner's threshold is twice the bytes it says",
        "keras_attention/ops/plan.py",
        "if size < chunk_threshold() and not causal_pays:",
        "if size < 2 * chunk_threshold() and not causal_pays:",
    ),
    Mutant(
        "plan_tensor_mask",
        "the planner sends a tensor mask to blocks that cannot read it",
        "keras_attention/ops/plan.py",
        "                or request.tensor_mask\n",
        "",
    ),
    Mutant(
        "heads_fold_mask",
        "the fused kernel folds a per-head mask onto the wrong query heads",
        "keras_attention/layers/_heads.py",
        "mask = ops.transpose(mask, (0, 1, 3, 2, 4))",
        "mask = ops.reshape(mask, (batch, -1, q_len, groups, k_len))",
    ),
    Mutant(
        "chunked_row_term",
        "the block kernel's backward pass drops the row term of the "
        "softmax gradient",
        "keras_attention/ops/_kernel.py",
        "ops.concatenate([d_out, -delta], axis=-1)",
        "ops.concatenate([d_out, 0 * delta], axis=-1)",
    ),
    Mutant(
        "plan_accelerator_share",
        "on an accelerator the blocks wait for all of its memory, not a "
        "quarter (the dense logits would not fit beside the model)",
        "keras_attention/ops/plan.py",
        "int(memory * ACCELERATOR_MEMORY_SHARE)",
        "int(memory)",
    ),
    Mutant(
        "ring_gradients_home",
        "the ring's backward pass stops one step short: the key/value "
        "gradients never reach the device that owns them",
        "keras_attention/ops/_ring.py",
        "jax.lax.fori_loop(0, config.size, body, carry)",
        "jax.lax.fori_loop(0, config.size - 1, body, carry)",
    ),
    Mutant(
        "ring_documents_touching",
        "the ring skips a pair of device blocks that share one document id",
        "keras_attention/ops/_ring.py",
        "return ops.any(low <= high)",
        "return ops.any(low < high)",
    ),
    Mutant(
        "ring_band_ignored",
        "the ring never skips the device blocks a band empties",
        "keras_attention/ops/_ring.py",
        "        if config.band is not None:\n            nq, nk",
        "        if False:\n            nq, nk",
    ),
    Mutant(
        "attention_config_score",
        "`Attention.get_config` forgets `score`",
        "keras_attention/layers/attention.py",
        '            "score": scores_lib.serialize(self.score),\n',
        "",
    ),
    Mutant(
        "beam_lowest",
        "beam search keeps its lowest-ranked candidates at every step",
        "keras_attention/seq2seq/beam_search.py",
        "ops.top_k(ops.reshape(ranking, (batch, k * vocab)), k)",
        "ops.top_k(-ops.reshape(ranking, (batch, k * vocab)), k)",
    ),
    Mutant(
        "tsv_last_line",
        "the TSV reader drops the last line of a file",
        "keras_attention/data/sentiment.py",
        "enumerate(lines[1:], start=2)",
        "enumerate(lines[1:-1], start=2)",
    ),
    Mutant(
        "window_off_by_one",
        "the sliding window's band limits are one key too wide",
        "keras_attention/ops/mods.py",
        "return (self.window - 1, self.window - 1)",
        "return (self.window, self.window)",
    ),
    Mutant(
        "structured_padding",
        "StructuredSelfAttention ignores the padding mask",
        "keras_attention/layers/structured.py",
        "self.num_hops, ops.shape(inputs)[1], value_mask=mask",
        "self.num_hops, ops.shape(inputs)[1], value_mask=None",
    ),
)


def _copy_repository(destination):
    ignore = shutil.ignore_patterns(
        ".git",
        "__pycache__",
        ".pytest_cache",
        ".hypothesis",
        "runs",
        "*.egg-info",
    )
    shutil.copytree(ROOT, destination, ignore=ignore)


def _plant(copy, mutant):
    path = os.path.join(copy, mutant.path)
    with open(path, encoding="utf-8") as f:
        source = f.read()
    count = source.count(mutant.old)
    if count != 1:
        raise SystemExit(
            f"error: mutant {mutant.name}: the text to replace occurs "
            f"{count} times in {mutant.path} (expected once); update "
            "tests/mutants.py"
        )
    with open(path, "w", encoding="utf-8") as f:
        f.write(source.replace(mutant.old, mutant.new))


def _check_imports_the_copy(copy, environment):
    """Fails unless a script in the copy's examples/ imports the copy."""
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "import keras_attention; print(keras_attention.__file__)",
        ],
        cwd=os.path.join(copy, "examples"),
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    expected = os.path.join(copy, "keras_attention", "__init__.py")
    if os.path.realpath(found) != os.path.realpath(expected):
        raise SystemExit(
            f"error: a subprocess in the copy imports {found}, not the "
            f"copy's {expected}"
        )


def run(mutant, pytest_args, environment):
    """Runs the suite against `mutant`: (failed test ids, seconds, output)."""
    with tempfile.TemporaryDirectory() as parent:
        copy = os.path.join(parent, "repo")
        _copy_repository(copy)
        # shared/ beside the repository, as in a checkout.
        shared = os.path.join(os.path.dirname(ROOT), "shared")
        if os.path.isdir(shared):
            os.symlink(shared, os.path.join(parent, "shared"))
        _plant(copy, mutant)
        # The copy's package, not the installed one (an editable install
        # points at some checkout), in pytest and in every subprocess the
        # tests start: the examples run as scripts, whose own folder is
        # first on their path.
        environment = dict(environment, PYTHONPATH=copy)
        _check_imports_the_copy(copy, environment)
        start = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-rfE", *pytest_args],
            cwd=copy,
            env=environment,
            capture_output=True,
            text=True,
        )
        seconds = time.monotonic() - start
    output = result.stdout + result.stderr
    # "FAILED id - message": an id may hold spaces (parameters), so it ends
    # at the " - " of the message or at the end of the line.
    failed = sorted(
        set(re.findall(r"^(?:FAILED|ERROR) (.+?)(?: - |$)", output, re.M))
    )
    if result.returncode not in (0, 1):
        failed.append(f"(pytest exit {result.returncode})")
    return failed, seconds, output


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "names",
        nargs="*",
        help="mutants to run (default: all): "
        + ", ".join(m.name for m in MUTANTS),
    )
    parser.add_argument(
        "--backend",
        default="tensorflow",
        help="KERAS_BACKEND of the lane to run (default: %(default)s)",
    )
    argv = sys.argv[1:] if argv is None else list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    pytest_args = argv[split + 1 :] or ["-n", "auto"]
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"unknown mutants: {', '.join(sorted(unknown))}")
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    environment = dict(os.environ, KERAS_BACKEND=args.backend)
    environment.setdefault("HYPOTHESIS_PROFILE", "mutants")
    survivors = []
    for mutant in chosen:
        failed, seconds, output = run(mutant, pytest_args, environment)
        print(f"## {mutant.name}: {mutant.what} ({seconds:.0f} s)")
        print(f"   {len(failed)} failing tests")
        for test in failed:
            print(f"   - {test}")
        if not failed:
            survivors.append(mutant.name)
            print(output[-3000:])
        sys.stdout.flush()
    if survivors:
        print(f"survived: {', '.join(survivors)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
