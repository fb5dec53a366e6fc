"""SST-5: five-class sentence sentiment with structured self-attention.

Trains the sentiment classifier of `examples/sentiment_classifier.py`
(BiLSTM + `keras_attention.StructuredSelfAttention`, embeddings from
scratch) on `../shared/data/sst5/train.tsv`: the 8,544 training sentences
of SST-5 (Socher et al. 2013; labels 0 very negative .. 4 very positive).
The file is all the data there is here, so it is split with a seeded
permutation (`keras_attention.data.splits.load_sentiment_splits`): 10%
for validation (early stopping, best weights restored), 10% held out as
the test set, which nothing is chosen on, and the rest for training.
It trains one model per learning rate and penalty coefficient
(`--learning-rates`, `--penalties`), keeps the one with the best
validation accuracy (of its restored best-validation-loss weights) and
only then evaluates that one on the test set. Exits with a message when
the data is absent.

    python benchmarks/sst5_sentiment.py
    python benchmarks/sst5_sentiment.py --minutes 2 --learning-rates 1e-3

Anchors, on the official SST-5 test set (2,210 sentences; not the same
sentences as our held-out share): CNN-rand 45.0% (Kim, 2014), tree-LSTM
51.0% (Tai et al., 2015). `--minutes` bounds each training run (it stops
after the batch that crosses it). Results go to stdout as a Markdown row and to
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
    add("--minutes", type=float, default=3.0, help="budget of each run")
    add("--patience", type=int, default=2, help="early-stopping patience")
    add("--batch-size", type=int, default=32, help="batch size")
    add(
        "--learning-rates",
        type=float,
        nargs="+",
        default=[2e-3, 1e-3, 5e-4],
        help="Adam learning rates to try",
    )
    add("--embedding-dim", type=int, default=128, help="embedding size")
    add("--lstm-units", type=int, default=64, help="BiLSTM units/direction")
    add("--attention-units", type=int, default=64, help="attention d_a")
    add("--num-hops", type=int, default=4, help="attention hops")
    add(
        "--penalties",
        type=float,
        nargs="+",
        default=[0.0, 1.0],
        help="redundancy penalty coefficients to try",
    )
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


def _train(args, splits, run_dir, learning_rate, penalty):
    from keras_attention.models import sentiment

    return sentiment.train_sentiment_classifier(
        splits,
        run_dir,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=learning_rate,
        patience=args.patience,
        seed=args.seed,
        max_tokens=args.max_tokens,
        verbose=2,
        callbacks=[_time_limit(args.minutes)],
        embedding_dim=args.embedding_dim,
        lstm_units=args.lstm_units,
        attention_units=args.attention_units,
        num_hops=args.num_hops,
        penalty_coefficient=penalty,
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
    runs = []
    for learning_rate in args.learning_rates:
        for penalty in args.penalties:
            run_dir = os.path.join(
                args.output, f"lr_{learning_rate:g}_penalty_{penalty:g}"
            )
            result = _train(args, splits, run_dir, learning_rate, penalty)
            validation, _, _ = sentiment.evaluate_sentiment_classifier(
                result.model, splits["validation"], 256
            )
            runs.append(
                {
                    "learning_rate": learning_rate,
                    "penalty": penalty,
                    "validation_accuracy": validation["accuracy"],
                    "epochs_trained": result.epochs_trained,
                    "train_seconds": round(result.train_seconds, 1),
                    "model": result.model,
                }
            )
            print(
                json.dumps({k: v for k, v in runs[-1].items() if k != "model"})
            )
    best = max(runs, key=lambda run: run["validation_accuracy"])
    # The test set is used once, on the model chosen on validation.
    metrics, probabilities, attention = sentiment.evaluate_sentiment_classifier(
        best["model"], test, 256
    )
    counts = np.bincount(train.labels, minlength=len(LABEL_NAMES))
    summary = {
        "test_accuracy": metrics["accuracy"],
        "test_sentences": len(test),
        # Always answering the most frequent training class.
        "majority_baseline": float(np.mean(test.labels == counts.argmax())),
        "chosen": {k: v for k, v in best.items() if k != "model"},
        "attention_redundancy": metrics["attention_redundancy"],
        "runs": [{k: v for k, v in r.items() if k != "model"} for r in runs],
        "total_train_seconds": round(sum(r["train_seconds"] for r in runs), 1),
        "args": vars(args),
    }
    best["model"].save(os.path.join(args.output, "model.keras"))
    sentiment.save_attention_report(
        best["model"], test, probabilities, attention, args.output
    )
    with open(os.path.join(args.output, "metrics.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print("| learning rate | penalty | validation accuracy | epochs | time |")
    print("|---|---|---|---|---|")
    for r in runs:
        print(
            f"| {r['learning_rate']:g} | {r['penalty']:g} | "
            f"{r['validation_accuracy']:.3f} | {r['epochs_trained']} | "
            f"{r['train_seconds'] / 60:.1f} min |"
        )
    print(
        f"chosen: learning rate {best['learning_rate']:g}, penalty "
        f"{best['penalty']:g}; test accuracy {summary['test_accuracy']:.3f} "
        f"on {len(test)} sentences (majority class "
        f"{summary['majority_baseline']:.3f}), attention redundancy "
        f"{summary['attention_redundancy']:.3f}"
    )
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
