"""A small decoder-only language model, with generation compiled end to end.

Trains a causal language model of this package's layers
(`keras_attention.models.build_language_model`: pre-norm blocks of
`SelfAttention` with rotary positions, or `GroupedQueryAttention` with
`--num-key-value-heads` or a `--sliding-window`) on words, then generates
greedily with each block's key/value cache, the whole generation one
`ops.while_loop` under `jax.jit` / `tf.function(jit_compile=True)` (eager
on PyTorch, as keras-hub's) (`keras_attention.models.Generator`).

    python examples/decoder_lm.py
    python examples/decoder_lm.py --data multi30k --epochs 5
    python examples/decoder_lm.py --generate "de feza kozu zabe ="

The default data is synthetic (generated, no download): each line is a
sentence of the translation example's invented language, `=`, and its
translation, so what follows a prompt `SENTENCE =` is known, and the run
measures how often the model's continuation is the translation word for
word (`continuation_accuracy`). `--data multi30k` trains on the English
side of Multi30k, read from `--data-dir` (`train.en`, `val.en`).

Writes to `--output`: `model.keras` (token ids in, next-id logits out;
loads with `keras.saving.load_model` after `import keras_attention`),
`vocabulary.json` (the words of the ids) and `metrics.json` (validation
loss and perplexity; on synthetic data `continuation_accuracy`; a few
generated samples; generation speed). `--generate PROMPT` continues a
prompt with `OUTPUT/model.keras` instead of training: the text stops at
the model's `[end]`, a last line gives the tokens per second, words
not in the vocabulary are named in a warning on stderr (they read as
`[UNK]`), and `--max-new-tokens` is clipped, saying so on stderr, to the
model's context (`--sequence-length` of its training). Errors in the
arguments or the files print one line `error: ...` and exit with status 2.
"""

import argparse
import importlib.util
import json
import os
import runpy
import sys
import time
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# The scripts' shared command line, run from its file: importing
# `keras_attention.models.cli` would load Keras before `--help` answers.
_PACKAGE = os.path.dirname(importlib.util.find_spec("keras_attention").origin)
cli = types.SimpleNamespace(**runpy.run_path(f"{_PACKAGE}/models/cli.py"))

#: Where `--data multi30k` reads by default (`train.en`, `val.en`).
MULTI30K = os.path.normpath(
    os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "..",
        "..",
        "shared",
        "data",
        "multi30k",
    )
)
VOCABULARY = "vocabulary.json"
EPILOG = (
    "A synthetic line is a sentence, '=' and its translation, e.g. 'de feza "
    "kozu zabe = rax nogax ladax lovox'; the run reports how often the model "
    "continues 'SENTENCE =' with the translation word for word "
    "(continuation_accuracy). Then: python examples/decoder_lm.py --generate "
    "'de feza kozu zabe =' continues a prompt with the saved model."
)


def _add_data_arguments(group):
    group.add_argument(
        "--data",
        choices=["synthetic", "multi30k"],
        default="synthetic",
        help="synthetic: SENTENCE = TRANSLATION lines of the translation "
        "example's invented languages (known continuations); multi30k: the "
        "English side of Multi30k from --data-dir",
    )
    group.add_argument(
        "--data-dir",
        default=MULTI30K,
        help="folder of Multi30k's train.en and val.en (read, not copied)",
    )
    group.add_argument(
        "--num-examples",
        type=cli.positive_int,
        default=4000,
        help="synthetic training lines (validation: 500)",
    )
    group.add_argument(
        "--max-tokens",
        type=cli.vocabulary_size,
        default=None,
        help="vocabulary size (None: every training word)",
    )
    group.add_argument(
        "--sequence-length",
        type=cli.positive_int,
        default=64,
        help="ids per training window (the text is one stream of lines)",
    )


