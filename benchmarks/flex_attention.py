"""Block skipping and memory of `keras_attention.ops.flex_attention`.

Two measures, each a forward and backward pass (gradients of the query,
key and value) in one process, on the Keras backend that runs it:

- `document`: self-attention with a document mask of 8 equal documents
  (`mods.document`) against the same call without a mask, both in blocks
  (`chunk_size`): the mask's block mask skips the blocks between
  documents, so the ratio `masked / unmasked` is about 1/8 plus the cost
  of the partial blocks.
- `memory`: ALiBi then soft-capping (`mods.chain(mods.alibi(H),
  mods.soft_cap(30))`) in blocks, with the process's peak resident memory
  (`resource.getrusage`) before and after; on TensorFlow in eager mode,
  `tf.function` and XLA (`--modes`), on JAX under `jax.jit`, on PyTorch
  eagerly. Where JAX or PyTorch computes on a GPU, the peaks are the GPU's
  (JAX's `peak_bytes_in_use`, PyTorch's `max_memory_allocated`), and the
  header says so.
- `native` (PyTorch on a CPU, not in the default list): inference with
  the document mask, PyTorch's compiled `flex_attention` (its block mask
  made once, and made in each call) against ours: `chunk_size=None`
  (the planner, which takes PyTorch's compiled FlexAttention there),
  `512` (this package's blocks) and `0` (dense).

Example:

    python benchmarks/flex_attention.py --quick
    python benchmarks/flex_attention.py --measure document --length 8192
    KERAS_BACKEND=torch python benchmarks/flex_attention.py --measure \\
        native --length 8192 --depth 256 --heads 4
    KERAS_BACKEND=jax python benchmarks/flex_attention.py --measure memory
"""

import argparse
import os
import resource
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_attention import ops as ka_ops  # noqa: E402
from keras_attention.ops import mods  # noqa: E402

BACKEND = keras.backend.backend()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--measure",
        choices=["document", "memory", "native"],
        nargs="+",
        default=["document", "memory"],
        help="what to measure (default: document memory)",
    )
    parser.add_argument(
        "--length",
        type=int,
        default=None,
        help="sequence length (default: 8192 for document, 16384 for "
        "memory; 256 with --quick)",
    )
    parser.add_argument(
        "--depth", type=int, default=256, help="model depth (default: 256)"
    )
    parser.add_argument(
        "--heads", type=int, default=8, help="heads (default: 8)"
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=512,
        help="queries and keys per block (default: 512)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed repetitions (default: 3)",
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=["eager", "graph", "xla"],
        default=["eager", "graph", "xla"],
        help="TensorFlow's modes for the memory measure (default: all)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny shapes, one repetition: a smoke test, not a benchmark",
    )
    return parser.parse_args(argv)


