"""Per-device memory of ring attention: the sequence sharded over devices.

One training step of `keras_attention.ops.ring_attention` (the loss the
sum of squares of the output; its gradients with respect to the query,
key and value), causal, batch 1, 8 heads of 64, float32, with the
sequence axis sharded over 1, 2, 4 and 8 devices of a mesh axis. Nothing
runs: each step is compiled by XLA for the simulated CPU devices of
`XLA_FLAGS=--xla_force_host_platform_device_count=8` and its memory read
from `compiled.memory_analysis()`, which is per device for a sharded
program: the arguments (its shard of the query, key and value), the
outputs (the gradients' shards) and the temporaries (the key/value block
passing round the ring, the kernel's blocks, the residuals). The dense
one-device step (`keras.ops.dot_product_attention`, XLA's own attention
with its `(T, T)` weights) is the reference row.

    python benchmarks/context_parallel.py                 # the table
    python benchmarks/context_parallel.py --lengths 4096  # a quick one
"""

import argparse
import os
import sys

HEADS, HEAD_DIM = 8, 64


def _parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=[32768, 131072],
        help="sequence lengths (default: 32768 131072)",
    )
    parser.add_argument(
        "--devices",
        type=int,
        nargs="+",
        default=[1, 2, 4, 8],
        help="numbers of devices on the sequence axis (default: 1 2 4 8)",
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=512,
        help="queries and keys per block on each device (default: 512)",
    )
    parser.add_argument(
        "--no-dense",
        action="store_true",
        help="skip the dense one-device reference row",
    )
    args = parser.parse_args(argv)
    bad = [n for n in args.devices if n not in (1, 2, 4, 8)]
    if bad:
        parser.exit(2, f"error: --devices must be among 1 2 4 8, got {bad}\n")
    for length in args.lengths:
        if length <= 0 or any(length % n for n in args.devices):
            parser.exit(
                2,
                f"error: --lengths {length} is not a positive multiple of "
                f"every --devices {args.devices}\n",
            )
    if args.chunk_size <= 0:
        parser.exit(2, "error: --chunk-size must be positive\n")
    return args


def _memory(fn, shapes):
    """`(arguments, outputs, temporaries)` per device, in bytes, of the
    compiled `fn` on `jax.ShapeDtypeStruct` inputs."""
    import jax

    stats = jax.jit(fn).lower(*shapes).compile().memory_analysis()
    return (
        stats.argument_size_in_bytes,
        stats.output_size_in_bytes - stats.alias_size_in_bytes,
        stats.temp_size_in_bytes,
    )


def _ring_row(length, devices, chunk_size):
    import jax
    import jax.numpy as jnp
    import keras
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec

    from keras_attention.ops import ring

    names = keras.distribution.list_devices()[:devices]
    mesh = keras.distribution.DeviceMesh((devices,), ["sequence"], names)
    context = ring.ContextParallel(mesh)
    sharding = NamedSharding(
        context.jax_mesh(), PartitionSpec(None, "sequence")
    )
    shape = jax.ShapeDtypeStruct(
        (1, length, HEADS, HEAD_DIM), jnp.float32, sharding=sharding
    )

    def loss(q, k, v):
        out = ring.ring_attention(
            q, k, v, context, causal=True, chunk_size=chunk_size
        )
        return jnp.sum(out**2)

    return _memory(jax.grad(loss, argnums=(0, 1, 2)), [shape] * 3)


def _dense_row(length):
    import jax
    import jax.numpy as jnp
    import keras

    shape = jax.ShapeDtypeStruct((1, length, HEADS, HEAD_DIM), jnp.float32)

    def loss(q, k, v):
        out = keras.ops.dot_product_attention(q, k, v, is_causal=True)
        return jnp.sum(out**2)

    return _memory(jax.grad(loss, argnums=(0, 1, 2)), [shape] * 3)


def _mib(n):
    return f"{n / 2**20:,.1f}"


def main(argv=None):
    args = _parse(argv)
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = (
            flags + " --xla_force_host_platform_device_count=8"
        ).strip()
    os.environ["KERAS_BACKEND"] = "jax"
    import jax

    if len(jax.devices()) < max(args.devices):
        print(
            f"error: {len(jax.devices())} JAX devices, fewer than "
            f"--devices {max(args.devices)}",
            file=sys.stderr,
        )
        return 2
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}")
    print(
        "| N | path | devices | arguments (MiB) | outputs (MiB) "
        "| temporaries (MiB) | total per device (MiB) |"
    )
    print("|---|---|---|---|---|---|---|")
    for length in args.lengths:
        rows = [
            (f"ring, {n}", _ring_row(length, n, args.chunk_size))
            for n in args.devices
        ]
        if not args.no_dense:
            rows.insert(0, ("dense (XLA), 1", _dense_row(length)))
        for label, sizes in rows:
            path, devices = label.split(", ")
            cells = " | ".join(_mib(s) for s in sizes)
            print(
                f"| {length:,} | {path} | {devices} | {cells} "
                f"| {_mib(sum(sizes))} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
