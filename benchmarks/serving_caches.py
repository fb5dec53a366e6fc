"""Bytes of the serving caches, and the quantized cache's error.

Both tables use one `GroupedQueryAttention` of a small decoder's shape:
8 query heads and 2 key/value heads of 64, model width 512, batch 1,
random inputs of a fixed seed (no rotary embedding, so that the logits
below are the query projection against the cached keys).

Rolling: a prompt of up to `--lengths` (1k, 8k, 32k) tokens is written
through the layer in calls of `--chunk` (2,048) tokens with
`use_causal_mask=True`, once into a `RollingCache` (a window of 512 and
4 sink tokens, StreamingLLM's) and once into keras-hub's full
`KeyValueCache` of `max_length` the prompt's length with the same
window as a mask mod (`ops.mods.streaming(512, 4)`), so that the two
caches give the same outputs. The table reports each returned cache's
`nbytes` (its tensors' sizes), in float32 and bfloat16 caches, and the
largest difference of the last call's outputs between the two.

Quantized: a prompt of `--cached` (256) tokens is written at
`cache_update_index=0` into a float32, a bfloat16, an int8 and a
float8_e4m3fn (where the backend has it) cache, then one token decodes
at `cache_update_index=256`. The table reports bytes per cached token
(`nbytes / max_length`) and, against the float32 cache, the step's
largest logit error (`q · k / sqrt(64)` over the cache's keys as the
kernel reads them, int8 and float8 dequantized; softmax of them is the
layer's returned weights), weight error and output error.

    python benchmarks/serving_caches.py            # both tables
    python benchmarks/serving_caches.py --quick    # a smoke run
    KERAS_BACKEND=jax python benchmarks/serving_caches.py --table quantized
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

HEADS, KV_HEADS, HEAD_DIM = 8, 2, 64
WIDTH = HEADS * HEAD_DIM
WINDOW, SINKS = 512, 4


def _layer(dtype="float32", seed=0):
    """The layer in `dtype` (its weights and its caches: a layer keeps
    its cache in its compute dtype), built, with weights of a fixed seed
    (the same in every dtype)."""
    import keras

    import keras_attention

    keras.utils.set_random_seed(seed)
    layer = keras_attention.GroupedQueryAttention(
        HEAD_DIM, HEADS, KV_HEADS, dtype=dtype
    )
    x = keras.ops.zeros((1, 1, WIDTH))
    layer(x, x)
    if dtype != "float32":
        layer.set_weights(_layer("float32", seed).get_weights())
    return layer


def _write(layer, cache, x, chunk, stops=(), **kwargs):
    """`(cache, {tokens: (nbytes, output)})`: `x` written through the
    layer in calls of `chunk` tokens (a call also ends at each of the
    `stops`), the cache's bytes and the call's output after each call."""
    import keras

    length = x.shape[1]
    stops = {stop for stop in stops if stop < length}
    ends = sorted({*range(chunk, length, chunk), *stops, length})
    after, lo = {}, 0
    for hi in ends:
        step = x[:, lo:hi]
        out, cache = layer(
            step,
            step,
            cache=cache,
            cache_update_index=lo,
            use_causal_mask=True,
            **kwargs,
        )
        out = keras.ops.convert_to_numpy(out).astype("float32")
        after[hi], lo = (cache.nbytes, out), hi
    return cache, after


def rolling_rows(lengths, chunk, dtypes=("float32", "bfloat16"), seed=0):
    """`[(dtype, tokens, rolling bytes, full bytes, output difference)]`:
    one rolling run to the longest prompt, a full cache for each."""
    import numpy as np

    import keras_attention
    from keras_attention.ops import mods

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(1, max(lengths), WIDTH)).astype("float32")
    rows = []
    for dtype in dtypes:
        layer = _layer(dtype, seed)
        rolling = keras_attention.RollingCache.allocate(
            layer, 1, window=WINDOW, num_sink_tokens=SINKS
        )
        _, after = _write(layer, rolling, x, chunk, stops=lengths)
        for n in lengths:
            full = keras_attention.KeyValueCache.allocate(layer, 1, n)
            rule = mods.streaming(WINDOW, SINKS)
            _, full_after = _write(
                layer, full, x[:, :n], chunk, stops=lengths, mask_mod=rule
            )
            (rolling_bytes, out), (full_bytes, want) = after[n], full_after[n]
            gap = float(np.max(np.abs(out - want)))
            rows.append((dtype, n, rolling_bytes, full_bytes, gap))
    return rows


def _cache_keys(cache):
    """The keys `(batch, max_length, kv_heads, head_dim)` as the kernel
    reads them, float32 (int8 and float8 dequantized)."""
    import keras

    import keras_attention

    def numpy(tensor):
        # Cast first: Keras's PyTorch backend makes no float8 NumPy array.
        return keras.ops.convert_to_numpy(keras.ops.cast(tensor, "float32"))

    if isinstance(cache, keras_attention.QuantizedCache):
        values = numpy(cache.values[:, 0])
        return values * numpy(cache.scales[:, 0])[..., None]
    return numpy(cache.tensor[:, 0])


def _step(layer, cache, prompt, token):
    """`(output, weights, logits)` of the token decoded after the prompt:
    logits `(batch, heads, max_length)` are the projected query against
    the cache's keys, scaled."""
    import keras
    import numpy as np

    numpy = keras.ops.convert_to_numpy
    length = prompt.shape[1]
    _, cache = layer(prompt, prompt, cache=cache, cache_update_index=0)
    out, weights, cache = layer(
        token,
        token,
        cache=cache,
        cache_update_index=length,
        return_attention_scores=True,
    )
    query = np.asarray(numpy(layer.query_dense(token)), "float32")[:, 0]
    keys = np.repeat(_cache_keys(cache), HEADS // KV_HEADS, axis=2)
    logits = np.einsum("bhd,bkhd->bhk", query, keys) / np.sqrt(HEAD_DIM)
    weights = np.asarray(numpy(weights), "float32")[:, :, 0]
    return np.asarray(numpy(out), "float32"), weights, logits, cache


def _softmax(logits):
    import numpy as np

    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def quantized_rows(cached, batch=4, seed=0):
    """`(rows, (largest |logit|, largest |output|) of the float32 step)`:
    rows `(cache, bytes per token, logit error, weight error, output
    error, softmax(logits) against the layer's weights)`, the errors
    against the float32 cache; a kind the backend lacks gives `(cache,
    error message)`."""
    import numpy as np

    import keras_attention

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, cached + 1, WIDTH)).astype("float32")
    prompt, token = x[:, :cached], x[:, cached:]
    kinds = {
        "float32": ("float32", keras_attention.KeyValueCache, {}),
        "bfloat16 (layer in bfloat16)": (
            "bfloat16",
            keras_attention.KeyValueCache,
            {},
        ),
        "int8": ("float32", keras_attention.QuantizedCache, {"dtype": "int8"}),
        "float8_e4m3fn": (
            "float32",
            keras_attention.QuantizedCache,
            {"dtype": "float8_e4m3fn"},
        ),
    }
    rows, reference = [], None
    for name, (dtype, kind, options) in kinds.items():
        layer = _layer(dtype, seed)
        try:
            cache = kind.allocate(layer, batch, cached + 1, **options)
            out, weights, logits, cache = _step(layer, cache, prompt, token)
        except Exception as error:  # a dtype the backend lacks
            rows.append((name, f"{type(error).__name__}: {error}"[:120]))
            continue
        found = (logits, weights, out)
        reference = reference or found
        errors = [
            np.max(np.abs(a - b)) for a, b in zip(found, reference, strict=True)
        ]
        check = np.max(np.abs(_softmax(logits) - weights))
        per_token = cache.nbytes // (batch * (cached + 1))
        rows.append((name, per_token, *map(float, errors), float(check)))
    peaks = tuple(float(np.max(np.abs(reference[i]))) for i in (0, 2))
    return rows, peaks


