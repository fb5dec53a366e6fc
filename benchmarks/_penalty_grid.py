"""The penalty × seed grid that the SST-2 and SST-5 benchmarks share.

Each benchmark builds its splits and its training function; this module
runs one training per penalty coefficient and seed, scores validation and
test, prints the runs, the mean ± standard deviation over the seeds and
the accuracy of the seeds' ensemble (their class probabilities averaged)
as Markdown, and writes `--output/metrics.json`.
"""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def add_training_arguments(add, preset):
    """The training and size flags both benchmarks take, their defaults
    those of the sentiment example's `--preset` (`"sst2"` or `"sst5"`), so
    that the benchmark measures what the preset trains; `add` is the
    parser's `add_argument`."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import sentiment_classifier  # parses before importing TensorFlow

    # The example's own defaults, under those its preset sets.
    defaults = {
        **vars(sentiment_classifier.parse_args([])),
        **sentiment_classifier.PRESETS[preset],
    }
    flags = (
        ("epochs", int, "most epochs"),
        ("patience", int, "early-stopping patience"),
        ("batch_size", int, "batch size"),
        ("learning_rate", float, "Adam"),
        ("embedding_dim", int, "embedding size"),
        ("lstm_units", int, "BiLSTM units/direction"),
        ("attention_units", int, "attention d_a"),
        ("num_hops", int, "attention hops"),
        ("mlp_units", int, "classifier MLP units"),
        ("dropout", float, "dropout rate"),
        ("recurrent_dropout", float, "LSTM state"),
        ("spatial_dropout", float, "SpatialDropout1D on the embeddings"),
    )
    for dest, kind, text in flags:
        flag = "--" + dest.replace("_", "-")
        add(flag, type=kind, default=defaults[dest], help=text)
    add("--max-tokens", type=int, default=20000, help="vocabulary size")


def model_kwargs(args, penalty):
    """The classifier's size arguments from `args`, with `penalty`."""
    return {
        "embedding_dim": args.embedding_dim,
        "lstm_units": args.lstm_units,
        "attention_units": args.attention_units,
        "num_hops": args.num_hops,
        "penalty_coefficient": penalty,
        "mlp_units": args.mlp_units,
        "dropout": args.dropout,
        "recurrent_dropout": args.recurrent_dropout,
        "spatial_dropout": args.spatial_dropout,
    }


def ensemble_accuracy(probabilities, labels):
    """Accuracy of the mean of several models' class probabilities.

    Args:
        probabilities: One `(examples, classes)` array per model.
        labels: The `(examples,)` true classes.
    """
    import numpy as np

    mean = np.mean(np.stack(probabilities), axis=0)
    return float(np.mean(mean.argmax(axis=-1) == np.asarray(labels)))


def summary(runs, probabilities, splits):
    """Mean and standard deviation over the seeds, one row per penalty,
    and the accuracy of the ensemble of its seeds on validation and test
    (`probabilities`: per run, in the order of `runs`, a dict of the
    `"validation"` and `"test"` class probabilities of `splits`)."""
    import numpy as np

    rows = []
    for penalty in sorted({r["penalty"] for r in runs}):
        index = [i for i, r in enumerate(runs) if r["penalty"] == penalty]
        chosen = [runs[i] for i in index]
        row = {"penalty": penalty, "runs": len(chosen)}
        for name in ("validation", "test"):
            row[f"ensemble_{name}_accuracy"] = ensemble_accuracy(
                [probabilities[i][name] for i in index], splits[name].labels
            )
        for key in ("test_accuracy", "attention_redundancy"):
            values = np.array([r[key] for r in chosen])
            row[key] = float(values.mean())
            row[key + "_std"] = (
                float(values.std(ddof=1)) if len(chosen) > 1 else 0.0
            )
        rows.append(row)
    return rows


def _run(train, splits, run_dir, penalty, seed):
    from keras_attention.models import sentiment

    result, seconds = train(run_dir, penalty, seed)
    validation, validation_probabilities, _ = (
        sentiment.evaluate_sentiment_classifier(
            result.model, splits["validation"], 256
        )
    )
    test, test_probabilities, _ = sentiment.evaluate_sentiment_classifier(
        result.model, splits["test"], 256
    )
    probabilities = {
        "validation": validation_probabilities,
        "test": test_probabilities,
    }
    return probabilities, {
        "penalty": penalty,
        "seed": seed,
        "validation_accuracy": validation["accuracy"],
        "test_accuracy": test["accuracy"],
        "attention_redundancy": test["attention_redundancy"],
        "epochs_trained": result.epochs_trained,
        "train_seconds": round(seconds, 1),
        "load_average": os.getloadavg()[0],
    }


def _print_tables(runs, rows):
    print(
        "| penalty | seed | validation | test | mean off-diag. AAᵀ | epochs "
        "| time |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in runs:
        print(
            f"| {r['penalty']:g} | {r['seed']} | "
            f"{r['validation_accuracy']:.3f} | "
            f"{r['test_accuracy']:.3f} | {r['attention_redundancy']:.3f} | "
            f"{r['epochs_trained']} | {r['train_seconds'] / 60:.1f} min |"
        )
    print(
        "| penalty | runs | test accuracy (mean ± sd) | "
        "off-diag. AAᵀ (mean ± sd) | ensemble validation | ensemble test |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['penalty']:g} | {r['runs']} | {r['test_accuracy']:.3f} ± "
            f"{r['test_accuracy_std']:.3f} | {r['attention_redundancy']:.3f} ± "
            f"{r['attention_redundancy_std']:.3f} | "
            f"{r['ensemble_validation_accuracy']:.3f} | "
            f"{r['ensemble_test_accuracy']:.3f} |"
        )


def run_grid(args, splits, train):
    """Trains with each of `args.penalties` × `args.seeds`; reports them.

    Args:
        args: The benchmark's parsed flags (`penalties`, `seeds`, `output`).
        splits: `{"train", "validation", "test"}` `SentimentSplit`s.
        train: `train(run_dir, penalty, seed) -> (FitResult, seconds)`.

    Returns:
        `{"runs": [...], "summary": [...]}`, also in `metrics.json`.
    """
    runs = []
    probabilities = []
    for penalty in args.penalties:
        for seed in args.seeds:
            run_dir = os.path.join(
                args.output, f"penalty_{penalty:g}_seed_{seed}"
            )
            run_probabilities, run = _run(train, splits, run_dir, penalty, seed)
            runs.append(run)
            probabilities.append(run_probabilities)
            print(json.dumps(runs[-1]), flush=True)
    rows = summary(runs, probabilities, splits)
    _print_tables(runs, rows)
    os.makedirs(args.output, exist_ok=True)
    with open(os.path.join(args.output, "metrics.json"), "w") as f:
        json.dump(
            {"args": vars(args), "runs": runs, "summary": rows}, f, indent=2
        )
    return {"runs": runs, "summary": rows}
