"""Peak memory and time of long-sequence self-attention, forward + backward.

`--kv-heads K` measures `GroupedQueryAttention` (K key/value heads) in
its place, `--score NAME` our layers with another score (e.g. `additive`,
whose chunked path holds `(block, block, units)` values per block).

Two tables. `memory` (the default): one training step (gradients of every
weight and the input) of `keras_attention.SelfAttention` with its default
`chunk_size=None` ("ours_auto": chunked from the `AUTO_CHUNK_MIN_BYTES`
rule on), the same layer forced dense (`chunk_size=0`, "ours_dense") and
`keras.layers.MultiHeadAttention` called as `mha(x, x)` ("keras"), in every
execution mode: TensorFlow eager (a `GradientTape` step without
`tf.function`), `tf.function`, XLA (`jit_compile=True`), JAX eager and
`jax.jit`, PyTorch eager. Each (mode, layer, N) runs in its own
subprocess, so its peak resident memory (whole-process RSS, `ru_maxrss`)
is its own; the import-and-build RSS is reported too. Where the backend
computes on a GPU (JAX, PyTorch), the last column is the step's peak GPU
memory (JAX's `peak_bytes_in_use`, PyTorch's `max_memory_allocated` from
after the build), which is then the figure that matters; `-` elsewhere.

`speed`: the chunked path against the dense path of the same layer in one
process (TensorFlow, `tf.function`), alternating the two steps, with the
median wall and CPU (`time.process_time`) time of each; repeated in
`--processes` fresh processes, since the ratio varies more between
processes than between the steps of one.

    python benchmarks/long_sequences.py                 # memory table
    python benchmarks/long_sequences.py --table speed   # speed table
    python benchmarks/long_sequences.py --quick         # a smoke run

The memory table's figure is written only where `--plot PATH` says; the
committed `benchmarks/long_sequences.png` is the full run's, regenerated
with `--impls ours_auto keras --plot benchmarks/long_sequences.png`.

Keras's layer materialises `(heads, N, N)` weights and stops fitting in
memory past about N = 8192 here, so it is only run up to `--keras-max`.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

IMPLS = ("ours_auto", "ours_dense", "keras")
MODES = {
    "tf_eager": "tensorflow",
    "tf_function": "tensorflow",
    "tf_xla": "tensorflow",
    "jax_eager": "jax",
    "jax_jit": "jax",
    "torch_eager": "torch",
}


def _peak_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _device_peak_gib(backend, reset=False):
    """Peak GPU memory allocated so far in GiB; None without a GPU."""
    if backend == "torch":
        import torch

        if not torch.cuda.is_available():
            return None
        if reset:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        return torch.cuda.max_memory_allocated() / 2**30
    if backend == "jax":
        import jax

        if jax.default_backend() != "gpu":
            return None
        stats = jax.local_devices()[0].memory_stats() or {}
        peak = stats.get("peak_bytes_in_use")
        return None if peak is None else peak / 2**30
    return None


def _layer(impl, heads, dim, causal, score="scaled_dot", kv_heads=None):
    """`(call, layer)`: the layer of `impl` and a call `x -> output`.

    With `kv_heads`, `GroupedQueryAttention` (ours) or Keras's
    `GroupQueryAttention`, called as `layer(x, x)`; else `SelfAttention`
    (ours) or Keras's `MultiHeadAttention`."""
    import keras

    import keras_attention

    head_dim = dim // heads
    copies = 2  # layer(x, x)
    chunk = {"ours_auto": None, "ours_dense": 0}.get(impl, impl)
    if kv_heads and impl == "keras":
        layer = keras.layers.GroupQueryAttention(head_dim, heads, kv_heads)
    elif kv_heads:
        layer = keras_attention.GroupedQueryAttention(
            head_dim, heads, kv_heads, chunk_size=chunk, score=score
        )
    elif impl == "keras":
        layer = keras.layers.MultiHeadAttention(heads, head_dim)
    else:
        layer = keras_attention.SelfAttention(
            heads, chunk_size=chunk, score=score
        )
        copies = 1

    def call(x, stateless=None):
        if stateless is None:
            return layer(*[x] * copies, use_causal_mask=causal)
        trainable, other = stateless
        return layer.stateless_call(
            trainable, other, *[x] * copies, use_causal_mask=causal
        )[0]

    return call, layer


