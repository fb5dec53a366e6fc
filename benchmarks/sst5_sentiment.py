"""SST-5: five-class sentence sentiment with structured self-attention.

Trains the sentiment classifier of `examples/sentiment_classifier.py`
(BiLSTM + `keras_attention.StructuredSelfAttention`, embeddings from
scratch) on `../shared/data/sst5/train.tsv`: the 8,544 training sentences
of SST-5 (Socher et al. 2013; labels 0 very negative .. 4 very positive).
The file is all the data there is here, so it is split with a seeded
permutation (`keras_attention.data.splits.load_sentiment_splits`): 10%
for validation (early stopping, best weights restored), 10% held out as
the test set, which nothing is chosen on, and the rest for training.
Exits with a message when the data is absent.

    python benchmarks/sst5_sentiment.py
    python benchmarks/sst5_sentiment.py --minutes 5 --epochs 8

Anchors, on the official SST-5 test set (2,210 sentences; not the same
sentences as our held-out share): CNN-rand 45.0% (Kim, 2014), tree-LSTM
51.0% (Tai et al., 2015). `--minutes` bounds the training (it stops after
the batch that crosses it). Results go to stdout as a Markdown row and to
`--output/metrics.json`; `--output` also gets `model.keras` and the
example's `attention.png` / `attention.html`.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA = os.path.join(ROOT, "..", "shared", "data", "sst5", "train.tsv")
LABEL_NAMES = (
    "very negative",
    "negative",
    "neutral",
    "positive",
    "very positive",
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--data", default=DEFAULT_DATA, help="SST-5 sentence<TAB>label file")
    add("--validation-fraction", type=float, default=0.1, help="validation")
    add("--test-fraction", type=float, default=0.1, help="held-out test")
    add("--epochs", type=int, default=15, help="most epochs")
    add("--minutes", type=float, default=12.0, help="training time budget")
    add("--patience", type=int, default=2, help="early-stopping patience")
    add("--batch-size", type=int, default=32, help="batch size")
    add("--learning-rate", type=float, default=2e-3, help="Adam")
    add("--embedding-dim", type=int, default=128, help="embedding size")
    add("--lstm-units", type=int, default=64, help="BiLSTM units/direction")
    add("--attention-units", type=int, default=64, help="attention d_a")
    add("--num-hops", type=int, default=4, help="attention hops")
    add("--penalty", type=float, default=0.0, help="redundancy penalty")
    add("--mlp-units", type=int, default=64, help="classifier MLP units")
    add("--dropout", type=float, default=0.5, help="dropout rate")
    add("--max-tokens", type=int, default=20000, help="vocabulary size")
    add("--seed", type=int, default=0, help="seed of splits and weights")
    add(
        "--output",
        default=os.path.join("runs", "sst5_sentiment"),
        help="run directory",
    )
    return parser.parse_args(argv)


def _time_limit(minutes):
    import keras

    class TimeLimit(keras.callbacks.Callback):
        """Stops training after the batch that crosses the budget."""

        def on_train_begin(self, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            if time.perf_counter() - self.start > 60 * minutes:
                self.model.stop_training = True

    return TimeLimit()


def _train(args, splits):
    from keras_attention.models import sentiment

    return sentiment.train_sentiment_classifier(
        splits,
        args.output,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        patience=args.patience,
        seed=args.seed,
        max_tokens=args.max_tokens,
        verbose=2,
        callbacks=[_time_limit(args.minutes)],
        embedding_dim=args.embedding_dim,
        lstm_units=args.lstm_units,
        attention_units=args.attention_units,
        num_hops=args.num_hops,
        penalty_coefficient=args.penalty,
        mlp_units=args.mlp_units,
        dropout=args.dropout,
    )


def main(argv=None):
    args = parse_args(argv)
    if not os.path.exists(args.data):
        print(f"SST-5 data not found at {args.data}; nothing to benchmark.")
        return None

    import numpy as np

    from keras_attention.data import splits as splits_lib
    from keras_attention.models import sentiment

    splits = splits_lib.load_sentiment_splits(
        args.data,
        validation_fraction=args.validation_fraction,
        test_fraction=args.test_fraction,
        seed=args.seed,
        label_names=LABEL_NAMES,
    )
    train, test = splits["train"], splits["test"]
    print(", ".join(f"{k} {len(v)}" for k, v in splits.items()), "sentences")
    result = _train(args, splits)
    metrics, probabilities, attention = sentiment.evaluate_sentiment_classifier(
        result.model, test, 256
    )
    counts = np.bincount(train.labels, minlength=len(LABEL_NAMES))
    summary = {
        "test_accuracy": metrics["accuracy"],
        "test_sentences": len(test),
        # Always answering the most frequent training class.
        "majority_baseline": float(np.mean(test.labels == counts.argmax())),
        "best_validation_accuracy": max(result.history["val_accuracy"]),
        "attention_redundancy": metrics["attention_redundancy"],
        "epochs_trained": result.epochs_trained,
        "train_seconds": round(result.train_seconds, 1),
        "args": vars(args),
    }
    result.model.save(os.path.join(args.output, "model.keras"))
    sentiment.save_attention_report(
        result.model, test, probabilities, attention, args.output
    )
    with open(os.path.join(args.output, "metrics.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps({k: v for k, v in summary.items() if k != "args"}))
    print(
        "| test accuracy | majority class | best validation accuracy | "
        "epochs | training time |\n|---|---|---|---|---|\n"
        f"| {summary['test_accuracy']:.3f} | "
        f"{summary['majority_baseline']:.3f} | "
        f"{summary['best_validation_accuracy']:.3f} | "
        f"{summary['epochs_trained']} | {result.train_seconds / 60:.1f} min |"
    )
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
