"""How close attention comes to the machine: a fraction of its sgemm.

Issue 62: attention forward, and forward + backward, as a fraction of the
machine's float32 matmul throughput (the "roof"), per Keras backend, one
process per backend (`KERAS_BACKEND` set in a subprocess), every figure
of a backend measured in that backend's process:

- the roof: the best float32 `N x N` by `N x N` matmul (`--gemm-size`,
  4096) with `keras.ops.matmul`, compiled as the backend compiles
  (`jax.jit`, `tf.function`, eager PyTorch), in GFLOP/s (`2 N^3` FLOPs),
  measured before the backend's rows and again after them, the higher
  kept: one slow moment of a shared machine would otherwise lower the
  roof of every row (fractions above 1 once showed it);
- ours: `keras_attention.ops.flex_attention` with its defaults (the
  planner chooses the kernel; the table names it), compiled the same way,
  the forward pass of PyTorch under `torch.no_grad`;
- the anchors: `keras.ops.dot_product_attention` on every backend; on
  PyTorch `F.scaled_dot_product_attention` and `flex_attention` compiled
  (`torch.compile`, its `create_block_mask` made once, before the
  timing); on JAX `jax.nn.dot_product_attention`. An anchor that cannot
  run a case is a row of "n/a" with its reason under the table. On
  PyTorch each case (a length and a mask) starts with the compiler's
  caches emptied (`torch.compiler.reset()`), as a process of its own.

Inputs `(batch, N, heads, head_dim)` (`(batch, heads, N, head_dim)` for
PyTorch's kernels, transposed before the timing), float32, B = 1, 8 heads
of 64. Masks (`--masks`): `none`; `causal` (`mods.causal()`; `is_causal`
for the anchors); `documents`, `--documents` equal documents, attention
within a document in both directions (`mods.document`; a boolean mask for
SDPA, `keras.ops` and `jax.nn`, the same rule as a block mask for
PyTorch's `flex_attention`); `window`, the `--window` most recent keys,
the query's own included (`and_masks(mods.causal(),
mods.sliding_window(window))`; `jax.nn` takes `local_window_size=(window
- 1, 0)` with `is_causal` where its version has it, the others a boolean
mask).

FLOPs are useful FLOPs: the forward pass counts `4 * head_dim` for each
(query, key) pair the mask keeps, per batch row and head (`4 B H N^2 D`
without a mask, `4 B H D N (N + 1) / 2` causal); forward + backward
counts 3.5x the forward's (the backward's five matmuls are 2.5x the
forward's two, FlashAttention-2's convention; a kernel that recomputes
the logits does more work than it is credited for). The fraction of the
roof is useful FLOP/s over the same backend's matmul FLOP/s; `x forward`
is the forward + backward time over the same kernel's forward time.
Each time is the minimum of `--repeats` runs after a warm-up run (which
compiles). The header names the CPU, the load average before and after,
the commit and each backend's matmul GFLOP/s.

Every anchor's forward output is compared with ours on the same inputs:
one that differs by more than 1e-4 (a mask given wrong) is named under
the table. A dense anchor (`keras.ops` and `jax.nn` on TensorFlow's and
JAX's CPU hold the `(B, H, N, N)` logits in float32) is not run where
they would pass `--max-gib`. `--json` writes the machine, the roofs and
the rows, each with its first call's seconds (compilation included).

Example:

    python benchmarks/roofline.py --quick      # a smoke test, seconds
    python benchmarks/roofline.py              # N = 1024, 4096
    python benchmarks/roofline.py --backends torch --lengths 16384 \\
        --masks causal --json roofline.json
"""

import argparse
import collections
import functools
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

