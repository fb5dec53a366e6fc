"""Step time of the multi30k-transformer preset's model under each dtype policy.

Trains the model that `python examples/translation.py --preset
multi30k-transformer` builds (its sizes, optimizer, loss and length-bucketed
batches of Multi30k `train`) for `--steps` steps under each `--policies`,
each in a process of its own, and prints one row per policy: the median
and 90th-percentile step time (after `--warmup` steps, which trace the
graph for new batch shapes), the model's FLOPs per step (counted from its
sizes and each batch's shape: matrix products only, backward twice the
forward), the FLOP rate that makes, and the same machine's peak: a
2048 x 2048 matrix product in the policy's compute dtype. A slowdown such
as emulated bfloat16 (issue 42: ~5x) shows here in minutes, before a
preset run does.

`--onednn off` runs the same rows with `TF_ENABLE_ONEDNN_OPTS=0`:
TensorFlow's Eigen kernels, which emulate bfloat16 as on CPUs without
AVX512_BF16 or AMX (where oneDNN has no bfloat16 matmul, TensorFlow
falls back to Eigen). `ONEDNN_MAX_CPU_ISA=AVX2` in the environment keeps
oneDNN to AVX2, as on such a CPU (float32 only: oneDNN then fails to
build its bfloat16 matmul); the table's oneDNN column names the cap.
`--profile` adds where a step's time goes: the forward and backward
seconds of the model's matrix products at the median batch shape (output
layer, feed-forward, attention projections, attention scores), each
times its count in the model; the rest of the step (softmax,
normalization, dropout, casts, the optimizer) is the remainder.

    python benchmarks/preset_step_time.py
    python benchmarks/preset_step_time.py --onednn on off --profile

Exits with a one-line message when the Multi30k files are absent.
"""

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "translation.py")
PRESET = "multi30k-transformer"


def _preset():
    spec = importlib.util.spec_from_file_location("translation_cli", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PRESETS[PRESET]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--data-dir",
        default=os.path.dirname(_preset()["train"]),
        help="folder of Multi30k's train.de and train.en",
    )
    parser.add_argument("--steps", type=int, default=50, help="timed steps")
    parser.add_argument(
        "--warmup", type=int, default=5, help="untimed steps before them"
    )
    parser.add_argument(
        "--policies",
        nargs="+",
        default=["float32", "mixed_bfloat16"],
        choices=["float32", "mixed_bfloat16"],
    )
    parser.add_argument(
        "--onednn",
        nargs="+",
        default=["on"],
        choices=["on", "off"],
        help="off: TF_ENABLE_ONEDNN_OPTS=0 (Eigen, bfloat16 emulated)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="add where a step's time goes"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        parser.error(
            f"--steps must be positive and --warmup not negative. Received: "
            f"--steps {args.steps} --warmup {args.warmup}"
        )
    return args


def forward_flops(preset, vocabulary, batch, source, target):
    """Multiply-add FLOPs (2 each) of the model's matrix products, forward.

    `source` and `target` are the batch's (trimmed) lengths.
    """
    d, ff = preset["embedding_dim"], preset["feed_forward_dim"]
    layers = preset["num_layers"]
    src, tgt = batch * source, batch * target
    encoder = 2 * src * (4 * d * d + 2 * d * ff) + 4 * batch * source**2 * d
    decoder = (
        2 * tgt * (6 * d * d + 2 * d * ff)
        + 2 * src * 2 * d * d
        + 4 * batch * target * (target + source) * d
    )
    return layers * (encoder + decoder) + 2 * tgt * d * vocabulary


def _batches(preset, data_dir, count):
    from keras_attention.data.translation import read_parallel
    from keras_attention.models import translation

    train = read_parallel(os.path.join(data_dir, "train"), "de", "en")
    vocabularies = translation.build_vocabularies(
        train.sources,
        train.targets,
        preset["max_source_tokens"],
        preset["max_target_tokens"],
    )
    model = translation.TransformerTranslator(
        *vocabularies,
        model_dim=preset["embedding_dim"],
        num_layers=preset["num_layers"],
        num_heads=preset["num_heads"],
        feed_forward_dim=preset["feed_forward_dim"],
        dropout=preset["dropout"],
    )
    data = translation.make_dataset(
        model, train, preset["batch_size"], shuffle=True, bucket_by_length=True
    )
    batches = list(data.take(count).as_numpy_iterator())
    return model, len(vocabularies[1]), batches


def _matmul_peak(dtype, n=2048, reps=10):
    import tensorflow as tf

    a = tf.random.normal((n, n), dtype="float32")
    a = tf.cast(a, dtype)
    product = tf.function(lambda x: tf.matmul(x, x))
    product(a).numpy()
    seconds = []
    for _ in range(reps):
        start = time.perf_counter()
        product(a).numpy()
        seconds.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(seconds) / 1e9


