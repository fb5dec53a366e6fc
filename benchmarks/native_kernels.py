"""The backends' fused kernels behind our API against the kernels themselves.

Issue 53: where the planner hands a call to the backend's own kernel,
our call should cost within 1.2x of calling that kernel directly, in time
and memory. One process per backend (`KERAS_BACKEND`), one table:

- `flex_attention` with no mask, causal, 8 documents and a causal window
  with ALiBi (`--cases`), at each `--lengths`, forward and forward +
  backward: ours (`keras_attention.ops.flex_attention`, layout `(B, N,
  H, D)`) against, on PyTorch, `torch.compile(flex_attention)` with its
  `create_block_mask` made once (the kernel alone), and on JAX,
  `jax.nn.dot_product_attention(implementation="cudnn")` (the window's
  ALiBi as a bias tensor; the documents through JAX's Pallas kernel with
  segment ids, which `jax.nn` does not take);
- `MultiHeadAttention`, causal, one training step (`train_on_batch`) at
  `--mha-length`: ours against `keras.layers.MultiHeadAttention(...,
  flash_attention=True)`, same weights.

Heads in bfloat16 (`mixed_bfloat16` for the layers) on a GPU: cuDNN takes
half precision only. Times are medians of wall time, every step waited
for; memory is the GPU's: PyTorch's `max_memory_allocated` over the step,
JAX's compiled `memory_analysis()` (temporaries and outputs). Before
the timings, `--table check` runs our layers on the native kernels
against the same layers on our dense kernel: outputs and gradients, the
backward passes that only a GPU runs. (The CPU figure, PyTorch's compiled
FlexAttention for inference, is `flex_attention.py --measure native`.)

    KERAS_BACKEND=torch python benchmarks/native_kernels.py
    KERAS_BACKEND=jax python benchmarks/native_kernels.py --lengths 8192
    KERAS_BACKEND=torch python benchmarks/native_kernels.py --cpu-smoke
"""

import argparse
import contextlib
import functools
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_attention  # noqa: E402
from keras_attention.ops import mods  # noqa: E402

BACKEND = keras.backend.backend()
CASES = ("none", "causal", "documents", "window_alibi")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add(
        "--table",
        nargs="+",
        choices=["check", "kernels"],
        default=["check", "kernels"],
        help="what to run: our layers on the native kernels against our "
        "dense kernel, and the timings (default: both)",
    )
    add(
        "--cases",
        nargs="+",
        choices=CASES,
        default=list(CASES),
        help="flex_attention cases (default: all)",
    )
    add(
        "--lengths",
        nargs="+",
        type=int,
        default=[8192, 32768],
        help="sequence lengths (default: 8192 32768)",
    )
    add("--heads", type=int, default=8, help="heads (default: 8)")
    add("--depth", type=int, default=64, help="head size (default: 64)")
    add(
        "--window",
        type=int,
        default=1024,
        help="keys of the causal window (default: 1024)",
    )
    add(
        "--mha-length",
        type=int,
        default=16384,
        help="MultiHeadAttention's length, 0 to skip (default: 16384)",
    )
    add("--repeats", type=int, default=5, help="timed steps (default: 5)")
    add(
        "--cpu-smoke",
        action="store_true",
        help="tiny sizes in float32, one step: the script's Python on a "
        "CPU, not a benchmark",
    )
    args = parser.parse_args(argv)
    if args.cpu_smoke:
        args.lengths, args.heads, args.depth, args.window = [256], 2, 16, 32
        args.mha_length = min(args.mha_length, 128)
        args.repeats = 1
    return args


def on_gpu():
    if BACKEND == "torch":
        import torch

        return torch.cuda.is_available()
    import jax

    return jax.default_backend() == "gpu"


def our_mods(case, n, heads, window):
    """`(score_mod, mask_mod)` of a case, this package's mods."""
    if case == "causal":
        return None, mods.causal()
    if case == "documents":
        return None, mods.document(segments(n))
    if case == "window_alibi":
        recent = keras_attention.ops.and_masks(
            mods.causal(), mods.sliding_window(window)
        )
        return mods.alibi(heads), recent
    return None, None


