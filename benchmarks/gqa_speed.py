"""GroupedQueryAttention against Keras's, and cached decoding.

Three measurements on the current Keras backend (`KERAS_BACKEND`), in one
process:

- `step`: one training step (forward and backward, SGD with rate 0) of a
  model made of `keras_attention.GroupedQueryAttention` against the same
  model with `keras.layers.GroupQueryAttention`, same weights,
  self-attention `layer(x, x)`, alternating repetitions; medians of wall
  time and of the per-repetition ratio `keras / ours` (above 1: ours is
  faster). `model.train_on_batch` is a `tf.function` on TensorFlow (graph,
  no XLA on CPU), `jax.jit` on JAX, eager on PyTorch.
- `kv memory`: the bytes of the keys and values each layer attends with:
  Keras repeats them to `num_query_heads` heads, ours broadcasts the
  `num_key_value_heads` heads (counted from the shapes, not measured).
- `decode`: 256 tokens decoded one at a time with the KV cache (a compiled
  step of a fixed-size cache) against recomputing the whole fixed-size
  causal pass over the prefix at every step; total wall time and the
  speed-up.

Example:

    python benchmarks/gqa_speed.py           # B=8, N=512, 8 q / 2 kv heads
    python benchmarks/gqa_speed.py --quick   # tiny smoke run
    python benchmarks/gqa_speed.py --shape 8,2048,1024,64,16,4  # a GPU's
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny shapes, two repetitions"
    )
    parser.add_argument(
        "--repeats", type=int, default=8, help="timed repetitions (default 8)"
    )
    parser.add_argument(
        "--tokens", type=int, default=256, help="decoded tokens (default 256)"
    )
    parser.add_argument(
        "--shape",
        type=_shape,
        default=None,
        metavar="B,N,D,HEAD_DIM,Q_HEADS,KV_HEADS",
        help="the training step's shape (default 8,512,256,32,8,2; with "
        "--quick 2,32,32,8,4,2); decoding uses its D and heads",
    )
    return parser.parse_args(argv)


def _shape(text):
    try:
        shape = tuple(int(n) for n in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 6 or min(shape) < 1:
        raise argparse.ArgumentTypeError(
            "six positive integers B,N,D,HEAD_DIM,Q_HEADS,KV_HEADS, e.g. "
            f"8,512,256,32,8,2. Received: {text!r}"
        )
    return shape


def _models(batch, length, dim, head_dim, q_heads, kv_heads):
    import keras

    import keras_attention

    kwargs = dict(
        head_dim=head_dim, num_query_heads=q_heads, num_key_value_heads=kv_heads
    )
    models = []
    for layer in (
        keras.layers.GroupQueryAttention(**kwargs),
        keras_attention.GroupedQueryAttention(**kwargs),
    ):
        x = keras.Input((length, dim))
        model = keras.Model(x, layer(x, x))
        model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
        models.append(model)
    models[1].set_weights(models[0].get_weights())
    return models


def step(args, shape):
    import numpy as np

    batch, length, dim, head_dim, q_heads, kv_heads = shape
    theirs, ours = _models(*shape)
    x = np.random.default_rng(0).normal(size=(batch, length, dim))
    x = x.astype("float32")
    times = {"keras": [], "ours": []}
    for model in (theirs, ours):
        model.train_on_batch(x, x)  # compile
    for r in range(args.repeats):
        order = [("keras", theirs), ("ours", ours)]
        for name, model in order if r % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            model.train_on_batch(x, x)
            times[name].append(time.perf_counter() - start)
    ratios = [k / o for k, o in zip(times["keras"], times["ours"], strict=True)]
    kv_keras = 2 * batch * length * q_heads * head_dim * 4
    kv_ours = 2 * batch * length * kv_heads * head_dim * 4
    return {
        "keras_ms": 1e3 * statistics.median(times["keras"]),
        "ours_ms": 1e3 * statistics.median(times["ours"]),
        "ratio": statistics.median(ratios),
        "kv_mib_keras": kv_keras / 2**20,
        "kv_mib_ours": kv_ours / 2**20,
    }


def decode(args, dim, head_dim, q_heads, kv_heads):
    import keras
    import numpy as np

    import keras_attention

    tokens = args.tokens
    layer = keras_attention.GroupedQueryAttention(
        head_dim=head_dim,
        num_query_heads=q_heads,
        num_key_value_heads=kv_heads,
        rotary_embedding=keras_attention.RotaryEmbedding(),
    )
    x = np.random.default_rng(1).normal(size=(1, tokens, dim))
    x = x.astype("float32")

    class Cached(keras.Model):
        def call(self, inputs):
            token, cache, index = inputs
            return layer(
                token,
                token,
                cache=cache,
                cache_update_index=index[0],
                use_causal_mask=True,
            )

    class Recompute(keras.Model):
        def call(self, inputs):
            return layer(inputs, inputs, use_causal_mask=True)

    cached, recompute = Cached(), Recompute()
    cached.compile(jit_compile=keras.backend.backend() != "torch")
    recompute.compile(jit_compile=keras.backend.backend() != "torch")
    cache = np.zeros((1, 2, tokens, kv_heads, head_dim), "float32")
    index = np.zeros((1,), "int32")
    cached.predict_on_batch([x[:, :1], cache, index])  # compile
    recompute.predict_on_batch(x)
    start = time.perf_counter()
    for i in range(tokens):
        index[0] = i
        _, cache = cached.predict_on_batch([x[:, i : i + 1], cache, index])
    cached_s = time.perf_counter() - start
    prefix = np.zeros_like(x)
    start = time.perf_counter()
    for i in range(tokens):
        # The fixed-size prefix (later positions zero, causally unseen).
        prefix[:, i] = x[:, i]
        recompute.predict_on_batch(prefix)
    recompute_s = time.perf_counter() - start
    return {"cached_s": cached_s, "recompute_s": recompute_s}


def main(argv=None):
    args = parse_args(argv)
    import keras

    shape = (2, 32, 32, 8, 4, 2) if args.quick else (8, 512, 256, 32, 8, 2)
    if args.quick:
        args.repeats, args.tokens = 2, 8
    shape = args.shape or shape
    result = step(args, shape)
    backend = keras.backend.backend()
    print(
        "| backend | B | N | D | q heads | kv heads | keras ms | ours ms "
        "| ratio keras/ours | K/V MiB keras | K/V MiB ours |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    b, n, d, _, hq, hkv = shape
    print(
        f"| {backend} | {b} | {n} | {d} | {hq} | {hkv} | "
        f"{result['keras_ms']:.0f} | {result['ours_ms']:.0f} | "
        f"{result['ratio']:.2f} | {result['kv_mib_keras']:.0f} | "
        f"{result['kv_mib_ours']:.0f} |"
    )
    dec = decode(args, d, shape[3], hq, hkv)
    print(
        f"\ndecode {args.tokens} tokens ({backend}): cached "
        f"{dec['cached_s']:.2f} s, recomputing the prefix "
        f"{dec['recompute_s']:.2f} s, speed-up "
        f"{dec['recompute_s'] / dec['cached_s']:.1f}x"
    )


if __name__ == "__main__":
    main()