def _lengths(text):
    try:
        lengths = [int(n) for n in text.split(",")]
    except ValueError:
        lengths = []
    if not lengths or min(lengths) < 1:
        raise argparse.ArgumentTypeError(
            f"comma-separated positive integers. Received: {text!r}"
        )
    return sorted(set(lengths))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--table",
        choices=("rolling", "quantized", "both"),
        default="both",
        help="which table (both)",
    )
    parser.add_argument(
        "--lengths",
        type=_lengths,
        default=[1024, 8192, 32768],
        help="prompt lengths of the rolling table (1024,8192,32768)",
    )
    parser.add_argument(
        "--chunk", type=int, default=2048, help="tokens a call (2048)"
    )
    parser.add_argument(
        "--cached", type=int, default=256, help="cached tokens (256)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="lengths 600 and 1200 in calls of 300, 32 cached tokens",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths, args.chunk, args.cached = [600, 1200], 300, 32
    if args.chunk < 1 or args.cached < 1:
        parser.exit(
            2,
            "error: --chunk and --cached must be positive. Received: "
            f"--chunk {args.chunk}, --cached {args.cached}\n",
        )
    return args


def _print_rolling(args):
    print(
        f"GroupedQueryAttention, {HEADS} query / {KV_HEADS} K/V heads of "
        f"{HEAD_DIM}, batch 1, window {WINDOW} + {SINKS} sink tokens, "
        f"calls of {args.chunk} tokens"
    )
    print(
        "| cache dtype | tokens written | RollingCache bytes | KeyValueCache "
        "bytes | full / rolling | largest output difference |"
    )
    print("|---|---|---|---|---|---|")
    for dtype, n, rolling, full, gap in rolling_rows(args.lengths, args.chunk):
        print(
            f"| {dtype} | {n:,} | {rolling:,} | {full:,} | "
            f"{full / rolling:.1f}x | {gap:.2g} |"
        )


def _print_quantized(args):
    print(
        f"GroupedQueryAttention, {HEADS} query / {KV_HEADS} K/V heads of "
        f"{HEAD_DIM}, batch 4, {args.cached} cached tokens, one decoding "
        "step; errors against the float32 cache"
    )
    print(
        "| cache | bytes per token | vs float32 | largest logit error | "
        "largest weight error | largest output error | softmax(logits) "
        "vs the layer's weights |"
    )
    print("|---|---|---|---|---|---|---|")
    rows, peaks = quantized_rows(args.cached)
    for name, *row in rows:
        if len(row) == 1:
            print(f"| {name} | not on this backend: {row[0]} |||||")
            continue
        ratio = row[0] / rows[0][1]
        errors = " | ".join(f"{e:.2g}" for e in row[1:])
        print(f"| {name} | {row[0]:,} | {ratio:.3f} | {errors} |")
    print(
        f"float32 cache: largest |logit| {peaks[0]:.3g}, largest |output| "
        f"{peaks[1]:.3g}"
    )


def main(argv=None):
    args = parse_args(argv)
    import keras

    print(f"backend {keras.backend.backend()}, keras {keras.__version__}")
    if args.table in ("rolling", "both"):
        _print_rolling(args)
    if args.table in ("quantized", "both"):
        _print_quantized(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
