"""Train attention over a sequence split across devices (ring attention).

A small causal model, `Embedding` → `MultiHeadAttention` →
`Dense`, learns a task that needs the whole sequence: every position
must output the sequence's first token, the key, which only the first
device holds. The sequence axis is split over a mesh axis of `--devices`
devices with `keras_attention.distribution.ContextParallel`, so each
device keeps its block of positions and the key/value blocks pass round
the ring. The key is drawn from its own range of the vocabulary, so a
model that attends to it scores 1.0; one that guesses scores about
1 / `--keys`.

    KERAS_BACKEND=jax python examples/long_context.py --cpu-devices 8

JAX only (TensorFlow and PyTorch stop with `error: ...`). On a machine
without accelerators `--cpu-devices N` splits the CPU into N devices
(`XLA_FLAGS=--xla_force_host_platform_device_count=N` does the same).
"""

import importlib.util
import json
import os
import runpy
import sys
import types

# The scripts' shared command line, run from its file: importing
# `keras_attention.models.cli` would load Keras before `--help` answers.
_PACKAGE = os.path.dirname(importlib.util.find_spec("keras_attention").origin)
cli = types.SimpleNamespace(**runpy.run_path(f"{_PACKAGE}/models/cli.py"))

# Distinct filler tokens after the key.
FILLERS = 4


def parse_args(argv=None):
    parser = cli.Parser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cpu-devices",
        type=int,
        default=None,
        help="split the CPU into this many JAX devices first "
        "(default: the devices JAX has)",
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=None,
        help="devices on the sequence axis (default: every device)",
    )
    parser.add_argument(
        "--length", type=int, default=1024, help="sequence length"
    )
    parser.add_argument(
        "--keys", type=int, default=16, help="how many distinct keys"
    )
    parser.add_argument(
        "--num-examples", type=int, default=512, help="training sequences"
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=4,
        help="passes over the training sequences",
    )
    parser.add_argument(
        "--batch-size", type=int, default=16, help="sequences per step"
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=128,
        help="queries and keys per block on each device",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the data and the weights"
    )
    parser.add_argument(
        "--output",
        default=None,
        help="write metrics.json here (default: nowhere)",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="no per-epoch progress"
    )
    args = parser.parse_args(argv)
    for name in (
        "length",
        "keys",
        "num_examples",
        "epochs",
        "batch_size",
        "chunk_size",
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    for name in ("cpu_devices", "devices"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.devices is not None and args.length % args.devices:
        parser.error(
            f"--length {args.length} is not a multiple of --devices "
            f"{args.devices}, the devices the sequence is split over"
        )
    return args


def make_data(args, examples, seed):
    """`(ids, targets)`: the key (ids 1..keys) at position 0, then
    fillers (the next `FILLERS` ids); every target is the key, less
    one."""
    import numpy as np

    rng = np.random.default_rng(seed)
    keys = rng.integers(1, args.keys + 1, examples)
    ids = rng.integers(
        args.keys + 1, args.keys + 1 + FILLERS, (examples, args.length)
    )
    ids[:, 0] = keys
    targets = np.repeat(keys[:, None] - 1, args.length, axis=1)
    return ids.astype("int32"), targets.astype("int32")


def build_model(args):
    import keras

    import keras_attention

    ids = keras.Input((args.length,), dtype="int32")
    x = keras.layers.Embedding(args.keys + 1 + FILLERS, 32)(ids)
    x = keras_attention.MultiHeadAttention(
        num_heads=2, key_dim=16, chunk_size=args.chunk_size, name="attention"
    )(x, x, use_causal_mask=True)
    outputs = keras.layers.Dense(args.keys, activation="softmax")(x)
    model = keras.Model(ids, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def main(argv=None):
    args = parse_args(argv)
    if os.environ.get("KERAS_BACKEND", "tensorflow") != "jax":
        cli.fail(
            "long_context.py needs the JAX backend (ring attention shards "
            "the sequence with jax.shard_map); run it with KERAS_BACKEND=jax"
        )
    if args.cpu_devices is not None:
        from keras_attention.models import distribute

        distribute.split_cpu(args.cpu_devices)
    import keras

    import keras_attention

    devices = keras.distribution.list_devices()
    count = len(devices) if args.devices is None else args.devices
    if count > len(devices):
        cli.fail(f"--devices {count}: JAX has {len(devices)} devices")
    if args.length % count:
        cli.fail(
            f"--length {args.length} is not a multiple of the {count} "
            "devices on the sequence axis"
        )
    keras.utils.set_random_seed(args.seed)
    mesh = keras.distribution.DeviceMesh(
        (count,), ["sequence"], devices[:count]
    )
    print(f"mesh: sequence {count}; {args.length // count} positions each")
    x, y = make_data(args, args.num_examples, args.seed)
    x_test, y_test = make_data(args, 128, args.seed + 1)
    with keras_attention.distribution.ContextParallel(mesh):
        model = build_model(args)
        history = model.fit(
            x,
            y,
            batch_size=args.batch_size,
            epochs=args.epochs,
            verbose=0 if args.quiet else 2,
        )
        _, accuracy = model.evaluate(
            x_test, y_test, batch_size=args.batch_size, verbose=0
        )
    metrics = {
        "test_accuracy": float(accuracy),
        "chance": 1.0 / args.keys,
        "loss": [float(v) for v in history.history["loss"]],
        "devices": count,
        "args": vars(args),
    }
    print(f"test_accuracy: {accuracy:.4f} (chance {1 / args.keys:.4f})")
    if args.output:
        os.makedirs(args.output, exist_ok=True)
        with open(os.path.join(args.output, "metrics.json"), "w") as f:
            json.dump(metrics, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
