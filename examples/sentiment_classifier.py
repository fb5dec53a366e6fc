"""Sentiment classification with structured self-attention (Lin et al.).

Trains a BiLSTM + `keras_attention.StructuredSelfAttention` classifier on
raw sentences and shows where its attention hops look. The default data is
synthetic (generated, no download): the label is the majority vote of a few
sentiment phrases ("good", "not bad", ...) hidden among neutral filler
words, so the script can also measure how much of the attention lands on
those phrases.

    python examples/sentiment_classifier.py
    python examples/sentiment_classifier.py --data train.tsv \\
        --validation dev.tsv --test test.tsv --epochs 5 --output runs/tsv

Writes to `--output`: `model.keras` (raw strings in; outputs
`probabilities`, `embedding`, `attention`), `metrics.json`
(`test_accuracy`, and on synthetic data `attention_on_cues`),
`attention.png` (hops × tokens for a few test sentences) and
`attention.html`. A killed run resumes from its last epoch when started
again with the same `--output`. `--distribute` spreads training over
several devices or machines (docs/distributed.md). The vectorizer runs in
the input pipeline during training; `model.keras` is the raw-string model.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras_attention.data import splits as splits_lib  # noqa: E402
from keras_attention.models import fitting  # noqa: E402
from keras_attention.models import sentiment  # noqa: E402


def _add_data_arguments(data):
    data.add_argument(
        "--data",
        default="synthetic",
        help="'synthetic', 'imdb', 'sst2' (TensorFlow Datasets) or the path "
        "of a TSV file with header sentence<TAB>label",
    )
    data.add_argument("--validation", help="TSV path of validation data")
    data.add_argument("--test", help="TSV path of test data")
    data.add_argument(
        "--num-examples",
        type=int,
        default=splits_lib.SYNTHETIC_EXAMPLES,
        help="synthetic sentences to generate (before the split)",
    )
    data.add_argument(
        "--validation-fraction",
        type=float,
        default=splits_lib.VALIDATION_FRACTION,
        help="share of the training data held out for validation when "
        "--validation is not given",
    )
    data.add_argument(
        "--test-fraction",
        type=float,
        default=splits_lib.TEST_FRACTION,
        help="share of the training data held out for testing when there "
        "is no test set",
    )
    data.add_argument("--data-dir", help="TensorFlow Datasets directory")
    data.add_argument(
        "--max-tokens", type=int, default=20000, help="vocabulary size"
    )
    data.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="truncate sentences to this many tokens",
    )


def _add_model_arguments(model):
    # The defaults are tuned on the synthetic task (2 cores, ~1 minute):
    # a small BiLSTM with recurrent dropout keeps each hidden state about
    # its own word, so the hops attend to the cue phrases themselves.
    model.add_argument("--embedding-dim", type=int, default=64)
    model.add_argument("--lstm-units", type=int, default=16)
    model.add_argument("--attention-units", type=int, default=32)
    model.add_argument("--num-hops", type=int, default=2)
    model.add_argument(
        "--penalty",
        type=float,
        default=0.0,
        help="coefficient of the redundancy penalty ||AA^T - I||_F^2; 0 by "
        "default because on the synthetic task a sentence may hold a "
        "single cue, which disjoint hops cannot all attend to (Lin et al. "
        "use 1.0 on long reviews)",
    )
    model.add_argument("--mlp-units", type=int, default=32)
    model.add_argument("--dropout", type=float, default=0.2)
    model.add_argument("--recurrent-dropout", type=float, default=0.5)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _add_data_arguments(parser.add_argument_group("data"))
    _add_model_arguments(parser.add_argument_group("model"))
    fit = parser.add_argument_group("training")
    fit.add_argument("--epochs", type=int, default=10)
    fit.add_argument("--batch-size", type=int, default=32)
    fit.add_argument("--learning-rate", type=float, default=3e-3)
    fit.add_argument(
        "--patience",
        type=int,
        default=3,
        help="epochs without a lower validation loss before stopping",
    )
    fit.add_argument("--seed", type=int, default=0)
    fitting.add_run_arguments(fit)
    parser.add_argument(
        "--output", default=os.path.join("runs", "sentiment"), help="run dir"
    )
    return parser.parse_args(argv)


def _train(args, splits, strategy):
    return sentiment.train_sentiment_classifier(
        splits,
        args.output,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        patience=args.patience,
        strategy=strategy,
        seed=args.seed,
        max_tokens=args.max_tokens,
        max_length=args.max_length,
        verbose=2 if args.quiet else 1,
        embedding_dim=args.embedding_dim,
        lstm_units=args.lstm_units,
        attention_units=args.attention_units,
        num_hops=args.num_hops,
        penalty_coefficient=args.penalty,
        mlp_units=args.mlp_units,
        dropout=args.dropout,
        recurrent_dropout=args.recurrent_dropout,
    )


def main(argv=None):
    args = parse_args(argv)
    strategy = fitting.strategy_from_flags(args.distribute, args.cpu_devices)
    splits = splits_lib.load_sentiment_splits(
        args.data,
        validation=args.validation,
        test=args.test,
        num_examples=args.num_examples,
        validation_fraction=args.validation_fraction,
        test_fraction=args.test_fraction,
        seed=args.seed,
        data_dir=args.data_dir,
    )
    print(
        "examples: "
        + ", ".join(f"{name} {len(split)}" for name, split in splits.items())
    )
    result = _train(args, splits, strategy)
    test, probabilities, attention = sentiment.evaluate_sentiment_classifier(
        result.model, splits["test"]
    )
    metrics = {
        "test_accuracy": test["accuracy"],
        "test_examples": test["examples"],
        "attention_redundancy": test["attention_redundancy"],
        "best_validation_accuracy": max(
            result.history.get("val_accuracy", [float("nan")])
        ),
        "epochs_trained": result.epochs_trained,
        "train_seconds": round(result.train_seconds, 1),
        "args": vars(args),
    }
    if "attention_on_cues" in test:
        metrics["attention_on_cues"] = test["attention_on_cues"]
    if fitting.write_run(args.output, result.model, metrics, strategy):
        sentiment.save_attention_report(
            result.model, splits["test"], probabilities, attention, args.output
        )
        print(f"wrote {args.output}/model.keras, metrics.json, attention.*")
    fitting.print_metrics(
        metrics,
        (
            "test_accuracy",
            "attention_on_cues",
            "attention_redundancy",
            "epochs_trained",
            "train_seconds",
        ),
    )
    return metrics


if __name__ == "__main__":
    main(sys.argv[1:])