def _tf_step(call, layer, mode):
    import tensorflow as tf

    variables = layer.trainable_variables

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(call(x) ** 2)
        return tape.gradient(loss, [x] + variables)

    if mode == "tf_function":
        return tf.function(step)
    if mode == "tf_xla":
        return tf.function(step, jit_compile=True)
    return step


def _jax_step(call, layer, mode):
    import jax
    import keras

    def loss(trainable, x):
        other = [v.value for v in layer.non_trainable_variables]
        return keras.ops.sum(call(x, (trainable, other)) ** 2)

    grad = jax.grad(loss, argnums=(0, 1))
    fn = jax.jit(grad) if mode == "jax_jit" else grad

    def step(x):
        # JAX dispatches asynchronously: wait for the gradients.
        grads = fn([v.value for v in layer.trainable_variables], x)
        return jax.block_until_ready(grads)

    return step


def _torch_step(call, layer, mode):
    import torch

    def step(x):
        x = x.detach().requires_grad_(True)
        layer.zero_grad()
        torch.sum(call(x) ** 2).backward()
        if x.is_cuda:  # CUDA runs asynchronously: wait for the gradients.
            torch.cuda.synchronize()
        return [x.grad] + [v.value.grad for v in layer.trainable_variables]

    return step


def _finite(grads):
    import keras
    import numpy as np

    return all(
        bool(np.isfinite(keras.ops.convert_to_numpy(g)).all())
        for g in keras.tree.flatten(grads)
        if g is not None
    )


def worker(args):
    import keras
    import numpy as np

    call, layer = _layer(
        args.worker,
        args.heads,
        args.dim,
        args.causal,
        args.score,
        args.kv_heads,
    )
    data = np.random.default_rng(0).normal(size=(args.batch, args.n, args.dim))
    x = keras.ops.convert_to_tensor(data.astype("float32"))
    call(x[:, :8])
    base = _peak_gib()
    device_base = _device_peak_gib(MODES[args.mode], reset=True)
    make = {"tensorflow": _tf_step, "jax": _jax_step, "torch": _torch_step}
    step = make[MODES[args.mode]](call, layer, args.mode)
    start = time.perf_counter()
    grads = step(x)
    first = time.perf_counter() - start
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        grads = step(x)
        seconds.append(time.perf_counter() - start)
    result = {
        "mode": args.mode,
        "impl": args.worker,
        "n": args.n,
        "first_step_s": first,
        "seconds": float(np.median(seconds)) if seconds else None,
        "finite": _finite(grads),
        "peak_gib": _peak_gib(),
        "base_gib": base,
        "device_base_gib": device_base,
        "device_peak_gib": _device_peak_gib(MODES[args.mode]),
    }
    print(json.dumps(result))


def run_one(args, mode, impl, n):
    cmd = [sys.executable, __file__, "--worker", impl, "--mode", mode]
    cmd += ["--n", str(n), "--batch", str(args.batch), "--dim", str(args.dim)]
    cmd += ["--heads", str(args.heads), "--repeats", str(args.repeats)]
    cmd += ["--causal"] if args.causal else []
    cmd += ["--score", args.score]
    cmd += ["--kv-heads", str(args.kv_heads)] if args.kv_heads else []
    env = {**os.environ, "KERAS_BACKEND": MODES[mode]}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode or not lines:
        tail = done.stderr.strip().splitlines()[-1:] or [
            f"rc {done.returncode}"
        ]
        return {"mode": mode, "impl": impl, "n": n, "error": tail[0][:120]}
    return json.loads(lines[-1])