def _component_seconds(dtype, rows, inner, outer, count=1, reps=5):
    """Forward + backward seconds of `count` products `(rows, inner) @
    (inner, outer)`, batched (`count` > 1: attention's per-head products).
    """
    import tensorflow as tf

    x = tf.cast(tf.random.normal((count, rows, inner)), dtype)
    w = tf.Variable(tf.cast(tf.random.normal((count, inner, outer)), dtype))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.cast(tf.matmul(x, w), "float32"))
        return tape.gradient(y, [x, w])

    step()
    seconds = []
    for _ in range(reps):
        start = time.perf_counter()
        [g.numpy() for g in step()]
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def _profile(preset, vocabulary, shapes, dtype):
    """Seconds a step spends in each family of matrix products."""
    batch, source, target = sorted(shapes, key=lambda s: s[1] * s[2])[
        len(shapes) // 2
    ]
    d, ff = preset["embedding_dim"], preset["feed_forward_dim"]
    layers = preset["num_layers"]
    src, tgt = batch * source, batch * target
    heads = batch * preset["num_heads"]
    head = preset["embedding_dim"] // preset["num_heads"]

    def seconds(*shape):
        return _component_seconds(dtype, *shape)

    rows = {
        "output layer": seconds(tgt, d, vocabulary),
        "feed-forward": layers
        * (
            seconds(src, d, ff)
            + seconds(src, ff, d)
            + seconds(tgt, d, ff)
            + seconds(tgt, ff, d)
        ),
        "attention projections": layers
        * (6 * seconds(src, d, d) + 6 * seconds(tgt, d, d)),
        # Scores (q k^T) and the weighted sum (w v) of each attention.
        "attention scores": layers
        * (
            seconds(source, head, source, heads)
            + seconds(source, source, head, heads)
            + seconds(target, head, target, heads)
            + seconds(target, target, head, heads)
            + seconds(target, head, source, heads)
            + seconds(target, source, head, heads)
        ),
    }
    return {"median_shape": [batch, source, target], **rows}


def worker(args):
    import keras

    keras.config.set_dtype_policy(args.worker)
    from keras_attention.models.losses import SmoothedSequenceLoss

    preset = _preset()
    count = args.warmup + args.steps
    model, vocabulary, batches = _batches(preset, args.data_dir, count)
    model.compile(
        optimizer=keras.optimizers.Adam(preset["learning_rate"], clipnorm=5.0),
        loss=SmoothedSequenceLoss(preset["label_smoothing"]),
        jit_compile=False,
    )
    seconds, shapes = [], []
    for i, (x, y) in enumerate(batches):
        start = time.perf_counter()
        float(model.train_on_batch(x, y))
        if i >= args.warmup:
            seconds.append(time.perf_counter() - start)
            shapes.append((x[0].shape[0], x[0].shape[1], x[1].shape[1]))
    flops = statistics.mean(
        forward_flops(preset, vocabulary, *s) for s in shapes
    )
    median = statistics.median(seconds)
    compute = "bfloat16" if args.worker == "mixed_bfloat16" else "float32"
    result = {
        "policy": args.worker,
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0",
        "isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "all"),
        "median_s": median,
        "p90_s": sorted(seconds)[int(0.9 * (len(seconds) - 1))],
        "gflop_per_step": 3 * flops / 1e9,
        "gflops": 3 * flops / 1e9 / median,
        "peak_gflops": _matmul_peak(compute),
    }
    if args.profile:
        result["profile"] = _profile(preset, vocabulary, shapes, compute)
    print("RESULT " + json.dumps(result))


def _run(args, policy, onednn):
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1" if onednn == "on" else "0")
    command = [sys.executable, __file__, "--worker", policy]
    command += ["--data-dir", args.data_dir, "--steps", str(args.steps)]
    command += ["--warmup", str(args.warmup)]
    command += ["--profile"] if args.profile else []
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    # A policy the machine cannot run (oneDNN capped to AVX2 builds no
    # bfloat16 matmul) is a row of the table, not the end of it.
    reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "all")
    return {
        "policy": policy,
        "onednn": onednn == "on",
        "isa": isa,
        "error": reason,
    }


def _row(r):
    oned = f"{'on' if r['onednn'] else 'off'} ({r['isa']})"
    if "error" in r:
        return f"| {r['policy']} | {oned} | fails: {r['error'][:200]} |"
    return (
        f"| {r['policy']} | {oned} | {r['median_s']:.3f} | "
        f"{r['p90_s']:.3f} | {r['gflop_per_step']:.1f} | "
        f"{r['gflops']:.1f} | {r['peak_gflops']:.1f} | "
        f"{r['gflops'] / r['peak_gflops']:.0%} |"
    )


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    for suffix in ("de", "en"):
        path = os.path.join(args.data_dir, f"train.{suffix}")
        if not os.path.isfile(path):
            print(f"error: {path} is missing (Multi30k task 1)")
            return 2
    print(
        "| policy | oneDNN | median s/step | p90 | GFLOP/step | GFLOP/s "
        "| matmul peak GFLOP/s | share of peak |"
    )
    print("|---|---|---|---|---|---|---|---|")
    results = []
    for onednn in args.onednn:
        for policy in args.policies:
            r = _run(args, policy, onednn)
            results.append(r)
            print(_row(r), flush=True)
    for r in results:
        if "profile" in r:
            profile = dict(r["profile"])
            shape = profile.pop("median_shape")
            rest = r["median_s"] - sum(profile.values())
            parts = ", ".join(f"{k} {v:.3f} s" for k, v in profile.items())
            print(
                f"profile {r['policy']}, oneDNN {r['onednn']}, batch "
                f"{shape}: {parts}, the rest {rest:.3f} s of "
                f"{r['median_s']:.3f} s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
