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
over several devices or machines (docs/distributed.md).
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras_attention.data import translation as data  # noqa: E402
from keras_attention.models import fitting  # noqa: E402
from keras_attention.models import translation  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    group = parser.add_argument_group("data")
    group.add_argument(
        "--data",
        choices=["synthetic"],
        default="synthetic",
        help="generated task, used unless --train is given",
    )
    group.add_argument("--train", help="PREFIX of PREFIX.<source>/<target>")
    group.add_argument("--validation", help="PREFIX of the validation files")
    group.add_argument("--test", help="PREFIX of the test files")
    group.add_argument("--source", default="de", help="source file suffix")
    group.add_argument("--target", default="en", help="target file suffix")
    group.add_argument(
        "--num-examples",
        type=int,
        default=4000,
        help="synthetic training pairs (validation and test: 500 each)",
    )
    group.add_argument("--max-source-tokens", type=int, default=None)
    group.add_argument("--max-target-tokens", type=int, default=None)
    group = parser.add_argument_group("model")
    group.add_argument("--embedding-dim", type=int, default=32)
    group.add_argument("--units", type=int, default=64)
    group.add_argument(
        "--attention",
        choices=["bahdanau", "general", "concat"],
        default="bahdanau",
    )
    group.add_argument("--dropout", type=float, default=0.0)
    group.add_argument(
        "--beam-width", type=int, default=1, help="1 decodes greedily"
    )
    group.add_argument("--length-penalty", type=float, default=0.0)
    group = parser.add_argument_group("training")
    group.add_argument("--epochs", type=int, default=12)
    group.add_argument("--batch-size", type=int, default=64)
    group.add_argument("--learning-rate", type=float, default=5e-3)
    group.add_argument("--patience", type=int, default=3)
    group.add_argument("--seed", type=int, default=0)
    fitting.add_run_arguments(group)
    parser.add_argument(
        "--output",
        default=os.path.join("runs", "translation"),
        help="run directory",
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
    if args.train:
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
    import keras

    path = os.path.join(args.output, "model.keras")
    model = keras.saving.load_model(path)
    beam_width = args.beam_width if args.beam_width > 1 else None
    print(model.translate([args.translate], beam_width=beam_width)[0])


def _train(args, splits, strategy):
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