def _speed_pair(args, n):
    """One process: the chunked and dense steps alternating, medians."""
    import numpy as np
    import tensorflow as tf

    from keras_attention.ops import plan as _plan

    chunked = args.block or "ours_auto"
    if not args.block:
        # The automatic choice's blocks: the layer with chunk_size=None,
        # its threshold lowered so that it always takes the chunked path.
        _plan.AUTO_CHUNK_MIN_BYTES = 0
    data = np.random.default_rng(0).normal(size=(args.batch, n, args.dim))
    x = tf.constant(data, "float32")
    steps = []
    for impl in (0, chunked):
        call, layer = _layer(
            impl, args.heads, args.dim, args.causal, args.score, args.kv_heads
        )
        call(x[:, :8])
        steps.append(_tf_step(call, layer, "tf_function"))
        steps[-1](x)
    wall, cpu = [[], []], [[], []]
    for _ in range(args.repeats):
        for k, step in enumerate(steps):
            start, start_cpu = time.perf_counter(), time.process_time()
            step(x)
            wall[k].append(time.perf_counter() - start)
            cpu[k].append(time.process_time() - start_cpu)
    wall = [float(np.median(w)) for w in wall]
    cpu = [float(np.median(c)) for c in cpu]
    return {
        "dense": wall[0],
        "chunked": wall[1],
        "ratio": wall[1] / wall[0],
        "cpu_ratio": cpu[1] / cpu[0],
    }


def speed(args):
    """Chunked against dense, alternating in one process (`tf.function`),
    repeated in `--processes` fresh processes."""
    import numpy as np

    from keras_attention.ops import plan as _plan

    if args.block:
        sizes = f"{args.block} x {args.block}"
    else:
        sizes = f"{_plan.auto_chunk_size()} x {_plan.auto_chunk_size()}"
    print(
        f"{_described(args)}, tf.function forward+backward, blocks of "
        f"{sizes} (queries x keys), median of {args.repeats} alternating "
        f"steps in each of {args.processes} processes; load average "
        f"{os.getloadavg()[0]:.1f} at the start"
    )
    print(
        "| N | dense wall (s) | chunked wall (s) | wall ratio | ratio range "
        "| CPU ratio |"
    )
    print("|---|---|---|---|---|---|")
    for n in args.sizes:
        runs = [_speed_process(args, n) for _ in range(args.processes)]
        med = {key: float(np.median([r[key] for r in runs])) for key in runs[0]}
        ratios = [r["ratio"] for r in runs]
        print(
            f"| {n} | {med['dense']:.3f} | {med['chunked']:.3f} | "
            f"{med['ratio']:.2f} | {min(ratios):.2f}-{max(ratios):.2f} | "
            f"{med['cpu_ratio']:.2f} |",
            flush=True,
        )


def _speed_process(args, n):
    """`_speed_pair` in a fresh process: timings differ between processes
    (measured at N=4096: a ratio of 1.2 in some, 1.6 in others) more than
    between the steps of one."""
    if args.processes == 1:
        return _speed_pair(args, n)
    cmd = [sys.executable, __file__, "--table", "speed", "--speed-n", str(n)]
    cmd += ["--batch", str(args.batch), "--dim", str(args.dim)]
    cmd += ["--heads", str(args.heads), "--repeats", str(args.repeats)]
    cmd += ["--block", str(args.block)] + (["--causal"] if args.causal else [])
    cmd += ["--score", args.score]
    cmd += ["--kv-heads", str(args.kv_heads)] if args.kv_heads else []
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    return json.loads(lines[-1])


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode in MODES:
        for impl in IMPLS:
            rows = [
                r
                for r in results
                if r["impl"] == impl and r["mode"] == mode and "error" not in r
            ]
            if rows:
                ax.plot(
                    [r["n"] for r in rows],
                    [r["peak_gib"] for r in rows],
                    marker="o",
                    linestyle="-" if impl == "ours_auto" else ":",
                    label=f"{mode} {impl}",
                )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("peak RSS (GiB), forward + backward")
    ax.set_title("Self-attention training-step memory, every mode")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _described(args):
    """The table's layer and shapes, in words."""
    layer = "SelfAttention / keras.layers.MultiHeadAttention"
    if args.kv_heads:
        layer = (
            f"GroupedQueryAttention, {args.kv_heads} K/V heads / "
            "keras.layers.GroupQueryAttention"
        )
    return (
        f"{layer}, score={args.score}, B={args.batch} D={args.dim} "
        f"heads={args.heads} causal={args.causal}"
    )


