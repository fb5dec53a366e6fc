"""Neural machine translation with Bahdanau / Luong attention.

Trains a BiGRU encoder and an attention GRU decoder
(`keras_attention.seq2seq`) and shows where the decoder attends. The
default data is synthetic (generated, no download): two invented languages
with a one-to-one lexicon and an adjective-noun swap, so the script can
also measure whether each target word attends to the source word it
translates.

    python examples/translation.py
    python examples/translation.py --train data/train --validation data/val \\
        --test data/test --source de --target en --epochs 10
    python examples/translation.py --translate "ein hund läuft ."
    python examples/translation.py --preset multi30k

`--preset multi30k` trains German → English on Multi30k task 1 from
`../shared/data/multi30k` (`train`, `val`): 1,000 `train` pairs are held
out as the test set (`--test PREFIX` tests on files instead and trains on
all of `train`), `val` chooses the checkpoint, and training runs a fixed
number of epochs, so that two machines train the same model
(`--max-minutes` caps the time instead where wanted; `--help` lists every
setting a preset makes; flags given explicitly override them).
`--preset multi30k-transformer` does the same with the Transformer, under
the dtype policy the hardware runs fast (`--dtype-policy auto`).
BENCHMARKS.md has their figures.

Writes to `--output`: `model.keras` (a `Translator`: token ids in,
`(tokens, scores, alignments)` out; `translate()` takes raw text),
`metrics.json` (`bleu` from sacrebleu on the test set, case-sensitive,
and `bleu_uncased`; on real data `validation_bleu`; what the run was:
the test set and its size, the decoding, the dtype policy, epochs and
steps, the checkpoint's epoch, seconds and steps per second; on synthetic
data `alignment_accuracy`: the share of target words whose strongest
attention weight, with the gold target fed to the decoder, falls on the
source word they translate), `alignment.png` (target × source weights
of a few test sentences) and `alignment.html` (the same, interactive);
with `--model transformer` also `encoder_attention.png` and
`encoder_attention.html`, every encoder block's self-attention per head on
the first test sentence.
A killed run resumes from its last epoch when started again with the
same `--output`. `--distribute` spreads training over several devices or
machines (docs/distributed.md). Errors in the arguments or the files,
and `--translate` before any training, print one line `error: ...` and
exit with status 2.
"""

import importlib.util
import os
import runpy
import sys
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


# The scripts' shared command line, run from its file: importing
# `keras_attention.models.cli` would load Keras before `--help` answers.
_PACKAGE = os.path.dirname(importlib.util.find_spec("keras_attention").origin)
cli = types.SimpleNamespace(**runpy.run_path(f"{_PACKAGE}/models/cli.py"))


def _add_data_arguments(group):
    group.add_argument(
        "--data",
        choices=["synthetic"],
        default="synthetic",
        help="generated task, used unless --train is given",
    )
    group.add_argument(
        "--train",
        help="PREFIX of the training files PREFIX.<source> and "
        "PREFIX.<target>, one sentence a line",
    )
    group.add_argument("--validation", help="PREFIX of the validation files")
    group.add_argument("--test", help="PREFIX of the test files")
    group.add_argument(
        "--hold-out",
        type=cli.positive_int,
        metavar="N",
        help="instead of --test: test on N pairs of --train drawn with "
        "--seed, and train on the rest",
    )
    group.add_argument("--source", default="de", help="source file suffix")
    group.add_argument("--target", default="en", help="target file suffix")
    group.add_argument(
        "--num-examples",
        type=cli.positive_int,
        default=4000,
        help="synthetic training pairs (validation and test: 500 each)",
    )
    group.add_argument(
        "--max-source-tokens",
        type=cli.vocabulary_size,
        default=None,
        help="source vocabulary size (None: every training word)",
    )
    group.add_argument(
        "--max-target-tokens",
        type=cli.vocabulary_size,
        default=None,
        help="target vocabulary size (None: every training word)",
    )


