"""Tokens per second of a keras-hub model on our attention: the swapped
model against the same model unswapped, with keras-hub's `generate` and
with our compiled generation.

On the current Keras backend (`KERAS_BACKEND`), in one process: a
keras-hub `CausalLM` of `--family` (Llama 3 by default; built from a
config, no download, Keras's initial weights), greedy sampler,
`stop_token_ids=None`. Three ways to generate `--new-tokens` tokens after
a prompt of `--prompt-length` random ids, batch 1 and 16:

- `keras-hub`: keras-hub's `generate` on the model as keras-hub builds it;
- `swapped`: keras-hub's `generate` on a second copy of the model (the
  same weights) that `hub.swap_attention` swapped in place (the issue's
  goal: at least 0.95x `keras-hub`);
- `ours`: `keras_attention.models.Generator` on
  `hub.language_model(swapped)` (one `jax.jit` / `tf.function(
  jit_compile=True)` function; eager on PyTorch; goal: at least 1.5x
  `keras-hub`);
- `ours jit`, with `--jit-compile`: the same with `Generator(...,
  jit_compile=True)` (on PyTorch each step one `torch.compile` graph;
  its ids are checked equal to `ours`' eager ones).

A first call of each compiles (its seconds are printed), then the
repetitions alternate (one of each), and the table gives the median
seconds and tokens per second (`batch · new tokens / seconds`) of each,
and the median of the per-repetition ratios to `keras-hub` (above 1:
faster). Measure on an idle machine.

    python benchmarks/hub_generation.py            # the table
    python benchmarks/hub_generation.py --quick    # a smoke run
    KERAS_BACKEND=torch python benchmarks/hub_generation.py --jit-compile
"""

