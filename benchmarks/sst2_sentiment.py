"""SST-2: accuracy, training time and the penalty ablation of Lin et al.

Trains the sentiment classifier of `examples/sentiment_classifier.py`
(BiLSTM + `keras_attention.StructuredSelfAttention`, embeddings from
scratch) on `../shared/data/sst2/train.tsv` (SST-2, Socher et al. 2013, as
GLUE distributes it: phrases, lower-cased), with `dev.tsv` split in half
(seeded) into a validation set (early stopping) and a test set. It trains
once per penalty coefficient (`--penalties`, default 1.0 and 0.0: the
ablation of Lin et al., 2017) and reports held-out accuracy, training time
and how redundant the hops are: the mean off-diagonal entry of `AAᵀ` over
the test set (0: the hops attend to disjoint tokens; 1: all hops put all
their weight on one and the same token). Exits with a message when the
data is absent.

    python benchmarks/sst2_sentiment.py
    python benchmarks/sst2_sentiment.py --minutes 4 --penalties 1.0 0.0

`--minutes` bounds each training run (it stops after the batch that crosses
it). Results go to stdout as a Markdown table and to
`--output/metrics.json`.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA = os.path.join(ROOT, "..", "shared", "data", "sst2")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--data-dir", default=DEFAULT_DATA)
    parser.add_argument(
        "--train-limit",
        type=int,
        default=None,
        help="use only the first N training phrases (smoke runs)",
    )
    parser.add_argument(
        "--penalties",
        type=float,
        nargs="+",
        default=[1.0, 0.0],
        help="penalty coefficients to compare, one training run each",
    )
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument(
        "--minutes",
        type=float,
        default=4.5,
        help="training time budget of each run",
    )
    parser.add_argument("--patience", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--embedding-dim", type=int, default=128)
    parser.add_argument("--lstm-units", type=int, default=64)
    parser.add_argument("--attention-units", type=int, default=64)
    parser.add_argument("--num-hops", type=int, default=4)
    parser.add_argument("--mlp-units", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--max-tokens", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--output", default=os.path.join("runs", "sst2_sentiment")
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


def main(argv=None):
    args = parse_args(argv)
    train_path = os.path.join(args.data_dir, "train.tsv")
    dev_path = os.path.join(args.data_dir, "dev.tsv")
    if not (os.path.exists(train_path) and os.path.exists(dev_path)):
        print(
            f"SST-2 data not found in {args.data_dir} (expected train.tsv "
            "and dev.tsv); nothing to benchmark."
        )
        return None

    from keras_attention.data import read_sentiment_tsv
    from keras_attention.data import splits as splits_lib
    from keras_attention.models import sentiment

    train = splits_lib.SentimentSplit(*read_sentiment_tsv(train_path))
    if args.train_limit:
        train = train.take(range(min(args.train_limit, len(train))))
    dev = splits_lib.SentimentSplit(*read_sentiment_tsv(dev_path))
    validation, test = splits_lib.split_off(dev, (0.5,), seed=args.seed)
    splits = {"train": train, "validation": validation, "test": test}
    print(
        f"train {len(train)}, validation {len(validation)}, "
        f"test {len(test)} phrases"
    )

    results = []
    for penalty in args.penalties:
        run_dir = os.path.join(args.output, f"penalty_{penalty:g}")
        result = sentiment.train_sentiment_classifier(
            splits,
            run_dir,
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
            penalty_coefficient=penalty,
            mlp_units=args.mlp_units,
            dropout=args.dropout,
        )
        metrics, _, _ = sentiment.evaluate_sentiment_classifier(
            result.model, test, batch_size=256
        )
        results.append(
            {
                "penalty_coefficient": penalty,
                "test_accuracy": metrics["accuracy"],
                "best_validation_accuracy": max(result.history["val_accuracy"]),
                "attention_redundancy": metrics["attention_redundancy"],
                "epochs_trained": result.epochs_trained,
                "train_seconds": result.train_seconds,
            }
        )
        result.model.save(os.path.join(run_dir, "model.keras"))
        print(json.dumps(results[-1]), flush=True)

    print()
    print(
        "| penalty | test accuracy | best val. accuracy | "
        "mean off-diag. AAᵀ | epochs | train time |"
    )
    print("|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['penalty_coefficient']:g} | {r['test_accuracy']:.4f} | "
            f"{r['best_validation_accuracy']:.4f} | "
            f"{r['attention_redundancy']:.3f} | {r['epochs_trained']} | "
            f"{r['train_seconds'] / 60:.1f} min |"
        )
    os.makedirs(args.output, exist_ok=True)
    with open(os.path.join(args.output, "metrics.json"), "w") as f:
        json.dump({"args": vars(args), "results": results}, f, indent=2)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