def _add_model_arguments(group):
    group.add_argument(
        "--model",
        choices=["rnn", "transformer"],
        default="rnn",
        help="rnn: BiGRU encoder and attention GRU decoder (Translator); "
        "transformer: pre-norm encoder-decoder Transformer of this "
        "package's attention layers (TransformerTranslator)",
    )
    group.add_argument(
        "--embedding-dim",
        type=cli.positive_int,
        default=32,
        help="size of the word embeddings (the transformer's model width)",
    )
    group.add_argument(
        "--units",
        type=cli.positive_int,
        default=64,
        help="rnn: GRU units (the encoder's BiGRU has this many per direction)",
    )
    group.add_argument(
        "--num-layers",
        type=cli.positive_int,
        default=2,
        help="transformer: blocks in the encoder and in the decoder",
    )
    group.add_argument(
        "--num-heads",
        type=cli.positive_int,
        default=4,
        help="transformer: attention heads (a divisor of --embedding-dim)",
    )
    group.add_argument(
        "--num-key-value-heads",
        type=cli.positive_int,
        default=None,
        help="transformer: key/value heads, grouped-query attention (a "
        "divisor of --num-heads; default: one per head)",
    )
    group.add_argument(
        "--tie-embeddings",
        action="store_true",
        help="transformer: the output layer reuses the target embedding's "
        "table (Press & Wolf, 2017) instead of a Dense layer of its own",
    )
    group.add_argument(
        "--feed-forward-dim",
        type=cli.positive_int,
        default=None,
        help="transformer: hidden width of the feed-forward networks "
        "(default: 4 x --embedding-dim)",
    )
    group.add_argument(
        "--attention",
        choices=[
            "bahdanau",
            "general",
            "concat",
            "bahdanau_monotonic",
            "luong_monotonic",
        ],
        default="bahdanau",
        help="rnn: the decoder's attention: Bahdanau (additive), Luong's "
        "general / concat, or their monotonic forms (Raffel et al. 2017)",
    )
    group.add_argument(
        "--dropout",
        type=cli.fraction,
        default=0.0,
        help="dropout rate on the embeddings and the decoder output",
    )
    group.add_argument(
        "--label-smoothing",
        type=cli.fraction,
        default=0.0,
        help="label smoothing of the cross-entropy (0: none)",
    )
    group.add_argument(
        "--beam-width",
        type=cli.positive_int,
        default=1,
        help="beam search width; 1 decodes greedily",
    )
    group.add_argument(
        "--length-penalty",
        type=cli.non_negative_float,
        default=0.0,
        help="beam search length penalty alpha (0: none)",
    )


#: Where `--preset multi30k` reads Multi30k task 1 (`train.de`, `train.en`,
#: `val.de`, `val.en`).
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
MULTI30K_SOURCE = (
    "https://github.com/multi30k/dataset (data/task1/raw: train and val, "
    "de and en, gunzipped)"
)

#: `--preset NAME` → the defaults it sets (explicit flags override them).
#: multi30k: German → English on Multi30k task 1, tested on 1,000 pairs
#: held out of `train` (`val` chooses the checkpoint); BENCHMARKS.md
#: "Seq2seq translation" shows what each setting brings. Budgets are
#: epochs (the epochs the earlier 30-minute runs reached on an idle
#: AVX512_BF16 machine), never wall time: on a slower machine a run takes
#: longer and trains the same model.
PRESETS = {
    "multi30k": {
        "train": os.path.join(MULTI30K, "train"),
        "validation": os.path.join(MULTI30K, "val"),
        "hold_out": 1000,
        "max_source_tokens": 8000,
        "max_target_tokens": 6000,
        "embedding_dim": 256,
        "units": 256,
        "dropout": 0.2,
        "label_smoothing": 0.0,
        "schedule": "constant",
        "epochs": 10,
        "patience": 3,
        "batch_size": 128,
        "learning_rate": 3e-3,
        "beam_width": 5,
        "length_penalty": 1.0,
        "output": os.path.join("runs", "multi30k"),
    },
    "multi30k-transformer": {
        "train": os.path.join(MULTI30K, "train"),
        "validation": os.path.join(MULTI30K, "val"),
        "hold_out": 1000,
        "max_source_tokens": 8000,
        "max_target_tokens": 6000,
        "model": "transformer",
        "embedding_dim": 256,
        "num_layers": 3,
        "num_heads": 4,
        "feed_forward_dim": 1024,
        "dropout": 0.1,
        "label_smoothing": 0.1,
        "schedule": "cosine",
        "warmup_steps": 200,
        "bucket_by_length": True,
        "dtype_policy": "auto",
        "epochs": 15,
        "patience": 5,
        "batch_size": 128,
        "learning_rate": 2e-3,
        "beam_width": 5,
        "length_penalty": 1.0,
        "output": os.path.join("runs", "multi30k-transformer"),
    },
}


