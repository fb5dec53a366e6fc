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

Writes to `--output`: `model.keras` (a `Translator`: token ids in,
`(tokens, scores, alignments)` out; `translate()` takes raw text),
`metrics.json` (`bleu` from sacrebleu on the test set, and on synthetic
data `alignment_accuracy`: the share of target words whose strongest
attention weight, with the gold target fed to the decoder, falls on the
source word they translate) and `alignment.png` (target × source weights
of a few test sentences). A killed run resumes from its last epoch when
started again with the same `--output`. `--distribute` spreads training
over several devices or machines (docs/distributed.md). Errors in the
arguments or the files, and `--translate` before any training, print one
line `error: ...` and exit with status 2.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _cli  # noqa: E402


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
    group.add_argument("--source", default="de", help="source file suffix")
    group.add_argument("--target", default="en", help="target file suffix")
    group.add_argument(
        "--num-examples",
        type=_cli.positive_int,
        default=4000,
        help="synthetic training pairs (validation and test: 500 each)",
    )
    group.add_argument(
        "--max-source-tokens",
        type=_cli.positive_int,
        default=None,
        help="source vocabulary size (None: every training word)",
    )
    group.add_argument(
        "--max-target-tokens",
        type=_cli.positive_int,
        default=None,
        help="target vocabulary size (None: every training word)",
    )


def _add_model_arguments(group):
    group.add_argument(
        "--embedding-dim",
        type=_cli.positive_int,
        default=32,
        help="size of the word embeddings",
    )
    group.add_argument(
        "--units",
        type=_cli.positive_int,
        default=64,
        help="GRU units (the encoder's BiGRU has this many per direction)",
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
        help="the decoder's attention: Bahdanau (additive), Luong's "
        "general / concat, or their monotonic forms (Raffel et al. 2017)",
    )
    group.add_argument(
        "--dropout",
        type=_cli.fraction,
        default=0.0,
        help="dropout rate on the embeddings and the decoder output",
    )
    group.add_argument(
        "--beam-width",
        type=_cli.positive_int,
        default=1,
        help="beam search width; 1 decodes greedily",
    )
    group.add_argument(
        "--length-penalty",
        type=float,
        default=0.0,
        help="beam search length penalty alpha (0: none)",
    )


def parse_args(argv=None):
    parser = _cli.Parser(description=__doc__.split("\n\n")[0])
    _add_data_arguments(parser.add_argument_group("data"))
    _add_model_arguments(parser.add_argument_group("model"))
    group = parser.add_argument_group("training")
    _cli.add_training_arguments(
        group,
        epochs=12,
        batch_size=64,
        learning_rate=5e-3,
        seed="seed of the synthetic data and of the weights",
    )
    _cli.add_run_arguments(group)
    parser.add_argument(
        "--output",
        default=os.path.join("runs", "translation"),
        help="run directory: model.keras, metrics.json, alignment.png, "
        "checkpoint.weights.h5",
    )
    parser.add_argument(
        "--translate",
        metavar="SENTENCE",
        help="translate SENTENCE with OUTPUT/model.keras instead of training",
    )
    args = parser.parse_args(argv)
    files = [args.train, args.validation, args.test]
    if any(files) and not all(files):
        parser.error("--train, --validation and --test go together")
    return args


def load_splits(args):
    """The data of `args`; a bad file is a one-line error."""
    from keras_attention.data import translation as data

    if args.train:
        with _cli.user_errors():
            return {
                name: data.read_parallel(prefix, args.source, args.target)
                for name, prefix in (
                    ("train", args.train),
                    ("validation", args.validation),
                    ("test", args.test),
                )
            }
    return {
        "train": data.make_synthetic_translation(args.num_examples, args.seed),
        "validation": data.make_synthetic_translation(500, args.seed + 1),
        "test": data.make_synthetic_translation(500, args.seed + 2),
    }


def translate(args):
    path = _cli.model_path(args.output, "examples/translation.py")
    import keras_attention

    with _cli.user_errors():
        model = keras_attention.load_model(path)
    if not hasattr(model, "translate"):
        _cli.fail(f"{path} is not a translator (it has no translate method)")
    beam_width = args.beam_width if args.beam_width > 1 else None
    translation = model.translate(args.translate, beam_width=beam_width)
    print(translation)
    return translation


def _train(args, splits, strategy):
    from keras_attention.models import translation

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
        embedding_dim=args.embedding_dim,
        units=args.units,
        attention=args.attention,
        beam_width=args.beam_width,
        length_penalty=args.length_penalty,
        dropout=args.dropout,
    )


def main(argv=None):
    args = parse_args(argv)
    if args.translate:
        return translate(args)
    from keras_attention.models import fitting
    from keras_attention.models import translation

    strategy = fitting.strategy_from_flags(args.distribute, args.cpu_devices)
    splits = load_splits(args)
    print(", ".join(f"{name} {len(split)}" for name, split in splits.items()))
    result = _train(args, splits, strategy)
    test = translation.evaluate_translator(result.model, splits["test"])
    metrics = {
        "bleu": test["bleu"],
        "test_examples": test["examples"],
        "beam_width": args.beam_width,
        "epochs_trained": result.epochs_trained,
        "train_seconds": round(result.train_seconds, 1),
        "best_val_loss": min(result.history.get("val_loss", [float("nan")])),
        "args": vars(args),
    }
    if "alignment_accuracy" in test:
        metrics["alignment_accuracy"] = test["alignment_accuracy"]
    if fitting.write_run(args.output, result.model, metrics, strategy):
        translation.save_alignment_plot(
            splits["test"].sources,
            test["words"],
            test["alignments"],
            os.path.join(args.output, "alignment.png"),
        )
        print(f"wrote {args.output}/model.keras, metrics.json, alignment.png")
    for i in range(3):
        print(f"  {splits['test'].sources[i]}  ->  {test['translations'][i]}")
    keys = ("bleu", "alignment_accuracy", "epochs_trained", "train_seconds")
    fitting.print_metrics(metrics, keys)
    return metrics


if __name__ == "__main__":
    main(sys.argv[1:])