BACKENDS = ("tensorflow", "jax", "torch")
MASKS = ("none", "causal", "documents", "window")
PASSES = ("forward", "backward")
# Forward + backward in forward FLOPs: the backward's five N^2 matmuls
# against the forward's two (FlashAttention-2's convention).
FORWARD_BACKWARD = 3.5
LABELS = {
    "ours": "ours: flex_attention",
    "keras": "keras.ops.dot_product_attention",
    "sdpa": "torch SDPA",
    "torch_flex": "torch flex_attention, compiled",
    "jax_nn": "jax.nn.dot_product_attention",
}
ANCHORS = {
    "tensorflow": ("ours", "keras"),
    "jax": ("ours", "keras", "jax_nn"),
    "torch": ("ours", "keras", "sdpa", "torch_flex"),
}
# The anchors that hold the (B, H, N, N) logits in float32 on a CPU.
DENSE = {"tensorflow": ("keras",), "jax": ("keras", "jax_nn")}
ROW = "@row "
# Largest |difference| of a forward output from ours that counts as the
# same attention in float32 (blocks against one pass: about 1e-6).
AGREE = 1e-4


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"a positive integer. Received: {text!r}"
        )
    return value


LISTS = (
    ("--backends", BACKENDS, "Keras backends, one process each"),
    ("--masks", MASKS, "masks"),
    ("--passes", PASSES, "forward, and forward + backward (`backward`)"),
)
NUMBERS = (
    ("--batch", 1, "batch"),
    ("--heads", 8, "heads"),
    ("--head-dim", 64, "size of a head"),
    ("--documents", 8, "equal documents of the `documents` mask"),
    ("--repeats", 5, "timed runs after the warm-up; the minimum is kept"),
    ("--gemm-size", 4096, "N of the N^3 float32 matmul, the roof"),
)