def _check_preset_files(args):
    """A Multi30k preset without the files: one line naming both places."""
    if args.preset not in PRESETS or args.translate is not None:
        return
    for prefix in (args.train, args.validation):
        for suffix in (args.source, args.target):
            path = f"{prefix}.{suffix}"
            if not os.path.isfile(path):
                cli.fail(
                    f"--preset {args.preset} needs {path}, which is missing: "
                    "get "
                    f"Multi30k task 1 from {MULTI30K_SOURCE} and put "
                    f"train.{suffix} and val.{suffix} in "
                    f"{os.path.dirname(path)}, or point --train and "
                    "--validation at them"
                )


def parse_args(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    cli.add_preset_argument(parser, PRESETS)
    _add_data_arguments(parser.add_argument_group("data"))
    _add_model_arguments(parser.add_argument_group("model"))
    group = parser.add_argument_group("training")
    cli.add_training_arguments(
        group,
        epochs=12,
        batch_size=64,
        learning_rate=5e-3,
        seed="seed of the synthetic data and of the weights",
    )
    group.add_argument(
        "--schedule",
        choices=["constant", "cosine", "cosine_time"],
        default="constant",
        help="learning rate: constant, cosine decay over --epochs, or "
        "cosine decay over --max-minutes",
    )
    group.add_argument(
        "--bucket-by-length",
        action="store_true",
        help="batch training pairs of about one length together (less "
        "padding, faster epochs)",
    )
    group.add_argument(
        "--dtype-policy",
        choices=["auto", "float32", "mixed_bfloat16"],
        default="float32",
        help="Keras dtype policy of the model: mixed_bfloat16 computes in "
        "bfloat16 with float32 weights (faster only where the hardware has "
        "bfloat16 units: emulated, it is ~5x slower); auto picks "
        "mixed_bfloat16 there and float32 elsewhere",
    )
    group.add_argument(
        "--warmup-steps",
        type=cli.non_negative_int,
        default=0,
        help="steps of linear learning-rate warm-up before the schedule",
    )
    group.add_argument(
        "--max-minutes",
        type=cli.positive_float,
        help="stop training after the batch that crosses this many minutes "
        "(metrics.json's time_limit_stopped says whether it did; the model "
        "then depends on the machine's speed)",
    )
    cli.add_run_arguments(group)
    parser.add_argument(
        "--output",
        type=cli.run_directory,
        default=os.path.join("runs", "translation"),
        help="run directory: model.keras, metrics.json, alignment.png, "
        "alignment.html, checkpoint.weights.h5, with --model transformer "
        "encoder_attention.png and .html, and on real data truecaser.json",
    )
    parser.add_argument(
        "--translate",
        type=cli.sentence,
        metavar="SENTENCE",
        help="translate SENTENCE with OUTPUT/model.keras instead of training",
    )
    args = cli.parse_with_preset(parser, PRESETS, argv)
    if args.test and args.hold_out:
        given = sys.argv[1:] if argv is None else argv
        if any(a.split("=")[0] == "--hold-out" for a in given):
            parser.error("--test and --hold-out exclude each other")
        args.hold_out = None  # an explicit --test replaces the preset's
    files = [args.train, args.validation, args.test or args.hold_out]
    if any(files) and not all(files):
        parser.error(
            "--train, --validation and --test (or --hold-out) go together"
        )
    if args.schedule == "cosine_time" and not args.max_minutes:
        parser.error(
            "--schedule cosine_time decays over --max-minutes: give it"
        )
    if args.model == "transformer":
        heads, width = args.num_heads, args.embedding_dim
        if width % heads:
            parser.error(
                f"--num-heads {heads} must divide --embedding-dim {width}"
            )
        kv_heads = args.num_key_value_heads
        if kv_heads and heads % kv_heads:
            parser.error(
                f"--num-key-value-heads {kv_heads} must divide "
                f"--num-heads {heads}"
            )
    _check_preset_files(args)
    return args


def load_splits(args):
    """The data of `args`; a bad file is a one-line error."""
    from keras_attention.data import translation as data

    if args.train:
        with cli.user_errors():
            train = data.read_parallel(args.train, args.source, args.target)
            validation = data.read_parallel(
                args.validation, args.source, args.target
            )
            if args.hold_out:
                if args.hold_out >= len(train):
                    cli.fail(
                        f"argument --hold-out: {args.hold_out} of the "
                        f"{len(train)} pairs of {args.train} would leave "
                        "none to train on; hold out fewer"
                    )
                train, test = data.hold_out(train, args.hold_out, args.seed)
            else:
                test = data.read_parallel(args.test, args.source, args.target)
        return {"train": train, "validation": validation, "test": test}
    return {
        "train": data.make_synthetic_translation(args.num_examples, args.seed),
        "validation": data.make_synthetic_translation(500, args.seed + 1),
        "test": data.make_synthetic_translation(500, args.seed + 2),
    }


TRUECASER = "truecaser.json"


def translate(args):
    path = cli.model_path(args.output, "examples/translation.py")
    import keras_attention

    with cli.user_errors():
        model = keras_attention.load_model(path)
    if not hasattr(model, "translate"):
        cli.fail(f"{path} is not a translator (it has no translate method)")
    beam_width = args.beam_width if args.beam_width > 1 else None
    options = {"length_penalty": args.length_penalty} if beam_width else {}
    translation, (words, _, weights) = model.translate(
        args.translate,
        beam_width=beam_width,
        return_alignments=True,
        **options,
    )
    table = os.path.join(args.output, TRUECASER)
    if os.path.isfile(table):
        import json

        from keras_attention.models.truecasing import postprocess

        with open(table, encoding="utf-8") as f:
            truecaser = json.load(f)
        translation = postprocess(words, args.translate, weights, truecaser)
    print(translation)
    return translation


def _sharded_sizes(args):
    """What `distribution.layout_map` splits over the model axis."""
    if args.model == "rnn":
        return (args.embedding_dim,)
    heads = args.num_heads
    return (
        heads,
        args.num_key_value_heads or heads,
        args.embedding_dim,
        args.feed_forward_dim or 4 * args.embedding_dim,
    )


def _train(args, splits, strategy):
    from keras_attention.models import translation

    if args.model == "transformer":
        model_kwargs = {
            "model_dim": args.embedding_dim,
            "num_layers": args.num_layers,
            "num_heads": args.num_heads,
            "num_key_value_heads": args.num_key_value_heads,
            "feed_forward_dim": args.feed_forward_dim or 4 * args.embedding_dim,
            "tie_embeddings": args.tie_embeddings,
        }
    else:
        model_kwargs = {
            "embedding_dim": args.embedding_dim,
            "units": args.units,
            "attention": args.attention,
        }
    return translation.train_translator(
        splits["train"],
        splits["validation"],
        args.output,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        patience=args.patience,
        strategy=strategy,
        seed=args.seed,
        verbose=2 if args.quiet else 1,
        max_source_tokens=args.max_source_tokens,
        max_target_tokens=args.max_target_tokens,
        label_smoothing=args.label_smoothing,
        schedule=args.schedule,
        max_minutes=args.max_minutes,
        architecture=args.model,
        warmup_steps=args.warmup_steps,
        bucket_by_length=args.bucket_by_length,
        **model_kwargs,
        beam_width=args.beam_width,
        length_penalty=args.length_penalty,
        dropout=args.dropout,
    )


def _evaluate(args, model, splits):
    """Test metrics, and BLEU on validation for real data."""
    from keras_attention.models import translation
    from keras_attention.models import truecasing

    truecaser = None
    if args.train:
        # Real text: restore the case the model's tokenizer drops.
        truecaser = truecasing.build_truecaser(splits["train"].targets)
    decoding = {
        "decoding": "beam" if args.beam_width > 1 else "greedy",
        "beam_width": args.beam_width,
        "length_penalty": args.length_penalty,
        "truecaser": truecaser,
    }
    test = translation.evaluate_translator(model, splits["test"], **decoding)
    metrics = {
        "bleu": test["bleu"],
        "bleu_uncased": test["bleu_uncased"],
        "test_examples": test["examples"],
        **{k: v for k, v in decoding.items() if k != "truecaser"},
    }
    if args.train:
        validation = translation.evaluate_translator(
            model, splits["validation"], **decoding
        )
        metrics["validation_bleu"] = validation["bleu"]
        metrics["validation_bleu_uncased"] = validation["bleu_uncased"]
    if "alignment_accuracy" in test:
        metrics["alignment_accuracy"] = test["alignment_accuracy"]
    return test, metrics, truecaser


def _set_dtype_policy(name):
    """Sets Keras's dtype policy; `auto` resolves it. Returns `(name, why)`."""
    import keras

    from keras_attention.models import precision

    if name == "auto":
        name, reason = precision.auto_dtype_policy()
    else:
        reason = "--dtype-policy"
    keras.config.set_dtype_policy(name)
    print(f"dtype policy {name}: {reason}")
    return name, reason


def _run_description(args, model, policy):
    """metrics.json's account of the data, the output length, the precision."""
    if args.test:
        test_set = f"{args.test}.{{{args.source},{args.target}}}"
    elif args.hold_out:
        test_set = (
            f"{args.hold_out} pairs held out of {args.train} (seed {args.seed})"
        )
    else:
        test_set = f"synthetic (seed {args.seed + 2})"
    return {
        "test_set": test_set,
        "tokenizer": "keras_attention.text.tokenize "
        "(lower-cased words and punctuation), the model's "
        "TextVectorization vocabularies of the training pairs; BLEU: "
        "sacrebleu 13a on the detokenized output"
        + (", recased (truecaser.json)" if args.train else ""),
        "max_output_length": getattr(model, "max_output_length", None),
        "dtype_policy": policy[0],
        "dtype_policy_reason": policy[1],
        "max_minutes": args.max_minutes,
    }


def main(argv=None):
    args = parse_args(argv)
    cli.import_tensorflow()
    if args.translate is not None:
        return translate(args)
    cli.make_run_directory(args.output)
    cli.check_resume(args)
    policy = _set_dtype_policy(args.dtype_policy)
    from keras_attention.models import fitting
    from keras_attention.models import translation_views

    with cli.user_errors(ValueError):
        strategy = fitting.strategy_from_flags(
            args.distribute, args.cpu_devices, _sharded_sizes(args)
        )
    splits = load_splits(args)
    print(", ".join(f"{name} {len(split)}" for name, split in splits.items()))
    result = _train(args, splits, strategy)
    test, metrics, truecaser = _evaluate(args, result.model, splits)
    metrics.update(
        {
            **_run_description(args, result.model, policy),
            **fitting.training_metrics(result),
            "best_val_loss": min(
                result.history.get("val_loss", [float("nan")])
            ),
            "args": vars(args),
        }
    )
    if fitting.write_run(args.output, result.model, metrics, strategy):
        translation_views.save_alignment_plot(
            splits["test"].sources,
            test["words"],
            test["alignments"],
            os.path.join(args.output, "alignment.png"),
        )
        written = translation_views.save_encoder_attention(
            result.model,
            splits["test"].sources[0],
            os.path.join(args.output, "encoder_attention.png"),
        )
        if truecaser is not None:
            import json

            with open(os.path.join(args.output, TRUECASER), "w") as f:
                json.dump(truecaser, f, ensure_ascii=False)
        names = ["model.keras", "metrics.json", "alignment.png"]
        names += ["alignment.html"] + [os.path.basename(p) for p in written]
        print(f"wrote {args.output}/" + ", ".join(names))
    examples = zip(splits["test"].sources, test["translations"], strict=True)
    for source, translated in list(examples)[:3]:
        print(f"  {source}  ->  {translated}")
    keys = (
        "bleu",
        "bleu_uncased",
        "validation_bleu",
        "alignment_accuracy",
        "epochs_trained",
        "epochs_restored",
        "checkpoint_epoch",
        "train_seconds",
        "steps_per_second",
        "dtype_policy",
    )
    fitting.print_metrics(metrics, keys)
    return metrics


if __name__ == "__main__":
    main(sys.argv[1:])
