"""Peak memory and time of long-sequence self-attention, forward + backward.

Compares `keras_attention.SelfAttention` on its automatic path (chunked from
2048 positions on), the same layer forced dense (`chunk_size=0`), and
`keras.layers.MultiHeadAttention` called as `mha(x, x)`. Each (layer, N) is
measured in its own subprocess, so its peak resident memory (whole-process
RSS, `ru_maxrss`) is its own; the import-and-build RSS is reported too.
One training step (`tf.function`, gradients of every weight and the input)
is run once to trace, then timed over `--repeats` more.

    python benchmarks/long_sequences.py            # the BENCHMARKS.md table
    python benchmarks/long_sequences.py --quick    # a smoke run

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


def _peak_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def worker(impl, n, batch, dim, heads, causal, repeats):
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_attention

    if impl == "keras":
        mha = keras.layers.MultiHeadAttention(heads, dim // heads)

        def layer(x):
            return mha(x, x, use_causal_mask=causal)

    else:
        chunk = None if impl == "ours_auto" else 0
        sa = keras_attention.SelfAttention(heads, chunk_size=chunk)

        def layer(x):
            return sa(x, use_causal_mask=causal)

    x = tf.constant(
        np.random.default_rng(0).normal(size=(batch, n, dim)), "float32"
    )
    layer(x[:, :8])
    base = _peak_gib()
    variables = (mha if impl == "keras" else sa).trainable_variables

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(layer(x) ** 2)
        return tape.gradient(loss, [x] + variables)

    step(x)
    start = time.perf_counter()
    for _ in range(repeats):
        grads = step(x)
    seconds = (time.perf_counter() - start) / repeats
    finite = all(bool(tf.reduce_all(tf.math.is_finite(g))) for g in grads)
    print(
        json.dumps(
            {
                "impl": impl,
                "n": n,
                "seconds": seconds,
                "peak_gib": _peak_gib(),
                "base_gib": base,
                "finite": finite,
            }
        )
    )


def run_one(args, impl, n):
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        impl,
        "--sizes",
        str(n),
        "--batch",
        str(args.batch),
        "--dim",
        str(args.dim),
        "--heads",
        str(args.heads),
        "--repeats",
        str(args.repeats),
    ] + (["--causal"] if args.causal else [])
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode or not lines:
        tail = done.stderr.strip().splitlines()[-1:] or ["?"]
        return {"impl": impl, "n": n, "error": tail[0][:120]}
    return json.loads(lines[-1])


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for impl in IMPLS:
        rows = [r for r in results if r["impl"] == impl and "error" not in r]
        if rows:
            ax.plot(
                [r["n"] for r in rows],
                [r["peak_gib"] for r in rows],
                marker="o",
                label=impl,
            )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("peak RSS (GiB), forward + backward")
    ax.set_title("Self-attention memory: chunked vs dense")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[512, 1024, 2048, 4096, 8192, 16384, 32768, 65536],
    )
    parser.add_argument("--keras-max", type=int, default=8192)
    parser.add_argument("--dense-max", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument(
        "--plot", default=os.path.join("benchmarks", "long_sequences.png")
    )
    parser.add_argument("--quick", action="store_true", help="N=256, 512")
    parser.add_argument("--worker", choices=IMPLS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(
            args.worker,
            args.sizes[0],
            args.batch,
            args.dim,
            args.heads,
            args.causal,
            args.repeats,
        )
        return
    if args.quick:
        args.sizes, args.dim, args.heads = [256, 512], 32, 2
    results = []
    print(
        f"B={args.batch} D={args.dim} heads={args.heads} "
        f"causal={args.causal}, forward+backward, one process per cell"
    )
    print("| N | layer | time (s) | peak RSS (GiB) | RSS before step (GiB) |")
    print("|---|---|---|---|---|")
    for n in args.sizes:
        for impl in IMPLS:
            if impl == "keras" and n > args.keras_max:
                continue
            if impl == "ours_dense" and n > args.dense_max:
                continue
            r = run_one(args, impl, n)
            results.append(r)
            if "error" in r:
                print(f"| {n} | {impl} | failed: {r['error']} | | |")
            else:
                print(
                    f"| {n} | {impl} | {r['seconds']:.2f} | "
                    f"{r['peak_gib']:.2f} | {r['base_gib']:.2f} |",
                    flush=True,
                )
    if args.plot:
        plot(results, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