def _parser():
    summary, method = __doc__.split("\n\n", 1)
    parser = argparse.ArgumentParser(
        description=summary,
        epilog=method,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    for flag, choices, text in LISTS:
        add(
            flag,
            nargs="+",
            choices=choices,
            default=list(choices),
            help=f"{text} (default: {' '.join(choices)})",
        )
    add(
        "--lengths",
        nargs="+",
        type=_positive,
        default=[1024, 4096],
        help="sequence lengths N (default: 1024 4096; 16384 runs too)",
    )
    for flag, default, text in NUMBERS:
        add(
            flag,
            type=_positive,
            default=default,
            help=f"{text} (default: {default})",
        )
    add(
        "--window",
        type=_positive,
        default=None,
        help="keys of the `window` mask, the query's own included "
        "(default: 256; 64 with --quick)",
    )
    add(
        "--max-gib",
        type=float,
        default=8.0,
        help="skip a dense anchor whose logits and weights would pass this "
        "many GiB (default: 8)",
    )
    add("--json", metavar="PATH", help="also write the rows to PATH")
    add(
        "--quick",
        action="store_true",
        help="N = 256, one run, a 512 matmul: a smoke test of every "
        "kernel's call, not a benchmark",
    )
    add("--worker", help=argparse.SUPPRESS)
    return parser


def parse_args(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths, args.repeats, args.gemm_size = [256], 1, 512
    if args.window is None:
        args.window = 64 if args.quick else 256
    if not args.max_gib > 0:
        parser.error(f"--max-gib must be positive. Received: {args.max_gib}")
    if args.documents > min(args.lengths):
        parser.error(
            f"--documents ({args.documents}) must not exceed the shortest "
            f"length ({min(args.lengths)})"
        )
    return args


# What is counted: pairs a mask keeps, and their FLOPs.


def segment_ids(n, documents):
    """The document of each position: `documents` equal runs of `n`."""
    return [i * documents // n for i in range(n)]


def allowed_pairs(mask, n, documents, window):
    """How many (query, key) pairs of an `n x n` self-attention a mask
    keeps."""
    if mask == "none":
        return n * n
    if mask == "causal":
        return n * (n + 1) // 2
    if mask == "documents":
        sizes = collections.Counter(segment_ids(n, documents)).values()
        return sum(size * size for size in sizes)
    if mask == "window":
        w = min(window, n)
        return w * (w + 1) // 2 + (n - w) * w
    raise ValueError(f"Unknown mask {mask!r}")


def useful_flops(spec, mask, n, pass_):
    """Useful FLOPs of one pass: `4 * head_dim` per kept pair, per batch
    row and head, forward; 3.5x that forward + backward. `spec` holds
    `batch`, `heads`, `head_dim`, `documents` and `window`."""
    pairs = allowed_pairs(mask, n, spec["documents"], spec["window"])
    forward = 4 * spec["head_dim"] * pairs * spec["batch"] * spec["heads"]
    return forward * (FORWARD_BACKWARD if pass_ == "backward" else 1)


def index_rule(mask, documents_of, window):
    """`rule(q_idx, kv_idx) -> kept` of a mask with operators only, so that
    NumPy arrays and PyTorch tensors take it alike; `None` for no mask.
    `documents_of` is indexable by position (NumPy or PyTorch)."""
    if mask == "none":
        return None
    if mask == "causal":
        return lambda i, j: i >= j
    if mask == "documents":
        return lambda i, j: documents_of[i] == documents_of[j]
    return lambda i, j: (i >= j) & (i - j < window)


def dense_mask(mask, n, documents, window):
    """The boolean `(n, n)` NumPy mask (`True` = kept), `None` for none."""
    import numpy as np

    ids = np.asarray(segment_ids(n, documents))
    rule = index_rule(mask, ids, window)
    positions = np.arange(n)
    return None if rule is None else rule(positions[:, None], positions)


def our_mask_mod(mask, n, documents, window):
    """The mask mod ours is given (`None` for no mask)."""
    import numpy as np

    import keras_attention
    from keras_attention.ops import mods

    if mask == "causal":
        return mods.causal()
    if mask == "documents":
        ids = np.asarray([segment_ids(n, documents)], "int32")
        return mods.document(ids)
    if mask == "window":
        return keras_attention.ops.and_masks(
            mods.causal(), mods.sliding_window(window)
        )
    return None


# The kernels, in the worker's process: `fn(q, k, v, *extras)`.


def _ours(mask, n, spec):
    import keras_attention

    mod = our_mask_mod(mask, n, spec["documents"], spec["window"])

    def fn(q, k, v):
        return keras_attention.ops.flex_attention(q, k, v, mask_mod=mod)

    return fn, (), False


def _keras(mask, n, spec):
    import keras

    if mask in ("none", "causal"):
        causal = mask == "causal"

        def fn(q, k, v):
            return keras.ops.dot_product_attention(q, k, v, is_causal=causal)

        return fn, (), False
    kept = dense_mask(mask, n, spec["documents"], spec["window"])

    def masked(q, k, v, kept):
        return keras.ops.dot_product_attention(q, k, v, mask=kept)

    return masked, (keras.ops.convert_to_tensor(kept[None, None]),), False


def _sdpa(mask, n, spec):
    import torch

    attention = torch.nn.functional.scaled_dot_product_attention
    if mask in ("none", "causal"):
        causal = mask == "causal"
        return lambda q, k, v: attention(q, k, v, is_causal=causal), (), True
    kept = torch.from_numpy(
        dense_mask(mask, n, spec["documents"], spec["window"])
    )

    def masked(q, k, v, kept):
        return attention(q, k, v, attn_mask=kept)

    return masked, (kept.to(_torch_device()),), True


@functools.cache
def _torch_flex():
    import torch
    from torch.nn.attention import flex_attention as fa

    return torch.compile(fa.flex_attention), fa.create_block_mask


def _torch_flex_kernel(mask, n, spec):
    import torch

    flex, create_block_mask = _torch_flex()
    device = _torch_device()
    ids = torch.tensor(segment_ids(n, spec["documents"]), device=device)
    rule = index_rule(mask, ids, spec["window"])
    block_mask = None
    if rule is not None:
        block_mask = create_block_mask(
            lambda b, h, i, j: rule(i, j), None, None, n, n, device=device
        )
    return lambda q, k, v: flex(q, k, v, block_mask=block_mask), (), True


def _jax_nn(mask, n, spec):
    import inspect

    import jax

    attention = jax.nn.dot_product_attention
    kwargs = {"is_causal": mask in ("causal", "window")}
    windowed = "local_window_size" in inspect.signature(attention).parameters
    if mask == "window" and windowed:
        kwargs["local_window_size"] = (spec["window"] - 1, 0)
    if mask == "documents" or (mask == "window" and not windowed):
        kept = dense_mask(mask, n, spec["documents"], spec["window"])

        def masked(q, k, v, kept):
            return attention(q, k, v, mask=kept)

        return masked, (jax.numpy.asarray(kept[None, None]),), False
    return lambda q, k, v: attention(q, k, v, **kwargs), (), False


KERNELS = {
    "ours": _ours,
    "keras": _keras,
    "sdpa": _sdpa,
    "torch_flex": _torch_flex_kernel,
    "jax_nn": _jax_nn,
}


def _torch_device():
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# Compiling and timing, as each backend does.


def compiler(backend):
    """How the backend compiles a function: `jax.jit`, `tf.function`, or
    not at all (PyTorch runs eagerly)."""
    if backend == "jax":
        import jax

        return jax.jit
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function
    return lambda fn: fn


def compiled(backend, fn, pass_):
    """`step(q, k, v, g, *extras)`: the forward pass (PyTorch's under
    `no_grad`), or the gradients of `sum(fn(q, k, v) * g)` with respect to
    `q, k, v`, compiled as the backend compiles."""
    if pass_ == "forward":
        if backend == "torch":
            import torch

            def forward(q, k, v, g, *extras):
                with torch.no_grad():
                    return fn(q, k, v, *extras)

            return forward
        return compiler(backend)(lambda q, k, v, g, *e: fn(q, k, v, *e))
    if backend == "jax":
        import jax

        def loss(q, k, v, g, *extras):
            return jax.numpy.sum(fn(q, k, v, *extras) * g)

        return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    if backend == "tensorflow":
        import tensorflow as tf

        def step(q, k, v, g, *extras):
            with tf.GradientTape() as tape:
                tape.watch([q, k, v])
                loss = tf.reduce_sum(fn(q, k, v, *extras) * g)
            return tape.gradient(loss, [q, k, v])

        return tf.function(step)
    import torch

    def backward(q, k, v, g, *extras):
        inputs = [t.detach().requires_grad_(True) for t in (q, k, v)]
        return torch.autograd.grad(fn(*inputs, *extras), inputs, g)

    return backward


def wait(backend, result):
    """Block until `result` (a tensor or a list of them) is computed.

    TensorFlow's eager runtime returns a `tf.function`'s outputs computed;
    PyTorch computes on a CPU as it goes."""
    if backend == "jax":
        import jax

        jax.block_until_ready(result)
    elif backend == "torch" and _torch_device() == "cuda":
        import torch

        torch.cuda.synchronize()
    return result


def best_seconds(backend, step, inputs, repeats):
    """`(first call, minimum of repeats)` in seconds, and the first
    call's result."""
    start = time.perf_counter()
    result = wait(backend, step(*inputs))
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        wait(backend, step(*inputs))
        times.append(time.perf_counter() - start)
    return first, min(times), result


def gemm_gflops(backend, size, repeats):
    """The roof: GFLOP/s of the best float32 `size^3` matmul."""
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = (
        keras.ops.convert_to_tensor(
            rng.normal(size=(size, size)).astype("float32")
        )
        for _ in "ab"
    )
    step = compiler(backend)(keras.ops.matmul)
    _, seconds, _ = best_seconds(backend, step, (a, b), repeats)
    return 2 * size**3 / seconds / 1e9


def _inputs(spec, n, heads_first):
    """`q, k, v, g` as the backend's tensors, the same numbers in either
    layout."""
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    shape = (spec["batch"], n, spec["heads"], spec["head_dim"])
    arrays = [rng.normal(size=shape).astype("float32") for _ in "qkvg"]
    if heads_first:
        arrays = [np.ascontiguousarray(a.transpose(0, 2, 1, 3)) for a in arrays]
    return [keras.ops.convert_to_tensor(a) for a in arrays]


def _our_path(spec, n, mask, pass_):
    """The kernel the planner takes for ours (`explain_attention`: the
    call planned with its shapes, not run). PyTorch's planner asks
    autograd whether the call trains, so its query requires a gradient
    where the pass is a backward one."""
    import keras
    import numpy as np

    import keras_attention

    shape = (spec["batch"], n, spec["heads"], spec["head_dim"])
    x = keras.ops.convert_to_tensor(np.zeros(shape, "float32"))
    training = pass_ == "backward"
    query = x
    if training and keras.backend.backend() == "torch":
        query = x.clone().requires_grad_(True)
    mod = our_mask_mod(mask, n, spec["documents"], spec["window"])
    explained = keras_attention.ops.explain_attention(
        query, x, x, mask_mod=mod, training=training
    )
    return explained.path


def _too_big(spec, backend, name, n, pass_):
    """Why a dense anchor is not run, or `None`."""
    if name not in DENSE.get(backend, ()):
        return None
    held = 2 if pass_ == "forward" else 4  # logits, weights; and their grads
    gib = held * 4 * spec["batch"] * spec["heads"] * n * n / 2**30
    if gib <= spec["max_gib"]:
        return None
    return f"not run: its logits and weights need ~{gib:.0f} GiB > --max-gib"


def _difference(name, output, heads_first, reference):
    """Largest |difference| of a forward output from ours, `None` for ours
    (whose output `reference` keeps) and where ours did not run."""
    import keras
    import numpy as np

    array = keras.ops.convert_to_numpy(output)
    if heads_first:
        array = array.transpose(0, 2, 1, 3)
    if name == "ours":
        reference["ours"] = array
    if name == "ours" or "ours" not in reference:
        return None
    return float(np.max(np.abs(array - reference["ours"])))


def measure(spec, backend, name, n, mask, pass_, reference):
    """One row: the kernel `name` on one case and pass. Ours' forward
    output goes into `reference`; the others' forward outputs are
    compared with it (`max_diff`)."""
    row = {"backend": backend, "n": n, "mask": mask, "pass": pass_}
    row.update(implementation=LABELS[name], kernel=name)
    row["flops"] = useful_flops(spec, mask, n, pass_)
    skipped = _too_big(spec, backend, name, n, pass_)
    if skipped:
        return {**row, "error": skipped}
    try:
        if name == "ours":
            row["path"] = _our_path(spec, n, mask, pass_)
        fn, extras, heads_first = KERNELS[name](mask, n, spec)
        step = compiled(backend, fn, pass_)
        inputs = (*_inputs(spec, n, heads_first), *extras)
        first, best, out = best_seconds(backend, step, inputs, spec["repeats"])
        if pass_ == "forward":
            difference = _difference(name, out, heads_first, reference)
            row["max_diff"] = difference
    except Exception as error:  # one kernel's failure, not the table's
        message = str(error).strip().splitlines() or [""]
        return {**row, "error": f"{type(error).__name__}: {message[0]}"[:160]}
    return {**row, "first_s": first, "seconds": best}


def _fresh_compiler(backend):
    """PyTorch: each case with the compiler's caches empty. Its compiler
    counts the recompiles of `flex_attention` per process, for every
    caller (the anchor's new mask functions and ours alike), and past 8
    runs it uncompiled, 20x slower: without this the later masks' rows
    measured that, not the kernels (BENCHMARKS.md)."""
    if backend == "torch":
        import torch

        torch.compiler.reset()


def worker(spec):
    """In the backend's process: the roof, then one line per row."""
    import keras

    backend = keras.backend.backend()
    library = __import__(backend).__version__
    head = {"kind": "gemm", "backend": backend}
    head["versions"] = f"Keras {keras.__version__}, {backend} {library}"
    roof = functools.partial(
        gemm_gflops, backend, spec["gemm_size"], spec["repeats"]
    )
    print(ROW + json.dumps({**head, "gflops": roof()}), flush=True)
    for n in spec["lengths"]:
        for mask in spec["masks"]:
            _fresh_compiler(backend)
            reference = {}
            for name in ANCHORS[backend]:
                for pass_ in spec["passes"]:
                    row = measure(
                        spec, backend, name, n, mask, pass_, reference
                    )
                    print(ROW + json.dumps(row), flush=True)
    print(ROW + json.dumps({**head, "gflops": roof()}), flush=True)
    return 0


# The parent: one process per backend, then the table.

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_backend(args, backend):
    """`{"gflops", "versions", "rows", "error"}` of one backend, measured in
    a process of its own (`KERAS_BACKEND=backend`)."""
    keys = ("lengths", "masks", "passes", "batch", "heads", "head_dim")
    keys += ("documents", "window", "repeats", "gemm_size", "max_gib")
    spec = json.dumps({key: getattr(args, key) for key in keys})
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONUNBUFFERED="1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    result = {"gflops": None, "versions": backend, "rows": [], "error": None}
    result["roofs"] = []
    command = [sys.executable, os.path.abspath(__file__), "--worker", spec]
    with tempfile.TemporaryFile("w+") as stderr:
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env
        ) as process:
            try:
                for line in process.stdout:
                    _take(line, result)
            except KeyboardInterrupt:  # Ctrl-C, or `timeout`'s SIGTERM
                process.kill()
                result["interrupted"] = True
        done = f"after {len(result['rows'])} rows"
        if result.get("interrupted"):
            result["error"] = f"interrupted {done}"
        elif process.returncode:
            stderr.seek(0)
            last = (stderr.read().strip().splitlines() or ["no message"])[-1]
            result["error"] = (
                f"the process ended with status {process.returncode} "
                f"{done}: {last[:160]}"
            )
    return result


def _take(line, result):
    """Read one line of the worker's output into `result`."""
    if not line.startswith(ROW):
        return
    row = json.loads(line[len(ROW) :])
    if row.get("kind") == "gemm":
        result["roofs"].append(row["gflops"])
        result["gflops"] = max(result["roofs"])
        result["versions"] = row["versions"]
        return
    result["rows"].append(row)
    print(f"  {_progress(row)}", file=sys.stderr, flush=True)


def _progress(row):
    done = row.get("error") or f"{row['seconds'] * 1e3:.1f} ms"
    return (
        f"{row['backend']} N={row['n']} {row['mask']} {row['kernel']} "
        f"{row['pass']}: {done}"
    )


def machine(cpuinfo="/proc/cpuinfo"):
    """The CPU's name, its logical CPUs and its AVX-512 flags."""
    model, flags = None, set()
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model is None:
            model = value.strip()
        if key.strip() == "flags" and not flags:
            flags = set(value.split())
    name = model or platform.processor() or "unknown CPU"
    return {
        "cpu": name,
        "cpus": os.cpu_count(),
        "avx512f": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
    }


def _git(*args):
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def commit():
    """`git rev-parse --short HEAD`, `-dirty` where tracked files changed."""
    try:
        head = _git("rev-parse", "--short", "HEAD")
        changed = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if changed else "")


def finish(results):
    """The rows of every backend with `ms`, `x_forward` (forward +
    backward over the same kernel's forward) and `fraction` (useful
    FLOP/s over the backend's matmul FLOP/s); `None` where not measured."""
    rows = [dict(row) for result in results.values() for row in result["rows"]]
    forward = {
        (r["backend"], r["n"], r["mask"], r["kernel"]): r["seconds"]
        for r in rows
        if r["pass"] == "forward" and "seconds" in r
    }
    for row in rows:
        seconds = row.get("seconds")
        gflops = results[row["backend"]]["gflops"]
        row["ms"] = row["x_forward"] = row["fraction"] = None
        if seconds is None:
            continue
        row["ms"] = seconds * 1e3
        if gflops:
            row["fraction"] = row["flops"] / seconds / 1e9 / gflops
        base = forward.get(
            (row["backend"], row["n"], row["mask"], row["kernel"])
        )
        if row["pass"] == "backward" and base:
            row["x_forward"] = seconds / base
    return rows


def mask_label(mask, documents, window):
    return {
        "documents": f"{documents} documents",
        "window": f"window {window}",
    }.get(mask, mask)


def _cell(value, digits):
    return "-" if value is None else f"{value:.{digits}f}"


def _names(args, row):
    """`(implementation, pass, mask)` as the table writes them."""
    name = row["implementation"]
    if row.get("path"):
        name += f" ({row['path']})"
    passed = "fwd+bwd" if row["pass"] == "backward" else "forward"
    return name, passed, mask_label(row["mask"], args.documents, args.window)


def table(args, rows):
    """The markdown table, then the reasons of its n/a rows and the
    anchors whose forward output differs from ours by over `AGREE`."""
    lines = [
        "| backend | N | mask | implementation | pass | ms | x forward | "
        "fraction of roof |",
        "|---|---|---|---|---|---|---|---|",
    ]
    notes = collections.defaultdict(list)
    for row in rows:
        name, passed, mask = _names(args, row)
        ms = "n/a" if row["ms"] is None else f"{row['ms']:.1f}"
        lines.append(
            f"| {row['backend']} | {row['n']} | {mask} | {name} | {passed} | "
            f"{ms} | {_cell(row['x_forward'], 2)} | "
            f"{_cell(row['fraction'], 2)} |"
        )
        case = f"N={row['n']} {mask}"
        if row.get("error"):
            key = f"- n/a: {row['backend']}, {name}, {passed}"
            notes[key, row["error"]].append(case)
        if (row.get("max_diff") or 0) > AGREE:
            key = f"- differs from ours: {row['backend']}, {name}"
            notes[key, f"max |difference| {row['max_diff']:.1e}"].append(case)
    for (what, why), cases in notes.items():
        lines.append(f"{what} ({', '.join(cases)}): {why}")
    return lines


def _measured(result):
    """`before the rows X, after Y; ` where the roof was measured twice."""
    roofs = result.get("roofs") or []
    if len(roofs) < 2:
        return ""
    return f"before the rows {roofs[0]:.1f}, after {roofs[1]:.1f}; "


def header(args, info, results):
    """The lines above the table: machine, commit, load, roofs, method."""
    yes = {True: "yes", False: "no"}
    before, after = info["load_before"], info["load_after"]
    roofs = "; ".join(
        f"{backend} {_cell(result['gflops'], 1)} GFLOP/s "
        f"({_measured(result)}{result['versions']})"
        for backend, result in results.items()
    )
    return [
        f"CPU: {info['cpu']}, {info['cpus']} logical CPUs, avx512f: "
        f"{yes[info['avx512f']]}, avx512_bf16: {yes[info['avx512_bf16']]}. "
        f"Commit {info['commit']}.",
        "Load average (1, 5, 15 min): before "
        f"{', '.join(f'{x:.2f}' for x in before)}; after "
        f"{', '.join(f'{x:.2f}' for x in after)}.",
        f"Roof, the best float32 {args.gemm_size}^3 keras.ops.matmul of "
        f"{args.repeats} after a warm-up, compiled as each backend compiles, "
        "before the rows and after them, the higher (a backend stopped "
        f"before its second has only the first): {roofs}.",
        f"float32, B = {args.batch}, {args.heads} heads of {args.head_dim}; "
        f"each time the minimum of {args.repeats} runs after a warm-up. "
        "Useful FLOPs: 4 x head_dim per kept (query, key) pair forward; "
        "fwd+bwd counts 3.5x the forward's (backward = 2.5x forward, "
        "FlashAttention-2's convention). x forward = fwd+bwd time / "
        "forward time.",
    ]


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(json.loads(args.worker))
    info = {**machine(), "commit": commit(), "load_before": os.getloadavg()}
    results = {}
    for backend in args.backends:
        results[backend] = run_backend(args, backend)
        if results[backend].get("interrupted"):
            break  # print what was measured
    info["load_after"] = os.getloadavg()
    rows = finish(results)
    lines = header(args, info, results) + [""] + table(args, rows)
    for backend, result in results.items():
        if result["error"]:
            lines.append(f"- {backend}: {result['error']}")
    print("\n".join(lines))
    if args.json:
        roofs = {
            b: {k: r.get(k) for k in ("gflops", "roofs", "versions", "error")}
            for b, r in results.items()
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {"machine": info, "roofs": roofs, "rows": rows}, f, indent=1
            )
    return 0


if __name__ == "__main__":
    # `timeout` sends SIGTERM: end the worker too, and print the rows so far.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    sys.exit(main())