def _add_model_arguments(group):
    group.add_argument(
        "--model-dim", type=cli.positive_int, default=64, help="model width"
    )
    group.add_argument(
        "--num-layers", type=cli.positive_int, default=2, help="blocks"
    )
    group.add_argument(
        "--num-heads",
        type=cli.positive_int,
        default=4,
        help="attention heads (a divisor of --model-dim)",
    )
    group.add_argument(
        "--num-key-value-heads",
        type=cli.positive_int,
        default=None,
        help="key/value heads, grouped-query attention (a divisor of "
        "--num-heads) (default: one per head)",
    )
    group.add_argument(
        "--feed-forward-dim",
        type=cli.positive_int,
        default=None,
        help="hidden width of the feed-forward networks (default: 4 x "
        "--model-dim)",
    )
    group.add_argument(
        "--sliding-window",
        type=cli.positive_int,
        default=None,
        help="local blocks see this many latest positions and generate "
        "with a rolling cache of them; every --global-every-th block stays "
        "global (default: every block global)",
    )
    group.add_argument(
        "--global-every",
        type=cli.positive_int,
        default=6,
        help="with --sliding-window: every how many blocks one is global "
        "(Gemma 3: 6)",
    )
    group.add_argument(
        "--layer-types",
        type=_layer_types,
        default=None,
        help="a hybrid model: the blocks' pattern, repeated over "
        "--num-layers, each 'full' (attention) or 'linear' (Gated "
        "DeltaNet, a state cache when generating), e.g. "
        "linear,linear,linear,full as Qwen3.5 (default: every block full)",
    )
    group.add_argument(
        "--dropout", type=cli.fraction, default=0.1, help="dropout rate"
    )


def _layer_types(text):
    """`--layer-types`: comma-separated 'full' and 'linear'."""
    types = [part.strip() for part in text.split(",")]
    if not all(t in ("full", "linear") for t in types):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated 'full' and 'linear', got {text!r}"
        )
    return types


def _add_generation_arguments(group):
    group.add_argument(
        "--cache-dtype",
        choices=["compute", "int8", "float8_e4m3fn"],
        default="compute",
        help="entries of the global blocks' caches: the compute dtype, or "
        "quantized with one scale per position and head (sliding-window "
        "blocks keep a rolling cache and linear blocks their recurrent "
        "state, both in the compute dtype)",
    )
    group.add_argument(
        "--max-new-tokens",
        type=cli.positive_int,
        default=20,
        help="ids generated after a prompt, at most: generation stops at "
        "[end]; with --generate, clipped (said on stderr) to the context "
        "the model was trained on (--sequence-length)",
    )
    group.add_argument(
        "--eval-examples",
        type=cli.positive_int,
        default=100,
        help="validation lines continued from their prompt (synthetic: "
        "SENTENCE =, one compiled generation per length; multi30k: the "
        "first three words)",
    )
    group.add_argument(
        "--generate",
        type=cli.sentence,
        metavar="PROMPT",
        help="continue PROMPT with OUTPUT/model.keras instead of training; "
        "words not in OUTPUT/vocabulary.json read as [UNK], named in a "
        "warning on stderr",
    )


def parse_args(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0], epilog=EPILOG)
    _add_data_arguments(parser.add_argument_group("data"))
    _add_model_arguments(parser.add_argument_group("model"))
    group = parser.add_argument_group("training")
    group.add_argument(
        "--epochs", type=cli.positive_int, default=30, help="epochs"
    )
    group.add_argument(
        "--batch-size", type=cli.positive_int, default=32, help="batch size"
    )
    group.add_argument(
        "--learning-rate",
        type=cli.positive_float,
        default=2e-3,
        help="Adam learning rate",
    )
    group.add_argument(
        "--seed",
        type=cli.seed_int,
        default=0,
        help="seed of the synthetic data and of the weights",
    )
    group.add_argument(
        "--quiet", action="store_true", help="one line per epoch"
    )
    _add_generation_arguments(parser.add_argument_group("generation"))
    parser.add_argument(
        "--output",
        type=cli.run_directory,
        default=os.path.join("runs", "decoder_lm"),
        help="run directory: model.keras, vocabulary.json, metrics.json",
    )
    args = parser.parse_args(argv)
    if args.model_dim % args.num_heads:
        parser.error(
            f"--num-heads {args.num_heads} must divide --model-dim "
            f"{args.model_dim}"
        )
    kv_heads = args.num_key_value_heads
    if kv_heads and args.num_heads % kv_heads:
        parser.error(
            f"--num-key-value-heads {kv_heads} must divide --num-heads "
            f"{args.num_heads}"
        )
    if args.data == "multi30k" and args.generate is None:
        for split in ("train", "val"):
            path = os.path.join(args.data_dir, f"{split}.en")
            if not os.path.isfile(path):
                cli.fail(
                    f"--data multi30k needs {path}, which is missing: point "
                    "--data-dir at the folder of Multi30k's train.en and "
                    "val.en"
                )
    return args