def memory(args):
    print(f"{_described(args)}, forward+backward, one process per cell")
    print(
        "| mode | N | layer | first step (s) | step (s) | peak RSS (GiB) "
        "| RSS before step (GiB) | GPU peak (GiB) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    results = []
    for mode in args.modes:
        for n in args.sizes:
            for impl in args.impls:
                if impl == "keras" and n > args.keras_max:
                    continue
                if impl == "ours_dense" and n > args.dense_max:
                    continue
                r = run_one(args, mode, impl, n)
                results.append(r)
                if "error" in r:
                    print(f"| {mode} | {n} | {impl} | failed: {r['error']} |")
                    continue
                step = "-" if r["seconds"] is None else f"{r['seconds']:.3f}"
                gpu = r.get("device_peak_gib")
                gpu = "-" if gpu is None else f"{gpu:.2f}"
                print(
                    f"| {mode} | {n} | {impl} | {r['first_step_s']:.2f} | "
                    f"{step} | {r['peak_gib']:.2f} | {r['base_gib']:.2f} | "
                    f"{gpu} |",
                    flush=True,
                )
    if args.plot:
        plot(results, args.plot)
        print(f"plot: {args.plot}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--table",
        choices=("memory", "speed"),
        help="memory (the default when absent) or speed",
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[4096, 16384, 65536],
        help="sequence lengths N",
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=MODES,
        default=list(MODES),
        help="memory: execution modes, one process each",
    )
    parser.add_argument(
        "--impls",
        nargs="+",
        choices=IMPLS,
        default=list(IMPLS),
        help="memory: ours with chunk_size=None (ours_auto) or 0 "
        "(ours_dense), and Keras's layer",
    )
    parser.add_argument(
        "--keras-max",
        type=int,
        default=4096,
        help="memory: Keras's layer only up to this N",
    )
    parser.add_argument(
        "--dense-max",
        type=int,
        default=4096,
        help="memory: ours_dense only up to this N",
    )
    parser.add_argument("--batch", type=int, default=1, help="batch size")
    parser.add_argument("--dim", type=int, default=256, help="model width")
    parser.add_argument(
        "--heads", type=int, default=8, help="(query) heads of dim / heads"
    )
    parser.add_argument(
        "--score",
        default="scaled_dot",
        help="our layers' score (e.g. additive); Keras's layers have the "
        "scaled dot only",
    )
    parser.add_argument(
        "--kv-heads",
        type=int,
        help="GroupedQueryAttention with this many K/V heads (and Keras's "
        "GroupQueryAttention) instead of self-attention",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=0,
        help="timed steps after the first (memory) or per path (speed)",
    )
    parser.add_argument(
        "--block",
        type=int,
        default=0,
        help="speed: chunk_size (queries and keys per block); 0: the "
        "automatic choice's blocks",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=5,
        help="speed: fresh processes per N (the table gives the median "
        "and range of their ratios)",
    )
    parser.add_argument("--causal", action="store_true", help="a causal mask")
    parser.add_argument(
        "--plot",
        metavar="PATH",
        help="memory: also draw peak RSS against N into this PNG (none by "
        "default, so a partial run never replaces the committed figure; "
        "it is regenerated with --impls ours_auto keras --plot "
        "benchmarks/long_sequences.png)",
    )
    parser.add_argument("--quick", action="store_true", help="N=256, 512")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--speed-n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.plot and args.table == "speed":
        parser.error("--plot draws the memory table; speed has no figure")
    if args.worker:
        if args.worker not in IMPLS:
            args.worker = int(args.worker)
        worker(args)
        return
    keras_too = args.table != "speed" and "keras" in args.impls
    if args.score != "scaled_dot" and keras_too:
        parser.error(
            "Keras's layers have the scaled dot score only: pass --impls "
            f"ours_auto ours_dense. Received: --score {args.score}"
        )
    if args.quick:
        args.sizes, args.dim, args.heads = [256, 512], 32, 2
    if args.table == "speed":
        args.repeats = args.repeats or 5
        if args.speed_n:
            print(json.dumps(_speed_pair(args, args.speed_n)))
            return
        speed(args)
    else:
        memory(args)


if __name__ == "__main__":
    main()
