"""Gated DeltaNet's op against keras-hub's chunked function: forward and
backward time, compile time and the compiled graph, per length.

    KERAS_BACKEND=jax python benchmarks/gated_delta.py --lengths 1024 2048

For each length T: `keras_attention.ops.gated_delta_rule` (chunked) and
keras-hub's `_chunk_gated_delta_rule` (Qwen3.5's, Python loops over the
chunks and the rows of each chunk) on the same inputs, `(1, T, heads,
64)`, differentiated (the sum of the output) under the backend's
compiler (`jax.jit`, a `tf.function` graph; PyTorch runs eagerly, as
keras-hub's layer does). TensorFlow runs the plain graph, as
`model.fit` does on a CPU (XLA compiles ours since the scan's gradient is
written out, docs/linear.md, but the rows of BENCHMARKS.md were taken
without it). Prints one row per length: the first call (trace and compile),
the fastest of `--repeats` calls after it (ours and keras-hub's called in
turn, so a machine that slows down for a while slows both alike), time
per token, and the ratio keras-hub / ours. keras-hub's function
normalises the query and key itself; ours gets them normalised, so both
compute the same thing.
`--decode` adds the cost of one recurrent step after a prefill of each
length (a state, so it should not depend on T). `--memory` measures
instead, for each length in a process of its own, the peak resident
memory (`ru_maxrss`) of one compiled forward and backward pass of ours,
and what it adds to the process's peak before the pass (the backend, the
inputs): linear in T if each 4x of T adds 4x.
"""

import argparse
import os
import time


def parse():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--skip-hub", action="store_true", help="time only ours"
    )
    parser.add_argument(
        "--decode", action="store_true", help="time one decoding step too"
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="peak memory of ours per length, one process each, no timing",
    )
    parser.add_argument(
        "--peak-of", type=int, default=None, help=argparse.SUPPRESS
    )
    return parser.parse_args()


def _compiled(fn):
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.jit(fn)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn)
    return fn


def _grad_fn(fn):
    """`inputs -> gradients of sum(fn(*inputs))`, on the backend."""
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.grad(lambda xs: keras.ops.sum(fn(*xs)))
    if backend == "tensorflow":
        import tensorflow as tf

        def grads(xs):
            with tf.GradientTape() as tape:
                tape.watch(xs)
                loss = keras.ops.sum(fn(*xs))
            return tape.gradient(loss, xs)

        return grads
    import torch

    def grads(xs):
        xs = [x.detach().requires_grad_(True) for x in xs]
        return torch.autograd.grad(keras.ops.sum(fn(*xs)), xs)

    return grads


def _block(result):
    import keras

    return [keras.ops.convert_to_numpy(r) for r in result]


def _first(fn, inputs):
    """The first call's seconds: trace and compile."""
    start = time.perf_counter()
    _block(fn(inputs))
    return time.perf_counter() - start


def _time(fn, inputs, repeats):
    first = _first(fn, inputs)
    return first, _alternate([fn], inputs, repeats)[0]


def _alternate(fns, inputs, repeats):
    """The fastest of `repeats` calls of each of `fns`, called in turn
    (one, the other, one, ...): a machine that slows down for a while
    slows both alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            _block(fn(inputs))
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def _inputs(length, heads, dim):
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    shape = (1, length, heads, dim)
    q, k = rng.normal(size=shape), rng.normal(size=shape)
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.normal(size=shape)
    g = -rng.uniform(0, 1, size=shape[:3])
    beta = rng.uniform(0, 1, size=shape[:3])
    return [
        keras.ops.convert_to_tensor(x.astype("float32"))
        for x in (q, k, v, g, beta)
    ]


def _peak_mib():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def _ours(args):
    import keras_attention

    def ours(q, k, v, g, beta):
        return keras_attention.ops.gated_delta_rule(
            q, k, v, g, beta, chunk_size=args.chunk_size, form="chunk"
        )

    return ours


def _one_peak(args):
    """In the child: the peak before and after one fwd+bwd pass."""
    import keras

    inputs = _inputs(args.peak_of, args.heads, args.dim)
    before = _peak_mib()
    grads = _compiled(_grad_fn(_ours(args)))(inputs)
    [keras.ops.convert_to_numpy(x) for x in grads]
    print(f"{before:.0f} {_peak_mib():.0f}")


def _memory(args):
    import subprocess
    import sys

    print("| T | peak RSS (MiB) | added by the pass (MiB) |")
    print("|---|---|---|")
    for length in args.lengths:
        command = [sys.executable, __file__, "--peak-of", str(length)]
        command += ["--heads", str(args.heads), "--dim", str(args.dim)]
        command += ["--chunk-size", str(args.chunk_size)]
        out = subprocess.run(
            command, capture_output=True, text=True, check=True
        ).stdout.split()
        before, after = float(out[-2]), float(out[-1])
        print(f"| {length} | {after:.0f} | {after - before:.0f} |", flush=True)


def main():
    args = parse()
    if args.peak_of is not None:
        return _one_peak(args)
    if args.memory:
        return _memory(args)
    import keras

    ours = _ours(args)

    def hubs(q, k, v, g, beta):
        from keras_hub.src.models.qwen3_5 import qwen3_5_gated_delta_net

        return qwen3_5_gated_delta_net._chunk_gated_delta_rule(
            q, k, v, g, beta, chunk_size=args.chunk_size
        )[0]

    backend = keras.backend.backend()
    print(f"backend {backend}, heads {args.heads}, Dk = Dv = {args.dim}")
    print(
        "| T | ours first (s) | ours fwd+bwd (ms) | ours µs/token "
        "| keras-hub first (s) | keras-hub fwd+bwd (ms) | keras-hub / ours |"
    )
    print("|---|---|---|---|---|---|---|")
    for length in args.lengths:
        inputs = _inputs(length, args.heads, args.dim)
        ours_fn = _compiled(_grad_fn(ours))
        first = _first(ours_fn, inputs)
        if args.skip_hub:
            (ours_t,) = _alternate([ours_fn], inputs, args.repeats)
            row = f"| {length} | {first:.1f} | {ours_t * 1e3:.1f} "
            print(
                row + f"| {ours_t * 1e6 / length:.1f} | - | - | - |", flush=True
            )
            continue
        hub_fn = _compiled(_grad_fn(hubs))
        hub_first = _first(hub_fn, inputs)
        ours_t, hub_t = _alternate([ours_fn, hub_fn], inputs, args.repeats)
        row = f"| {length} | {first:.1f} | {ours_t * 1e3:.1f} "
        row += f"| {ours_t * 1e6 / length:.1f} "
        row += f"| {hub_first:.1f} | {hub_t * 1e3:.1f} | {hub_t / ours_t:.2f} |"
        print(row, flush=True)
    if args.decode:
        _decode(args)


def _decode(args):
    import keras

    import keras_attention

    def step(xs):
        q, k, v, g, beta, state = xs
        return keras_attention.ops.gated_delta_rule(
            q,
            k,
            v,
            g,
            beta,
            initial_state=state,
            output_final_state=True,
            form="recurrent",
        )

    print("| prefilled T | one decoding step (ms) |")
    print("|---|---|")
    compiled = _compiled(step)
    for length in args.lengths:
        inputs = _inputs(length, args.heads, args.dim)
        _, state = keras_attention.ops.gated_delta_rule(
            *inputs, output_final_state=True
        )
        token = [x[:, -1:] for x in inputs] + [state]
        _, t = _time(compiled, token, args.repeats * 4)
        print(f"| {length} | {t * 1e3:.2f} |", flush=True)
    del keras


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    main()