def _generator(model, args):
    from keras_attention.models import Generator

    dtype = None if args.cache_dtype == "compute" else args.cache_dtype
    return Generator(model, cache_dtype=dtype)


def _context(output):
    """The window the saved model was trained on (`--sequence-length` in
    `OUTPUT/metrics.json`), or `None` where that file does not say."""
    try:
        with open(os.path.join(output, "metrics.json")) as f:
            return int(json.load(f)["args"]["sequence_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _new_tokens(args, prompt_length):
    """`--max-new-tokens`, clipped (said on stderr) to the context the
    model was trained on; a prompt that fills it is an error."""
    context = _context(args.output)
    if context is None or prompt_length + args.max_new_tokens <= context:
        return args.max_new_tokens
    if prompt_length >= context:
        cli.fail(
            f"the prompt's {prompt_length} words fill the model's context "
            f"of {context} positions (--sequence-length of its training): "
            "give a shorter --generate prompt"
        )
    clipped = context - prompt_length
    print(
        f"note: --max-new-tokens {args.max_new_tokens} clipped to {clipped}: "
        f"the model's context is {context} positions (--sequence-length of "
        f"its training), {prompt_length} of them the prompt's",
        file=sys.stderr,
    )
    return clipped


def generate(args):
    """Continues `--generate` with the saved model; returns the text."""
    import numpy as np

    import keras_attention
    from keras_attention.data import language

    path = cli.model_path(args.output, "examples/decoder_lm.py")
    with cli.user_errors():
        model = keras_attention.load_model(path)
        with open(os.path.join(args.output, VOCABULARY)) as f:
            vocabulary = json.load(f)
        generator = _generator(model, args)
        prompt = np.asarray([language.to_ids(args.generate, vocabulary)])
    known = set(vocabulary)
    unknown = [w for w in language.words(args.generate) if w not in known]
    if unknown:
        print(
            f"warning: {len(unknown)} words of the prompt are not in the "
            f"model's vocabulary and read as [UNK]: {', '.join(unknown)}",
            file=sys.stderr,
        )
    new_tokens = _new_tokens(args, prompt.shape[1])
    start = time.perf_counter()
    ids = generator.generate(
        prompt, new_tokens, stop_token_ids=[language.END_ID]
    )
    seconds = time.perf_counter() - start
    generated = ids[0, prompt.shape[1] :]
    ended = np.flatnonzero(generated == language.END_ID)
    count = int(ended[0]) + 1 if ended.size else len(generated)
    continuation = language.decode(generated, vocabulary)
    print(f"{args.generate} -> {continuation}")
    print(
        f"{count} tokens in {seconds:.2f} s: {count / seconds:.1f} tokens/s "
        "(with the compilation)"
    )
    return continuation


def _data(args):
    """`(vocabulary, train windows, validation windows, validation lines)`."""
    from keras_attention.data import language

    with cli.user_errors():
        train, validation = language.load_lines(
            args.data, args.data_dir, args.num_examples, args.seed
        )
        vocabulary = language.build_vocabulary(train, args.max_tokens)
        windows = [
            language.windows(
                language.encode(lines, vocabulary), args.sequence_length
            )
            for lines in (train, validation)
        ]
    return vocabulary, windows[0], windows[1], validation


def _train(args, vocabulary, train, validation):
    import keras

    from keras_attention.models import language_model

    keras.utils.set_random_seed(args.seed)
    with cli.user_errors(ValueError):
        model = language_model.build_language_model(
            len(vocabulary),
            model_dim=args.model_dim,
            num_layers=args.num_layers,
            num_heads=args.num_heads,
            num_key_value_heads=args.num_key_value_heads,
            feed_forward_dim=args.feed_forward_dim or 4 * args.model_dim,
            dropout=args.dropout,
            sliding_window=args.sliding_window,
            global_every=args.global_every,
            layer_types=args.layer_types,
        )
    start = time.perf_counter()
    history = language_model.train_language_model(
        model,
        train,
        validation,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        verbose=2 if args.quiet else 1,
    )
    return model, history, time.perf_counter() - start


def _prompts(args, lines, vocabulary):
    """multi30k: the first three words of lines with more than three."""
    import numpy as np

    from keras_attention.data import language

    ids = [language.to_ids(line, vocabulary) for line in lines]
    ids = [i[:3] for i in ids if len(i) > 3][: args.eval_examples]
    return np.asarray(ids, dtype="int32").reshape(-1, 3)


def _samples(args, generator, lines, vocabulary):
    """`(metrics, samples)` of greedy continuations of validation lines."""
    from keras_attention.data import language
    from keras_attention.models import language_model

    start = time.perf_counter()
    if args.data == "synthetic":
        accuracy, generated = language_model.continuation_accuracy(
            generator, lines[: args.eval_examples], vocabulary
        )
        metrics = {"continuation_accuracy": accuracy}
    else:
        prompts = _prompts(args, lines, vocabulary)
        ids = generator.generate(prompts, args.max_new_tokens)
        generated = [(p, i[3:]) for p, i in zip(prompts, ids, strict=True)]
        metrics = {}
    seconds = time.perf_counter() - start
    new_tokens = sum(len(ids) for _, ids in generated)
    metrics["generation_seconds"] = seconds
    metrics["generated_tokens_per_second"] = new_tokens / seconds
    samples = [
        {
            "prompt": language.decode(prompt, vocabulary),
            "continuation": language.decode(ids, vocabulary),
            "new_tokens": len(ids),
        }
        for prompt, ids in generated[:3]
    ]
    return metrics, samples


def main(argv=None):
    args = parse_args(argv)
    if args.generate is not None:
        # Generation needs TensorFlow on its own backend only: elsewhere
        # importing it cost seconds and printed its C++ log lines.
        if cli.keras_backend() == "tensorflow":
            cli.import_tensorflow()
        return generate(args)
    # Training seeds the weights with keras.utils.set_random_seed, which
    # imports TensorFlow (to seed it) whenever it is installed: quietly
    # here, on every backend.
    cli.import_tensorflow()
    cli.make_run_directory(args.output)
    vocabulary, train, validation, lines = _data(args)
    print(
        f"vocabulary {len(vocabulary)}; windows of {args.sequence_length}: "
        f"train {len(train[0])}, validation {len(validation[0])}"
    )
    model, history, seconds = _train(args, vocabulary, train, validation)
    from keras_attention.models import language_model

    val_loss = history["val_loss"][-1]
    generated, samples = _samples(
        args, _generator(model, args), lines, vocabulary
    )
    metrics = {
        "val_loss": val_loss,
        "perplexity": language_model.perplexity(val_loss),
        **generated,
        "train_seconds": seconds,
        "layer_types": [
            "linear" if type(block).__name__ == "GatedDeltaBlock" else "full"
            for block in model.layers
            if block.name.startswith("block_")
        ],
        "samples": samples,
        "args": vars(args),
    }
    model.save(os.path.join(args.output, "model.keras"))
    with open(os.path.join(args.output, VOCABULARY), "w") as f:
        json.dump(vocabulary, f, ensure_ascii=False)
    with open(os.path.join(args.output, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    print(f"wrote {args.output}/model.keras, {VOCABULARY}, metrics.json")
    for sample in samples:
        print(f"  {sample['prompt']} -> {sample['continuation']}")
    for key in ("val_loss", "perplexity", "continuation_accuracy"):
        if key in metrics:
            print(f"{key}: {metrics[key]:.4f}")
    return metrics


if __name__ == "__main__":
    main(sys.argv[1:])