def peak_gib():
    """The process's peak resident memory so far, in GiB (Linux: KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def device_peak_gib():
    """Peak GPU memory allocated so far in GiB; None without a GPU."""
    if BACKEND == "torch":
        import torch

        if torch.cuda.is_available():
            return torch.cuda.max_memory_allocated() / 2**30
    elif BACKEND == "jax":
        import jax

        if jax.default_backend() == "gpu":
            stats = jax.local_devices()[0].memory_stats() or {}
            if "peak_bytes_in_use" in stats:
                return stats["peak_bytes_in_use"] / 2**30
    return None


def make_step(fn, mode="eager"):
    """A forward + backward pass of `fn(q, k, v)`; returns a scalar."""
    if BACKEND == "jax":
        import jax

        def loss(q, k, v):
            return keras.ops.sum(keras.ops.square(fn(q, k, v)))

        grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))

        def step(q, k, v):
            value, grads = grad(q, k, v)
            return value + sum(g.sum() for g in grads) * 0.0

        return step
    if BACKEND == "torch":

        def step(q, k, v):
            q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
            loss = keras.ops.sum(keras.ops.square(fn(q, k, v)))
            loss.backward()
            return loss.detach()

        return step
    import tensorflow as tf

    def step(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            loss = tf.reduce_sum(tf.square(fn(q, k, v)))
        grads = tape.gradient(loss, [q, k, v])
        return loss + tf.add_n([tf.reduce_sum(g) for g in grads]) * 0.0

    if mode == "eager":
        return step
    return tf.function(step, jit_compile=mode == "xla")


def _inputs(length, depth, heads):
    rng = np.random.default_rng(0)
    shape = (1, length, heads, depth // heads)
    return [
        keras.ops.convert_to_tensor(rng.normal(size=shape).astype("float32"))
        for _ in "qkv"
    ]


def _time(step, inputs, repeats):
    keras.ops.convert_to_numpy(step(*inputs))  # compile, warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        keras.ops.convert_to_numpy(step(*inputs))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def document(args, length):
    """Median seconds with and without the document mask, and the ratio."""
    q, k, v = _inputs(length, args.depth, args.heads)
    segments = np.repeat(np.arange(8), -(-length // 8))[:length][None]
    mask_mod = mods.document(segments)
    block = min(args.chunk_size, length)

    def masked(q, k, v):
        return ka_ops.flex_attention(
            q, k, v, mask_mod=mask_mod, chunk_size=block
        )

    def plain(q, k, v):
        return ka_ops.flex_attention(q, k, v, chunk_size=block)

    mode = "graph" if BACKEND == "tensorflow" else "eager"
    t_plain = _time(make_step(plain, mode), (q, k, v), args.repeats)
    t_masked = _time(make_step(masked, mode), (q, k, v), args.repeats)
    print(
        f"| document (8 docs) | {BACKEND} {mode} | {length} | "
        f"{args.depth} | {args.heads} | {block} | {t_plain * 1e3:.1f} | "
        f"{t_masked * 1e3:.1f} | {t_masked / t_plain:.2f} |",
        flush=True,
    )


def memory(args, length):
    """Peak resident memory of ALiBi + soft-cap in blocks, per mode."""
    q, k, v = _inputs(length, args.depth, args.heads)
    score_mod = mods.chain(mods.alibi(args.heads), mods.soft_cap(30.0))
    block = min(args.chunk_size, length)

    def fn(q, k, v):
        return ka_ops.flex_attention(
            q, k, v, score_mod=score_mod, chunk_size=block
        )

    modes = (
        args.modes
        if BACKEND == "tensorflow"
        else ["jit" if BACKEND == "jax" else "eager"]
    )
    gpu = device_peak_gib() is not None
    peak = device_peak_gib if gpu else peak_gib
    for mode in modes:
        before = peak()
        seconds = _time(make_step(fn, mode), (q, k, v), args.repeats)
        step = f"{seconds * 1e3:.1f} ms" if gpu else f"{seconds:.1f} s"
        print(
            f"| alibi + soft_cap | {BACKEND} {mode} | {length} | "
            f"{args.depth} | {args.heads} | {block} | {step} | "
            f"{before:.2f} | {peak():.2f} |",
            flush=True,
        )


def native(args, length):
    """Inference with 8 documents: PyTorch's compiled FlexAttention against
    our calls, median seconds and the ratio to PyTorch's kernel."""
    import torch
    from torch.nn.attention import flex_attention as fa

    flex, create = (
        torch.compile(fa.flex_attention),
        torch.compile(fa.create_block_mask),
    )
    q, k, v = _inputs(length, args.depth, args.heads)
    first = [t.transpose(1, 2).contiguous() for t in (q, k, v)]
    ids = np.repeat(np.arange(8), -(-length // 8))[:length]
    seg = torch.tensor(ids)

    def mask(b, h, i, j):
        return seg[i] == seg[j]

    def made():
        return create(mask, None, None, length, length, device="cpu")

    once = made()
    document = mods.document(ids[None])
    steps = {
        "PyTorch's compiled flex_attention, block mask made once": (
            lambda q, k, v: flex(*first, block_mask=once)
        ),
        "PyTorch's, its compiled create_block_mask in each call": (
            lambda q, k, v: flex(*first, block_mask=made())
        ),
    }

    def ours(chunk_size):
        def call(q, k, v):
            return ka_ops.flex_attention(
                q, k, v, mask_mod=document, chunk_size=chunk_size
            )

        return call

    for chunk_size in (None, 512, 0):
        steps[f"ours, chunk_size={chunk_size}"] = ours(chunk_size)
    base = None
    with torch.no_grad():
        for name, step in steps.items():
            seconds = _time(step, (q, k, v), args.repeats)
            base = base or seconds
            print(
                f"| {name} | {length} | {args.depth} | {args.heads} | "
                f"{seconds:.3f} | {seconds / base:.2f} |",
                flush=True,
            )


def main(argv=None):
    args = parse_args(argv)
    if args.quick:
        args.repeats, args.chunk_size = 1, 64
    print(f"Keras {keras.__version__}, backend {BACKEND}, one process.")
    if "document" in args.measure:
        length = args.length or (256 if args.quick else 8192)
        print()
        print(
            "| measure | backend, mode | N | D | H | block | no mask ms | "
            "document mask ms | ratio |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        document(args, length)
    if "memory" in args.measure:
        length = args.length or (256 if args.quick else 16384)
        print()
        where = "GPU" if device_peak_gib() is not None else "RSS"
        print(
            f"| measure | backend, mode | N | D | H | block | step | peak "
            f"{where} GiB before | peak {where} GiB after |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        memory(args, length)
    if "native" in args.measure:
        length = args.length or (256 if args.quick else 8192)
        print()
        print(
            "| call (inference, 8 documents) | N | D | H | median s | ratio |"
        )
        print("|---|---|---|---|---|---|")
        native(args, length)


if __name__ == "__main__":
    main()