import argparse
import functools
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# keras-hub's classes and the constructor arguments of each family that
# the sizes below do not give.
FAMILIES = {
    "llama3": ("Llama3Backbone", "Llama3CausalLM", {}),
    "mistral": ("MistralBackbone", "MistralCausalLM", {"sliding_window": 64}),
    "qwen3": ("Qwen3Backbone", "Qwen3CausalLM", {"head_dim": None}),
    "gemma3": (
        "Gemma3Backbone",
        "Gemma3CausalLM",
        {"image_size": None, "head_dim": None},
    ),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes")
    parser.add_argument(
        "--family", choices=sorted(FAMILIES), default="llama3", help="model"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs")
    parser.add_argument("--new-tokens", type=int, default=256, help="per row")
    parser.add_argument("--prompt-length", type=int, default=8, help="ids")
    parser.add_argument(
        "--batch-sizes", type=int, nargs="+", default=[1, 16], help="rows"
    )
    parser.add_argument("--vocabulary", type=int, default=8192, help="ids")
    parser.add_argument("--model-dim", type=int, default=256, help="width")
    parser.add_argument("--num-layers", type=int, default=4, help="decoders")
    parser.add_argument("--num-heads", type=int, default=4, help="queries")
    parser.add_argument(
        "--num-key-value-heads", type=int, default=2, help="keys and values"
    )
    parser.add_argument(
        "--feed-forward-dim", type=int, default=1024, help="MLP width"
    )
    parser.add_argument(
        "--jit-compile",
        action="store_true",
        help="also our generation with jit_compile=True (`ours jit`)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.new_tokens, args.batch_sizes = 1, 4, [2]
        args.vocabulary, args.model_dim, args.num_layers = 64, 16, 1
        args.num_heads, args.num_key_value_heads = 2, 1
        args.feed_forward_dim = 32
    return args


def _causal_lm(args):
    """keras-hub's causal LM of `args.family`, greedy."""
    import keras_hub

    backbone_name, causal_lm_name, options = FAMILIES[args.family]
    options = dict(options)
    if "head_dim" in options:
        options["head_dim"] = args.model_dim // args.num_heads
    backbone = getattr(keras_hub.models, backbone_name)(
        vocabulary_size=args.vocabulary,
        num_layers=args.num_layers,
        num_query_heads=args.num_heads,
        num_key_value_heads=args.num_key_value_heads,
        hidden_dim=args.model_dim,
        intermediate_dim=args.feed_forward_dim,
        **options,
    )
    causal_lm = getattr(keras_hub.models, causal_lm_name)(
        backbone=backbone, preprocessor=None
    )
    causal_lm.compile(sampler="greedy")
    return causal_lm


def _models(args):
    """`(keras-hub's causal LM, a copy swapped, {name: our Generator on
    it})`: the swap is in place, so the copy is a second model with the
    first's weights."""
    import keras

    from keras_attention import hub
    from keras_attention.models import Generator

    keras.utils.set_random_seed(0)
    causal_lm = _causal_lm(args)
    swapped = _causal_lm(args)
    swapped.set_weights(causal_lm.get_weights())
    hub.swap_attention(swapped)
    model = hub.language_model(swapped)
    generators = {"ours": Generator(model)}
    if args.jit_compile:
        generators["ours jit"] = Generator(model, jit_compile=True)
    return causal_lm, swapped, generators


def _generate_function(causal_lm):
    """keras-hub's generate of `causal_lm` on a dict of ids and mask.
    Gemma 3 without a preprocessor returns `images: None` beside the
    tokens, which its `generate` cannot gather: its generate function."""
    if type(causal_lm).__name__ != "Gemma3CausalLM":
        return lambda inputs: causal_lm.generate(inputs, stop_token_ids=None)
    function = causal_lm.make_generate_function()
    return lambda inputs: function(inputs, stop_token_ids=None)


def _timed(run):
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _measure(args, causal_lm, swapped, generators, batch):
    """`{name: [seconds of each repetition]}`, after each way's first
    call (printed: its compile)."""
    import numpy as np

    rng = np.random.default_rng(batch)
    total = args.prompt_length + args.new_tokens
    prompt = rng.integers(3, args.vocabulary, (batch, args.prompt_length))
    prompt = prompt.astype("int32")
    ids = np.zeros((batch, total), "int32")
    ids[:, : args.prompt_length] = prompt
    mask = np.arange(total)[None].repeat(batch, 0) < args.prompt_length
    inputs = {"token_ids": ids, "padding_mask": mask}
    keras_hubs, swapped_generate = map(_generate_function, (causal_lm, swapped))
    runs = {
        "keras-hub": lambda: keras_hubs(inputs),
        "swapped": lambda: swapped_generate(inputs),
    }
    for name, generator in generators.items():
        runs[name] = functools.partial(
            generator.generate, prompt, args.new_tokens
        )
    first = {name: _timed(run) for name, run in runs.items()}
    print(
        f"batch {batch}, first calls: "
        + ", ".join(f"{name} {s:.1f} s" for name, s in first.items())
    )
    if "ours jit" in runs:
        same = (runs["ours"]() == runs["ours jit"]()).all()
        print(f"batch {batch}: ours jit's ids equal to ours: {same}")
    seconds = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            seconds[name].append(_timed(run))
    return seconds


def _row(backend, batch, tokens, seconds):
    cells = [backend, str(batch)]
    for name in seconds:
        cells.append(f"{tokens / statistics.median(seconds[name]):.0f}")
    for name in list(seconds)[1:]:
        ratios = [
            hub_s / s
            for hub_s, s in zip(
                seconds["keras-hub"], seconds[name], strict=True
            )
        ]
        cells.append(f"{statistics.median(ratios):.2f}")
    return "| " + " | ".join(cells) + " |"


def main(argv=None):
    args = parse_args(argv)
    import keras

    causal_lm, swapped, generators = _models(args)
    print(
        f"keras {keras.__version__}, backend {keras.backend.backend()}, "
        f"{type(causal_lm).__name__} of {causal_lm.count_params():,} "
        f"parameters; {args.new_tokens} new tokens after "
        f"{args.prompt_length}, {args.repeats} repetitions, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    names = ["keras-hub", "swapped", *generators]
    print(
        "| backend | batch | "
        + " | ".join(f"{name} tokens/s" for name in names)
        + " | "
        + " | ".join(f"{name}/keras-hub" for name in names[1:])
        + " |"
    )
    print("|---|---|" + "---|" * (2 * len(names) - 1))
    for batch in args.batch_sizes:
        seconds = _measure(args, causal_lm, swapped, generators, batch)
        tokens = batch * args.new_tokens
        print(_row(keras.backend.backend(), batch, tokens, seconds))


if __name__ == "__main__":
    main()
