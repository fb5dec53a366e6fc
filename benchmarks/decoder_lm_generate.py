"""Tokens per second of compiled generation: the package's decoder LM
against keras-hub's `CausalLM.generate`, a model of the same size.

On the current Keras backend (`KERAS_BACKEND`), in one process: our
`keras_attention.models.language_model` model (causal pre-norm blocks of
`SelfAttention` with rotary positions, keras-hub's cache tensor per
block) decoded by its `Generator` (the prompt, then one `ops.while_loop`
of single-token steps, all one `jax.jit` / `tf.function(jit_compile=True)`
function; eager on PyTorch), and keras-hub's `GPT2CausalLM` (built from a
config, no download; greedy sampler, `stop_token_ids=None`) through its
`generate` (its own compiled while loop; eager on PyTorch), with the same
vocabulary, width, layers, heads and feed-forward width. Both generate
`--new-tokens` tokens after a prompt of `--prompt-length` random ids,
batch 1 and 16; a first call of each compiles, then the repetitions
alternate (one of ours, one of theirs), and the table gives the median
seconds and tokens per second (`batch · new tokens / seconds`) and the
median of the per-repetition ratios (ours / keras-hub's tokens per
second: above 1, ours is faster).

    python benchmarks/decoder_lm_generate.py            # the table
    python benchmarks/decoder_lm_generate.py --quick    # a smoke run
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--prompt-length", type=int, default=8)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--vocabulary", type=int, default=8192)
    parser.add_argument("--model-dim", type=int, default=256)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--feed-forward-dim", type=int, default=1024)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.new_tokens, args.batch_sizes = 1, 8, [2]
        args.vocabulary, args.model_dim, args.num_layers = 64, 32, 1
        args.num_heads, args.feed_forward_dim = 2, 64
    return args


def _models(args):
    import keras
    import keras_hub

    from keras_attention.models import Generator
    from keras_attention.models import language_model

    keras.utils.set_random_seed(0)
    ours = language_model.build_language_model(
        args.vocabulary,
        model_dim=args.model_dim,
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        feed_forward_dim=args.feed_forward_dim,
        dropout=0.0,
    )
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=args.vocabulary,
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        hidden_dim=args.model_dim,
        intermediate_dim=args.feed_forward_dim,
        dropout=0.0,
        max_sequence_length=args.prompt_length + args.new_tokens,
    )
    theirs = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    theirs.compile(sampler="greedy")
    return Generator(ours), ours, theirs


def _timed(run):
    start = time.perf_counter()
    out = run()
    return time.perf_counter() - start, out


def _measure(args, generator, theirs, batch):
    import numpy as np

    rng = np.random.default_rng(batch)
    total = args.prompt_length + args.new_tokens
    prompt = rng.integers(3, args.vocabulary, (batch, args.prompt_length))
    ids = np.zeros((batch, total), "int32")
    ids[:, : args.prompt_length] = prompt
    mask = np.zeros((batch, total), bool)
    mask[:, : args.prompt_length] = True
    inputs = {"token_ids": ids, "padding_mask": mask}

    def ours():
        return generator.generate(prompt, args.new_tokens)

    def keras_hub():
        return theirs.generate(inputs, stop_token_ids=None)

    ours(), keras_hub()  # compile both
    seconds = {"ours": [], "keras_hub": []}
    for _ in range(args.repeats):
        for name, run in (("ours", ours), ("keras_hub", keras_hub)):
            seconds[name].append(_timed(run)[0])
    ratios = [
        t / o
        for o, t in zip(seconds["ours"], seconds["keras_hub"], strict=True)
    ]
    tokens = batch * args.new_tokens
    ours_s = statistics.median(seconds["ours"])
    theirs_s = statistics.median(seconds["keras_hub"])
    return ours_s, theirs_s, tokens / ours_s, tokens / theirs_s, ratios


def main(argv=None):
    args = parse_args(argv)
    import keras

    generator, ours, theirs = _models(args)
    print(
        f"keras {keras.__version__}, backend {keras.backend.backend()}; "
        f"parameters: ours {ours.count_params():,}, keras-hub "
        f"{theirs.count_params():,}; {args.new_tokens} new tokens after "
        f"{args.prompt_length}, {args.repeats} repetitions"
    )
    print(
        "| backend | batch | ours s | keras-hub s | ours tokens/s | "
        "keras-hub tokens/s | ratio ours/keras-hub |"
    )
    print("|---|---|---|---|---|---|---|")
    for batch in args.batch_sizes:
        ours_s, theirs_s, ours_t, theirs_t, ratios = _measure(
            args, generator, theirs, batch
        )
        print(
            f"| {keras.backend.backend()} | {batch} | {ours_s:.2f} | "
            f"{theirs_s:.2f} | {ours_t:.0f} | {theirs_t:.0f} | "
            f"{statistics.median(ratios):.2f} |"
        )


if __name__ == "__main__":
    main()
