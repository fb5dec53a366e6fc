"""Bytes per cached token of MultiHeadLatentAttention against MHA and GQA.

Each layer decodes a prompt into its own cache (keras-hub's semantics:
the prompt written at `cache_update_index=0`, then one token a call), and
the table reports what the returned cache holds per token, per layer:
`cache.nbytes / (batch · max_length)`, read from the tensors themselves,
with the ratio to multi-head attention's. The shapes follow DeepSeek-V2's
proportions (arXiv 2405.04434, Table 1: `d_c = 4 d_h`, `d_h^R = d_h / 2`)
at a width a CPU decodes quickly: 16 heads of 64, model width 1024; GQA
with 4 key/value heads; MLA with `kv_lora_rank=256`, `qk_rope_head_dim=32`.

    python benchmarks/latent_cache.py            # the table
    python benchmarks/latent_cache.py --quick    # a smoke run
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

WIDTH, HEADS, HEAD_DIM, KV_HEADS = 1024, 16, 64, 4
LATENT, ROPE = 4 * HEAD_DIM, HEAD_DIM // 2


def _layers():
    """`{name: (layer, empty cache of (batch, max_length))}`."""
    import numpy as np

    import keras_attention

    def kv_cache(heads):
        return lambda b, n: np.zeros((b, 2, n, heads, HEAD_DIM), "float32")

    return {
        "MultiHeadAttention (16 heads)": (
            keras_attention.MultiHeadAttention(HEADS, HEAD_DIM),
            kv_cache(HEADS),
        ),
        "GroupedQueryAttention (16 / 4 heads)": (
            keras_attention.GroupedQueryAttention(HEAD_DIM, HEADS, KV_HEADS),
            kv_cache(KV_HEADS),
        ),
        "MultiHeadLatentAttention (16 heads)": (
            keras_attention.MultiHeadLatentAttention(
                num_heads=HEADS,
                kv_lora_rank=LATENT,
                qk_nope_head_dim=HEAD_DIM,
                qk_rope_head_dim=ROPE,
                v_head_dim=HEAD_DIM,
            ),
            lambda b, n: np.zeros((b, n, LATENT + ROPE), "float32"),
        ),
    }


def _decode(layer, cache, prompt, steps):
    """The cache after the prompt and `steps` tokens, one a call."""
    import numpy as np

    batch, length, _ = prompt.shape
    call = (
        (lambda x, c, i: layer(x, x, cache=c, cache_update_index=i))
        if not hasattr(layer, "kv_lora_rank")
        else (lambda x, c, i: layer(x, cache=c, cache_update_index=i))
    )
    _, cache = call(prompt, cache, 0)
    token = np.ones((batch, 1, WIDTH), "float32")
    for t in range(length, length + steps):
        _, cache = call(token, cache, t)
    return cache


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--max-length", type=int, default=2048, help="cache slots (2048)"
    )
    parser.add_argument(
        "--steps", type=int, default=4, help="decoding steps (4)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="64 slots, 2 steps"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.max_length, args.steps = 64, 2
    if args.max_length < args.steps + 2 or args.steps < 2:
        print(
            "error: --max-length must exceed --steps + 1 and --steps be at "
            f"least 2. Received: --max-length {args.max_length}, --steps "
            f"{args.steps}"
        )
        return 2
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    batch, prompt_length = 1, args.max_length - args.steps
    prompt = rng.normal(size=(batch, prompt_length, WIDTH)).astype("float32")
    rows = []
    for name, (layer, empty) in _layers().items():
        cache = _decode(
            layer, empty(batch, args.max_length), prompt, args.steps
        )
        cache = keras.ops.convert_to_numpy(cache)
        rows.append((name, cache.nbytes // (batch * args.max_length)))
    mha_bytes = rows[0][1]
    print(
        f"backend {keras.backend.backend()}, cache of {args.max_length} "
        f"slots, batch {batch}, float32, {args.steps} decoding steps"
    )
    print("| layer | numbers per token | bytes per token | vs MHA |")
    print("|---|---|---|---|")
    for name, size in rows:
        print(f"| {name} | {size // 4} | {size} | {size / mha_bytes:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
