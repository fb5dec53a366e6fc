"""The first call of compiled FlexAttention on PyTorch's CPU, ours and
PyTorch's own (issue 62).

With a document mask, inference, at N from 2048 (where the planner hands
such a call to compiled `flex_attention` on the CPU), each figure in a
process of its own: `keras_attention.ops.flex_attention(q, q, q,
mask_mod=mods.document(...))` under `torch.no_grad()` (the planner's
`"torch_flex"`), and PyTorch's `torch.compile(create_block_mask)` then
`torch.compile(flex_attention)` of the same rule. "cold": a fresh
`TORCHINDUCTOR_CACHE_DIR`; "warm": a second process on the cache the
first filled. Each row gives the first call's seconds (the compiles) and
the second call's. The header gives the load average before and after.

Example:

    python benchmarks/flex_first_call.py               # N = 2048
    python benchmarks/flex_first_call.py --length 4096
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def _parse(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--length", type=int, default=2048, help="N")
    parser.add_argument("--documents", type=int, default=8, help="documents")
    parser.add_argument("--heads", type=int, default=8, help="heads")
    parser.add_argument("--head-dim", type=int, default=64, help="head size")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _ours(q, segments):
    import torch

    import keras_attention
    from keras_attention.ops import mods

    document = mods.document(segments)

    def call():
        with torch.no_grad():
            return keras_attention.ops.flex_attention(
                q, q, q, mask_mod=document
            )

    with torch.no_grad():
        path = keras_attention.ops.explain_attention(
            q, q, q, mask_mod=document
        ).path
    return call, path


def _torch(q, segments):
    import torch
    from torch.nn.attention import flex_attention as flex

    q = q.transpose(1, 2).contiguous()
    ids = torch.as_tensor(segments[0])
    n = q.shape[2]

    def same_document(b, h, q_idx, kv_idx):
        return ids[q_idx] == ids[kv_idx]

    make = torch.compile(flex.create_block_mask)
    attend = torch.compile(flex.flex_attention)

    def call():
        with torch.no_grad():
            mask = make(same_document, None, None, n, n, device="cpu")
            return attend(q, q, q, block_mask=mask)

    return call, "torch flex_attention, compiled"


def worker(args):
    """One process: the first and second call's seconds, as JSON."""
    import numpy as np
    import torch

    torch.manual_seed(0)
    n = args.length
    segments = np.repeat(np.arange(args.documents), n // args.documents)
    segments = np.resize(segments, n)[None]
    q = torch.randn(1, n, args.heads, args.head_dim)
    call, path = (_ours if args.worker == "ours" else _torch)(q, segments)
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    print(json.dumps({"path": path, "first": seconds[0], "second": seconds[1]}))


def _run(which, cache, args):
    argv = [sys.executable, __file__, "--worker", which]
    argv += ["--length", str(args.length), "--documents", str(args.documents)]
    argv += ["--heads", str(args.heads), "--head-dim", str(args.head_dim)]
    env = dict(os.environ, KERAS_BACKEND="torch", TORCHINDUCTOR_CACHE_DIR=cache)
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"error: the {which} worker failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    args = _parse(argv)
    if args.worker:
        return worker(args)
    print(f"Load average before: {os.getloadavg()}")
    print(f"N = {args.length}, {args.documents} documents, B = 1, ", end="")
    print(f"{args.heads} heads of {args.head_dim}, float32, inference")
    print("| implementation | inductor cache | first call s | second call s |")
    print("|---|---|---|---|")
    for which in ("torch", "ours"):
        with tempfile.TemporaryDirectory() as cache:
            for state in ("cold", "warm"):
                row = _run(which, cache, args)
                name = row["path"]
                if which == "ours":
                    name = f"ours: flex_attention ({row['path']})"
                print(
                    f"| {name} | {state} | {row['first']:.2f} | "
                    f"{row['second']:.3f} |",
                    flush=True,
                )
    print(f"Load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
