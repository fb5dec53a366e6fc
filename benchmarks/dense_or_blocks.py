"""Dense or blocks: the planner's default against both, one process a cell.

For each case and length, one training step (the gradients of the
inputs, and of the layer's weights) with `chunk_size=None` (the default:
`keras_attention.ops.plan_attention` chooses), `chunk_size=0` (dense) and
`chunk_size=512` (the blocks), each in its own subprocess so that its peak
resident memory (`ru_maxrss`, the whole process: the backend's runtime
too) is its own. The step is compiled (`tf.function` on TensorFlow,
`jax.jit` on JAX); its time is the median of `--steps` steps after one
that compiles.

Cases, 4 heads of 64, batch 1 (`flex_attention` on `(1, N, 4, 64)`
tensors, `SelfAttention(4)` on `(1, N, 256)` inputs):

- `none`: `flex_attention` with no mask;
- `causal`: with `mods.causal()`;
- `window+alibi`: with `mods.sliding_window(256)` and `mods.alibi(4)`;
- `documents`: with `mods.document` of 8 documents of `N / 8`;
- `self causal`, `self`: `SelfAttention` with and without
  `use_causal_mask`.

The table says, for each case and length, whether the default kept to
the planner's promise: at most 1.5x the peak memory of the cheaper of
the other two settings, and at most 1.1x the time of the faster.

    python benchmarks/dense_or_blocks.py                     # TensorFlow
    KERAS_BACKEND=jax python benchmarks/dense_or_blocks.py   # JAX
    python benchmarks/dense_or_blocks.py --sizes 1024 --cases none

A dense cell whose step would need more than `--max-gib` (the planner's
estimate, `plan.step_bytes`) is not run: it would not fit beside the
others on this machine.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

CASES = ("none", "causal", "window+alibi", "documents", "self causal", "self")
SETTINGS = ("default", "0", "512")
HEADS, DEPTH = 4, 64


def parse(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[2048, 8192, 16384]
    )
    parser.add_argument(
        "--cases", nargs="+", default=list(CASES), choices=CASES
    )
    parser.add_argument("--steps", type=int, default=3, help="timed steps")
    parser.add_argument(
        "--max-gib",
        type=float,
        default=18.0,
        help="skip a cell whose dense step the planner estimates above this",
    )
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _mods(case, n):
    import numpy as np

    from keras_attention.ops import mods

    if case == "causal":
        return {"mask_mod": mods.causal()}
    if case == "window+alibi":
        return {
            "mask_mod": mods.sliding_window(256),
            "score_mod": mods.alibi(4),
        }
    if case == "documents":
        ids = np.repeat(np.arange(8), n // 8)[None].astype("int32")
        return {"mask_mod": mods.document(ids)}
    return {}


def _problem(case, n, chunk):
    """`(loss(weights, inputs), weights, inputs)` of one case."""
    import keras
    import numpy as np

    import keras_attention

    rng = np.random.default_rng(0)
    if case.startswith("self"):
        layer = keras_attention.SelfAttention(HEADS, chunk_size=chunk)
        x = rng.normal(size=(1, n, HEADS * DEPTH)).astype("float32")
        causal = case == "self causal"
        layer(x[:, :8], use_causal_mask=causal)

        def loss(weights, inputs):
            out, _ = layer.stateless_call(
                weights, [], inputs[0], use_causal_mask=causal
            )
            return keras.ops.sum(out**2)

        return loss, [v.value for v in layer.trainable_variables], [x]
    kwargs = _mods(case, n)
    tensors = [
        rng.normal(size=(1, n, HEADS, DEPTH)).astype("float32")
        for _ in range(3)
    ]

    def loss(weights, inputs):
        out = keras_attention.ops.flex_attention(
            *inputs, chunk_size=chunk, **kwargs
        )
        return keras.ops.sum(out**2)

    return loss, [], tensors


def _step(loss, weights, inputs):
    """A compiled step returning the gradients, run to completion."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        variables = [tf.Variable(w) for w in weights]
        sources = [tf.constant(x) for x in inputs]

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                tape.watch(sources)
                value = loss(variables, sources)
            return tape.gradient(value, variables + sources)

        return lambda: [g.numpy() for g in step()]
    if backend == "jax":
        import jax

        grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
        arrays = [jax.numpy.asarray(x) for x in inputs]
        return lambda: jax.block_until_ready(grad(weights, arrays))
    raise SystemExit(
        f"error: compiled steps on TensorFlow or JAX, not {backend}"
    )