def segments(n):
    """8 equal documents, `(1, n)`."""
    return np.repeat(np.arange(8), -(-n // 8))[:n][None].astype("int32")


def sync(x):
    """Wait for `x` (a tensor or a tuple of them)."""
    for t in x if isinstance(x, (tuple, list)) else (x,):
        if BACKEND == "torch":
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()
            else:
                t.detach().cpu()
        else:
            t.block_until_ready()
    return x


def median_seconds(step, repeats):
    sync(step())  # compile, warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sync(step())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# PyTorch: the reference is FlexAttention itself, compiled.


@functools.cache
def _torch_compiled(function):
    import torch

    return torch.compile(function)


def torch_reference(case, n, heads, window, device):
    """`fn(q, k, v)` on `(B, H, N, D)`: compiled flex_attention with its
    block mask made here, once."""
    import torch
    from torch.nn.attention import flex_attention as fa

    flex = _torch_compiled(fa.flex_attention)
    seg = torch.tensor(segments(n)[0], device=device)
    slopes = torch.tensor(mods.alibi_slopes(heads), device=device)
    masks = {
        "causal": lambda b, h, i, j: i >= j,
        "documents": lambda b, h, i, j: seg[i] == seg[j],
        "window_alibi": lambda b, h, i, j: (i >= j) & (i - j < window),
    }
    score = None
    if case == "window_alibi":

        def score(s, b, h, i, j):
            return s - slopes[h] * (i - j).abs()

    block_mask = None
    if case in masks:
        block_mask = _torch_compiled(fa.create_block_mask)(
            masks[case], None, None, n, n, device=device
        )
    return lambda q, k, v: flex(q, k, v, score_mod=score, block_mask=block_mask)


def torch_row(args, case, n, gpu):
    import torch

    device = "cuda" if gpu else "cpu"
    dtype = torch.bfloat16 if gpu else torch.float32
    shape = (1, args.heads, n, args.depth)
    gen = torch.Generator(device).manual_seed(0)
    q, k, v, g = (
        torch.randn(shape, generator=gen, device=device, dtype=dtype)
        for _ in range(4)
    )
    reference = torch_reference(case, n, args.heads, args.window, device)
    score_mod, mask_mod = our_mods(case, n, args.heads, args.window)

    def ours(q, k, v):
        out = keras_attention.ops.flex_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            score_mod=score_mod,
            mask_mod=mask_mod,
        )
        return out.transpose(1, 2)

    results = {}
    for name, fn in (("ref", reference), ("ours", ours)):

        def forward(fn=fn):
            with torch.no_grad():
                return fn(q, k, v)

        def backward(fn=fn):
            qs = [t.detach().requires_grad_(True) for t in (q, k, v)]
            out = fn(*qs)
            out.backward(g)
            return qs[0].grad

        passes = (("forward", forward), ("backward", backward))
        for kind, step in passes if gpu else passes[:1]:
            if gpu:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated() if gpu else 0
            seconds = median_seconds(step, args.repeats)
            peak = (torch.cuda.max_memory_allocated() - base) if gpu else None
            results[name, kind] = seconds, peak
    return results


# JAX: the reference is cuDNN (Pallas for the documents).


def jax_reference(case, n, heads, window, smoke):
    import jax
    import jax.numpy as jnp

    implementation = "xla" if smoke else "cudnn"
    if case == "documents":
        from jax.experimental.pallas.ops.gpu import attention

        seg = jnp.asarray(segments(n))
        return lambda q, k, v: attention.mha(
            q, k, v, seg, sm_scale=q.shape[-1] ** -0.5, interpret=smoke
        )
    kwargs = {}
    if case in ("causal", "window_alibi"):
        kwargs["is_causal"] = True
    if case == "window_alibi":
        kwargs["local_window_size"] = (window - 1, 0)
        distance = jnp.abs(jnp.arange(n)[:, None] - jnp.arange(n)[None])
        slopes = jnp.asarray(mods.alibi_slopes(heads))[:, None, None]
        kwargs["bias"] = -(slopes * distance)[None]
    bias = kwargs.pop("bias", None)

    def reference(q, k, v):
        return jax.nn.dot_product_attention(
            q,
            k,
            v,
            bias=None if bias is None else bias.astype(q.dtype),
            implementation=implementation,
            **kwargs,
        )

    return reference


def jax_row(args, case, n, gpu):
    import jax
    import jax.numpy as jnp

    dtype = jnp.bfloat16 if gpu else jnp.float32
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    shape = (1, n, args.heads, args.depth)
    q, k, v, g = (jax.random.normal(key, shape, dtype) for key in keys)
    reference = jax_reference(case, n, args.heads, args.window, not gpu)
    score_mod, mask_mod = our_mods(case, n, args.heads, args.window)

    def ours(q, k, v):
        return keras_attention.ops.flex_attention(
            q, k, v, score_mod=score_mod, mask_mod=mask_mod
        )

    results = {}
    for name, fn in (("ref", reference), ("ours", ours)):

        def loss(q, k, v, fn=fn):
            return jnp.sum(fn(q, k, v).astype(jnp.float32) * g)

        steps = {
            "forward": jax.jit(fn),
            "backward": jax.jit(jax.grad(loss, argnums=(0, 1, 2))),
        }
        for kind, step in steps.items():
            compiled = step.lower(q, k, v).compile()
            memory = compiled.memory_analysis()
            peak = None
            if memory is not None:
                peak = memory.temp_size_in_bytes + memory.output_size_in_bytes
            seconds = median_seconds(
                lambda c=compiled: c(q, k, v), args.repeats
            )
            results[name, kind] = seconds, peak
    return results


def _gib(size):
    return "-" if size is None else f"{size / 2**30:.2f}"


def _ratio(a, b):
    return "-" if not a or not b else f"{a / b:.2f}"


def kernels(args, gpu):
    print(
        "| backend | case | N | pass | native ms | ours ms | ours/native | "
        "native GiB | ours GiB | ours/native memory | our plan |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    row = torch_row if BACKEND == "torch" else jax_row
    for n in args.lengths:
        for case in args.cases:
            try:
                results = row(args, case, n, gpu)
            except Exception as error:  # one row's failure, not the table's
                print(
                    f"| {BACKEND} | {case} | {n} | - | failed: "
                    f"{type(error).__name__}: {str(error)[:120]} |"
                )
                continue
            path = plan_of(args, case, n)
            for kind in ("forward", "backward"):
                if ("ref", kind) not in results:
                    continue
                (t_ref, m_ref), (t_ours, m_ours) = (
                    results["ref", kind],
                    results["ours", kind],
                )
                print(
                    f"| {BACKEND} | {case} | {n} | {kind} | "
                    f"{t_ref * 1e3:.2f} | {t_ours * 1e3:.2f} | "
                    f"{_ratio(t_ours, t_ref)} | {_gib(m_ref)} | "
                    f"{_gib(m_ours)} | {_ratio(m_ours, m_ref)} | {path} |",
                    flush=True,
                )


@contextlib.contextmanager
def recorded_plans():
    """The plans made inside the block (`plan_attention` recorded)."""
    plans = []
    original = keras_attention.ops.plan.plan_attention

    def recording(*a, **kw):
        plans.append(original(*a, **kw))
        return plans[-1]

    keras_attention.ops.plan.plan_attention = recording
    try:
        yield plans
    finally:
        keras_attention.ops.plan.plan_attention = original


def plan_of(args, case, n):
    """The kernel our call is planned on (the planner asked once more)."""
    dtype = "bfloat16" if on_gpu() else "float32"
    x = keras.ops.zeros((1, n, args.heads, args.depth), dtype)
    score_mod, mask_mod = our_mods(case, n, args.heads, args.window)

    def call(x):
        return keras_attention.ops.flex_attention(
            x, x, x, score_mod=score_mod, mask_mod=mask_mod
        )

    with recorded_plans() as plans:
        if BACKEND == "torch":
            import torch

            with torch.no_grad():
                call(x)
        else:
            import jax

            jax.eval_shape(call, x)
    return plans[-1].path if plans else "-"


def mha(args, gpu):
    """One training step of MultiHeadAttention, causal, against Keras's
    with flash attention (a failure is a row, not the end of the run)."""
    print()
    print(
        "| backend | layer | N | step | keras flash ms | ours ms | ours/keras |"
    )
    print("|---|---|---|---|---|---|---|")
    if gpu:
        keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        seconds = _mha_seconds(args, gpu)
    except Exception as error:
        print(
            f"| {BACKEND} | MultiHeadAttention causal | {args.mha_length} "
            f"| failed: {type(error).__name__}: {str(error)[:160]} |"
        )
        return
    finally:
        keras.config.set_dtype_policy("float32")
    print(
        f"| {BACKEND} | MultiHeadAttention causal | {args.mha_length} | "
        f"train_on_batch | {seconds['keras flash'] * 1e3:.1f} | "
        f"{seconds['ours'] * 1e3:.1f} | "
        f"{_ratio(seconds['ours'], seconds['keras flash'])} |",
        flush=True,
    )


def _mha_seconds(args, gpu):
    n, dim = args.mha_length, args.heads * args.depth
    x = np.random.default_rng(0).normal(size=(1, n, dim)).astype("float32")

    def model(layer):
        inputs = keras.Input((n, dim))
        out = layer(inputs, inputs, use_causal_mask=True)
        built = keras.Model(inputs, out)
        built.compile(optimizer="sgd", loss="mse")
        return built

    # Keras's flash kernel needs a GPU.
    theirs = keras.layers.MultiHeadAttention(
        args.heads, args.depth, flash_attention=True if gpu else None
    )
    ours = keras_attention.MultiHeadAttention(args.heads, args.depth)
    models = {"keras flash": model(theirs), "ours": model(ours)}
    ours.set_weights(theirs.get_weights())
    return {
        name: median_seconds(
            lambda m=m: keras.ops.convert_to_tensor(m.train_on_batch(x, x)),
            args.repeats,
        )
        for name, m in models.items()
    }


def check(args, gpu):
    """Our layers on the native kernels against the same layers on our
    dense kernel (`chunk_size=0`, same weights): the output and the
    gradients of the input and every weight, as relative differences."""
    n = 256 if args.cpu_smoke else 1024
    if gpu and BACKEND == "jax":
        keras.config.set_dtype_policy("mixed_bfloat16")  # cuDNN: half only
    heads, depth = args.heads, args.depth
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, n, heads * depth)).astype("float32")
    upstream = rng.normal(size=x.shape).astype("float32")
    document = dict(mask_mod=mods.document(segments(n).repeat(2, 0)))
    causal = dict(use_causal_mask=True)
    mha = keras_attention.MultiHeadAttention
    cases = {
        "causal": (dict(), causal),
        "causal, sinks": (dict(use_sinks=True), causal),
        "documents": (dict(), document),
        "documents, T5 bias": (
            dict(score_mod=keras_attention.RelativePositionBias(heads)),
            document,
        ),
    }
    print("| backend | layer call | N | our kernel | output | gradients |")
    print("|---|---|---|---|---|---|")
    for name, (options, call) in cases.items():
        native = mha(heads, depth, **options)
        if "score_mod" in options:
            options = dict(
                score_mod=keras_attention.RelativePositionBias(heads)
            )
        dense = mha(heads, depth, chunk_size=0, **options)
        native(x, x, **call)
        dense(x, x, **call)
        dense.set_weights(native.get_weights())
        with recorded_plans() as plans:
            got = _output_and_gradients(native, x, upstream, call)
        want = _output_and_gradients(dense, x, upstream, call)
        errors = [
            float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-30))
            for g, w in zip(got, want, strict=True)
        ]
        print(
            f"| {BACKEND} | MultiHeadAttention, {name} | {n} | "
            f"{plans[0].path} | {errors[0]:.1e} | {max(errors[1:]):.1e} |",
            flush=True,
        )
    keras.config.set_dtype_policy("float32")


