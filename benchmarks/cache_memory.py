"""Peak memory of one cached attention step over a long key/value cache.

One call of `keras_attention.MultiHeadAttention` (8 heads of 64, B = 1)
with a cache of `L` slots, keras-hub's semantics: the call's `Tq` new
tokens are written at `cache_update_index = L - Tq` and attend causally to
the whole cache. `chunked` is the layer with `chunk_size=512` (the cache
in `flex_attention`'s blocks of 512 keys), `dense` the same layer with
`chunk_size=0` (`(B, heads, Tq, L)` weights at once). `Tq = 1` is a
decoding step, a larger `Tq` a block of a long prompt written into the
cache (prefill). Each (path, L, Tq) runs in its own subprocess, so that
its peak resident memory (whole-process RSS, `ru_maxrss`) is its own;
the table reports the peak minus the RSS once the cache exists and a
step on a short cache has run (the backend's one-time allocations), i.e.
what the long step itself adds, with the new cache it returns (keras-hub's
functional update: a copy of the cache), and the step's time (the second
of two calls; with `--jit` the first includes compiling the long step).

    python benchmarks/cache_memory.py             # the table
    python benchmarks/cache_memory.py --quick     # a smoke run
    KERAS_BACKEND=jax python benchmarks/cache_memory.py --jit
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADS, HEAD_DIM = 8, 64
PATHS = {"chunked": 512, "dense": 0}


def _peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def _step(args):
    """`(layer, call)`: the layer of `args.worker` and one cached call."""
    import keras

    import keras_attention

    layer = keras_attention.MultiHeadAttention(
        HEADS, HEAD_DIM, chunk_size=PATHS[args.worker]
    )

    def call(x, cache, index):
        out, cache = layer(
            x, x, cache=cache, cache_update_index=index, use_causal_mask=True
        )
        return out, cache

    if args.jit:
        if keras.backend.backend() == "jax":
            import jax

            stateless = jax.jit(
                lambda variables, x, cache, index: layer.stateless_call(
                    variables,
                    [],
                    x,
                    x,
                    cache=cache,
                    cache_update_index=index,
                    use_causal_mask=True,
                )[0]
            )
            return layer, lambda x, cache, index: stateless(
                [v.value for v in layer.trainable_variables], x, cache, index
            )
        import tensorflow as tf

        return layer, tf.function(call, jit_compile=True)
    return layer, call


def worker(args):
    import keras
    import numpy as np

    # Drawn by the backend: no NumPy copy raises the high-water mark of
    # the RSS before the step.
    x = keras.random.normal((1, args.tq, HEADS * HEAD_DIM), seed=0)
    cache = keras.random.normal((1, 2, args.length, HEADS, HEAD_DIM), seed=1)
    layer, call = _step(args)
    layer(x[:, :1], x[:, :1])
    # A warm-up step on a short cache: the backend's one-time allocations
    # (kernels, a compiled step's trace) fall before the baseline.
    short = keras.ops.zeros((1, 2, args.tq, HEADS, HEAD_DIM))
    call(x, short, keras.ops.convert_to_tensor(0, "int32"))
    index = keras.ops.convert_to_tensor(args.length - args.tq, "int32")
    base = _peak_mib()
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        out, _ = call(x, cache, index)
        out = keras.ops.convert_to_numpy(out)
        seconds.append(time.perf_counter() - start)
    result = {
        "path": args.worker,
        "length": args.length,
        "tq": args.tq,
        "seconds": seconds[-1],
        "finite": bool(np.isfinite(out).all()),
        "step_mib": _peak_mib() - base,
        "base_mib": base,
    }
    print(json.dumps(result))


def run_one(args, path, length, tq):
    cmd = [sys.executable, __file__, "--worker", path]
    cmd += ["--length", str(length), "--tq", str(tq)]
    cmd += ["--jit"] if args.jit else []
    # The checkout's package, wherever the script is run from.
    found = os.environ.get("PYTHONPATH")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (ROOT, found))),
    }
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode or not lines:
        tail = done.stderr.strip().splitlines()[-1:] or [
            f"rc {done.returncode}"
        ]
        return {"path": path, "length": length, "tq": tq, "error": tail[0]}
    return json.loads(lines[-1])


def table(args):
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    mode = "compiled" if args.jit else "eager"
    print(
        f"{backend} ({mode}), B=1, {HEADS} heads of {HEAD_DIM}, causal, "
        "one process per cell"
    )
    print(
        "| Tq | cache L | path | step MiB | MiB per 1k slots | step s "
        "| RSS before step MiB |"
    )
    print("|---|---|---|---|---|---|---|")
    for tq in args.tqs:
        for length in args.lengths:
            for path in args.paths:
                r = run_one(args, path, length, tq)
                if "error" in r:
                    print(f"| {tq} | {length} | {path} | {r['error'][:100]} |")
                    continue
                per_k = r["step_mib"] / (length / 1024)
                print(
                    f"| {tq} | {length} | {path} | {r['step_mib']:.0f} | "
                    f"{per_k:.2f} | {r['seconds']:.2f} | "
                    f"{r['base_mib']:.0f} |",
                    flush=True,
                )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=[8192, 16384, 32768, 65536],
        help="cache lengths L",
    )
    parser.add_argument(
        "--tqs",
        type=int,
        nargs="+",
        default=[1, 256],
        help="new tokens per call (1: a decoding step)",
    )
    parser.add_argument(
        "--paths", nargs="+", choices=tuple(PATHS), default=list(PATHS)
    )
    parser.add_argument(
        "--jit",
        action="store_true",
        help="a compiled step (XLA on TensorFlow, jax.jit on JAX)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="L = 2048, 4096 and Tq = 1"
    )
    parser.add_argument(
        "--worker", choices=tuple(PATHS), help=argparse.SUPPRESS
    )
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--tq", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.lengths + args.tqs):
        parser.error("--lengths and --tqs must be positive")
    if max(args.tqs) > min(args.lengths):
        parser.error("every --tqs must fit in the shortest --lengths")
    if args.quick:
        args.lengths, args.tqs = [2048, 4096], [1]
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        worker(args)
    else:
        table(args)


if __name__ == "__main__":
    main(sys.argv[1:])