def worker(spec):
    import keras_attention

    case, n, setting = spec["case"], spec["n"], spec["setting"]
    chunk = None if setting == "default" else int(setting)
    plans = []
    original = keras_attention.ops.plan.plan_attention

    def recording(*args, **kwargs):
        plans.append(original(*args, **kwargs))
        return plans[-1]

    keras_attention.ops.plan.plan_attention = recording
    loss, weights, inputs = _problem(case, n, chunk)
    step = _step(loss, weights, inputs)
    plans.clear()
    start = time.perf_counter()
    step()
    first = time.perf_counter() - start
    times = []
    for _ in range(spec["steps"]):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    path = plans[-1].path if plans else "?"
    return {
        "case": case,
        "n": n,
        "setting": setting,
        "path": path,
        "peak_gib": round(peak, 2),
        "first_s": round(first, 2),
        "step_s": round(statistics.median(times), 3),
    }


def _too_big(case, n, setting, max_gib):
    from keras_attention.ops import plan

    if setting != "0":
        return None
    mods = case not in ("none", "self", "self causal")
    need = plan.step_bytes((1, HEADS, n, n), mods=mods) / 2**30
    return f"dense step {need:.0f} GiB" if need > max_gib else None


def run_cell(spec):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode:
        error = (done.stderr.strip().splitlines() or ["killed"])[-1]
        return {**spec, "error": error[:60]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def verdict(rows):
    """Whether the default kept to 1.5x memory and 1.1x time of the best
    of the other two settings that ran."""
    by = {r["setting"]: r for r in rows if "step_s" in r}
    if "default" not in by:
        return "default did not run"
    others = [by[s] for s in ("0", "512") if s in by]
    if not others:
        return "-"
    memory = by["default"]["peak_gib"] / min(r["peak_gib"] for r in others)
    speed = by["default"]["step_s"] / min(r["step_s"] for r in others)
    ok = memory <= 1.5 and speed <= 1.1
    return f"{'yes' if ok else 'NO'} ({memory:.2f}x memory, {speed:.2f}x time)"


def main(argv=None):
    args = parse(argv)
    if args.worker:
        spec = json.loads(args.worker)
        print(json.dumps(worker(spec)))
        return 0
    import keras

    print(f"backend {keras.backend.backend()}; 4 heads of 64, batch 1")
    print("| case | N | setting | kernel | peak RSS GiB | step s | default |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for case in args.cases:
        for n in args.sizes:
            cell_rows = []
            for setting in SETTINGS:
                spec = {"case": case, "n": n, "setting": setting}
                skipped = _too_big(case, n, setting, args.max_gib)
                if skipped:
                    row = {**spec, "error": f"not run: {skipped}"}
                else:
                    row = run_cell({**spec, "steps": args.steps})
                cell_rows.append(row)
            judged = verdict(cell_rows)
            for row in cell_rows:
                shown = judged if row["setting"] == "default" else ""
                if "error" in row:
                    print(
                        f"| {case} | {n} | {row['setting']} | "
                        f"{row['error']} | - | - | {shown} |"
                    )
                    continue
                print(
                    f"| {case} | {n} | {row['setting']} | {row['path']} | "
                    f"{row['peak_gib']} | {row['step_s']} | {shown} |"
                )
                sys.stdout.flush()
            rows += cell_rows
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