def _output_and_gradients(layer, x, upstream, call):
    """NumPy arrays: the output, then the gradients of `sum(output ·
    upstream)` with respect to the input and each trainable weight."""
    if BACKEND == "torch":
        import torch

        xt = torch.tensor(x, device=keras.ops.zeros(()).device)
        xt.requires_grad_(True)
        for v in layer.trainable_variables:
            v.value.grad = None
        out = layer(xt, xt, **call)
        g = torch.tensor(upstream, device=xt.device)
        (out.float() * g).sum().backward()
        grads = [xt.grad] + [v.value.grad for v in layer.trainable_variables]
        arrays = [out] + grads
        return [a.detach().float().cpu().numpy() for a in arrays]
    import jax

    others = [v.value for v in layer.non_trainable_variables]

    def loss(weights, x):
        out, _ = layer.stateless_call(weights, others, x, x, **call)
        value = jax.numpy.sum(out.astype("float32") * upstream)
        return value, out

    weights = [v.value for v in layer.trainable_variables]
    grad = jax.grad(loss, argnums=(0, 1), has_aux=True)
    (d_weights, d_x), out = grad(weights, jax.numpy.asarray(x))
    arrays = [out, d_x, *d_weights]
    return [np.asarray(a, "float32") for a in arrays]


def main(argv=None):
    args = parse_args(argv)
    if BACKEND not in ("torch", "jax"):
        print("error: KERAS_BACKEND must be torch or jax", file=sys.stderr)
        return 2
    gpu = on_gpu()
    print(f"Keras {keras.__version__}, backend {BACKEND}, GPU: {gpu}")
    if "check" in args.table:
        check(args, gpu)
    if "kernels" in args.table:
        kernels(args, gpu)
        if args.mha_length:
            mha(args, gpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
