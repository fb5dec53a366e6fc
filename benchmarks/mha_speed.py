"""Training-step speed of our multi-head attention against Keras's.

Times one forward and backward pass (gradients with respect to the weights
and the inputs) of `keras_attention.MultiHeadAttention` against
`keras.layers.MultiHeadAttention` (cross-attention: `layer(query, value)`),
and of `keras_attention.SelfAttention` against Keras's layer called as
`mha(x, x)` (self-attention). Both layers of a pair
hold the same weights and run inside one process, in alternating
repetitions. The table reports medians of CPU time (all threads of the
process: on a shared machine it counts the work done rather than the wait
for a core), the median of the per-repetition ratios
`keras_time / our_time` (above 1 means we are faster) in CPU and in wall
time, and the achieved GFLOP per CPU-second of our layer with its share of
this machine's float32 matmul peak, measured the same way by the same
script on one large matmul. FLOPs count the forward pass (`8·B·N·D²` for
the four projections, `4·B·N²·D` for the two attention matmuls) times
three for forward plus backward.

On JAX (`KERAS_BACKEND=jax`) the step is one `jax.jit` of the layer's
`stateless_call` and its gradient (mode `jit`); on PyTorch
(`KERAS_BACKEND=torch`) an eager forward and `backward()` (mode `eager`).

Where the backend runs on a GPU, CPU time measures the host's launching
and waiting rather than the work: the milliseconds, the GFLOP and the
matmul peak (an 8192-square matmul there) are then wall time, every step
waited for, and the header says so.

Example:

    python benchmarks/mha_speed.py             # full run, a few minutes
    python benchmarks/mha_speed.py --quick     # tiny smoke run
    KERAS_BACKEND=torch python benchmarks/mha_speed.py --quick
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

BACKEND = keras.backend.backend()
if BACKEND == "tensorflow":
    import tensorflow as tf  # noqa: E402

import keras_attention  # noqa: E402

KINDS = {
    "cross": "cross: MultiHeadAttention(q, v)",
    "self": "self: SelfAttention(x)",
}


FULL_SHAPES = [(8, 512, 256, 8), (2, 2048, 256, 8)]
QUICK_SHAPES = [(2, 64, 32, 4)]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny shapes and two repetitions: a smoke test, not a benchmark",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=10,
        help="timed repetitions per layer (default: 10)",
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=["graph", "xla", "jit", "eager"],
        default=None,
        help="run the step as a plain tf.function graph (what model.fit "
        "does on a CPU-only machine) and/or compiled with XLA "
        "(jit_compile=True, model.fit's default with a GPU) "
        "(default: both); on JAX `jit`, on PyTorch `eager`",
    )
    parser.add_argument(
        "--shapes",
        nargs="+",
        default=None,
        help="shapes to run as B,N,D,H (default: 8,512,256,8 and "
        "2,2048,256,8; with --quick 2,64,32,4)",
    )
    parser.add_argument(
        "--kinds",
        nargs="+",
        choices=list(KINDS),
        default=list(KINDS),
        help="which comparisons to run (default: all)",
    )
    return parser.parse_args(argv)


def on_gpu():
    """Whether the backend computes on a GPU (then wall time is the measure)."""
    if BACKEND == "jax":
        import jax

        return jax.default_backend() == "gpu"
    if BACKEND == "torch":
        import torch

        return torch.cuda.is_available()
    return bool(tf.config.list_physical_devices("GPU"))


def attention_flops(batch, length, dim):
    """Forward FLOPs: four `dim x dim` projections and two `T x T` matmuls."""
    projections = 4 * 2 * batch * length * dim * dim
    attention = 2 * 2 * batch * length * length * dim
    return projections + attention


def _timed(fn, *args):
    """`(cpu_seconds, wall_seconds)` of one call, waiting for the result."""
    cpu, wall = time.process_time(), time.perf_counter()
    keras.ops.convert_to_numpy(fn(*args))
    return time.process_time() - cpu, time.perf_counter() - wall


def matmul_peak(size, repeats):
    """Best GFLOP per CPU-second and per second of a large float32 matmul.

    The best repetition, not the median: a peak is what the machine can do.
    """
    a = keras.random.normal((size, size))
    b = keras.random.normal((size, size))
    step = _compiled(lambda a, b: keras.ops.sum(keras.ops.matmul(a, b)))
    keras.ops.convert_to_numpy(step(a, b))
    times = [_timed(step, a, b) for _ in range(repeats)]
    flops = 2 * size**3 / 1e9
    cpu = min(t[0] for t in times)
    wall = min(t[1] for t in times)
    return flops / cpu, flops / wall


def _compiled(fn):
    if BACKEND == "tensorflow":
        return tf.function(fn)
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)
    return fn


def make_step(layer, inputs, jit_compile):
    """A compiled forward + backward pass of `layer` on `inputs`."""
    if BACKEND == "jax":
        return _jax_step(layer)
    if BACKEND == "torch":
        return _torch_step(layer)

    def step(*args):
        with tf.GradientTape() as tape:
            tape.watch(args)
            output = layer(*args)
            loss = tf.reduce_mean(tf.square(tf.cast(output, "float32")))
        grads = tape.gradient(loss, list(args) + layer.trainable_weights)
        # Reducing every gradient keeps them all alive until the end.
        return loss + tf.add_n([tf.reduce_sum(g) for g in grads]) * 0.0

    return tf.function(step, jit_compile=jit_compile)


def _jax_step(layer):
    """`jax.jit` of the loss and its gradients (weights and inputs)."""
    import jax

    def loss(weights, others, args):
        output, _ = layer.stateless_call(weights, others, *args)
        return keras.ops.mean(keras.ops.square(output))

    grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 2)))
    weights = [v.value for v in layer.trainable_variables]
    others = [v.value for v in layer.non_trainable_variables]

    def step(*args):
        value, grads = grad(weights, others, args)
        leaves = jax.tree_util.tree_leaves(grads)
        return value + sum(g.sum() for g in leaves) * 0.0

    return step


def _torch_step(layer):
    """Eager forward and `backward()` (weights and inputs)."""
    import torch

    def step(*args):
        args = [a.detach().requires_grad_(True) for a in args]
        layer.zero_grad()
        output = layer(*args)
        loss = torch.mean(torch.square(output))
        loss.backward()
        return loss.detach()

    return step


def build_pair(kind, batch, length, dim, heads):
    rng = np.random.default_rng(0)
    x = keras.ops.convert_to_tensor(
        rng.normal(size=(batch, length, dim)).astype("float32")
    )
    theirs = keras.layers.MultiHeadAttention(heads, dim // heads)
    if kind == "cross":
        value = keras.ops.convert_to_tensor(
            rng.normal(size=(batch, length, dim)).astype("float32")
        )
        ours = keras_attention.MultiHeadAttention(heads, dim // heads)
        ours_inputs = theirs_inputs = (x, value)
    else:
        ours = keras_attention.SelfAttention(heads)
        ours_inputs, theirs_inputs = (x,), (x, x)
    theirs(*theirs_inputs)
    ours(*ours_inputs)
    ours.set_weights(theirs.get_weights())
    return (ours, ours_inputs), (theirs, theirs_inputs)


def time_pair(ours, theirs, repeats):
    """Medians of each step and of the per-repetition time ratios.

    The two steps alternate, and which one goes first alternates too, so
    that load from other processes hits both alike. CPU time (all threads
    of this process) is the main measure: on a shared machine it counts
    the work done, where wall time also counts waiting for a core.
    """
    ours_step, ours_inputs = ours
    theirs_step, theirs_inputs = theirs
    for _ in range(2):  # Compile and warm up both.
        keras.ops.convert_to_numpy(ours_step(*ours_inputs))
        keras.ops.convert_to_numpy(theirs_step(*theirs_inputs))
    rows = []
    for r in range(repeats):
        if r % 2 == 0:
            mine = _timed(ours_step, *ours_inputs)
            keras_time = _timed(theirs_step, *theirs_inputs)
        else:
            keras_time = _timed(theirs_step, *theirs_inputs)
            mine = _timed(ours_step, *ours_inputs)
        rows.append((mine, keras_time))
    median = statistics.median
    return {
        "ours_cpu": median(m[0] for m, _ in rows),
        "keras_cpu": median(k[0] for _, k in rows),
        "ours_wall": median(m[1] for m, _ in rows),
        "keras_wall": median(k[1] for _, k in rows),
        "ratio_cpu": median(k[0] / m[0] for m, k in rows),
        "ratio_wall": median(k[1] / m[1] for m, k in rows),
    }


def main(argv=None):
    args = parse_args(argv)
    if args.modes is None:
        default = {"tensorflow": ["graph", "xla"], "jax": ["jit"]}
        args.modes = default.get(BACKEND, ["eager"])
    shapes = QUICK_SHAPES if args.quick else FULL_SHAPES
    if args.shapes:
        shapes = [
            tuple(int(n) for n in shape.split(",")) for shape in args.shapes
        ]
    repeats = 2 if args.quick else args.repeats
    gpu = on_gpu()
    clock = "wall" if gpu else "cpu"
    size = 256 if args.quick else (8192 if gpu else 2048)
    peak_cpu, peak_wall = matmul_peak(size, 3 if args.quick else 15)
    peak = peak_wall if gpu else peak_cpu
    print(
        f"Backend {BACKEND}, Keras {keras.__version__}, "
        f"{os.cpu_count()} CPU threads visible, "
        f"{'a GPU' if gpu else 'no GPU'}, {repeats} repetitions. "
        f"float32 matmul peak ({size}^3): {peak_cpu:.1f} GFLOP per "
        f"CPU-second ({peak_wall:.1f} GFLOP/s wall)."
    )
    print()
    if gpu:
        print(
            "| mode | attention | B | N | D | H | keras ms (wall) | ours ms "
            "(wall) | ratio keras/ours (wall) | ratio (CPU) | ours GFLOP/s "
            "| % of matmul peak |"
        )
    else:
        print(
            "| mode | attention | B | N | D | H | keras ms | ours ms | ratio "
            "keras/ours | ratio (wall) | ours GFLOP/CPU-s | % of matmul peak |"
        )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for mode in args.modes:
        for batch, length, dim, heads in shapes:
            for kind in args.kinds:
                (ours, ours_in), (theirs, theirs_in) = build_pair(
                    kind, batch, length, dim, heads
                )
                jit = mode == "xla"
                t = time_pair(
                    (make_step(ours, ours_in, jit), ours_in),
                    (make_step(theirs, theirs_in, jit), theirs_in),
                    repeats,
                )
                flops = 3 * attention_flops(batch, length, dim) / 1e9
                gflops = flops / t[f"ours_{clock}"]
                other = "cpu" if gpu else "wall"
                label = KINDS[kind]
                digits = 1 if gpu else 0
                print(
                    f"| {mode} | {label} | {batch} | {length} | {dim} | "
                    f"{heads} | {t[f'keras_{clock}'] * 1e3:.{digits}f} | "
                    f"{t[f'ours_{clock}'] * 1e3:.{digits}f} | "
                    f"{t[f'ratio_{clock}']:.2f} | "
                    f"{t[f'ratio_{other}']:.2f} | {gflops:.1f} | "
                    f"{100 * gflops / peak:.0f}% |",
                    flush=True,
                )
                keras.backend.clear_session()


if __name__ == "__main__":
    main()
