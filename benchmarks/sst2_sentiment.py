"""SST-2 sentences: accuracy, training time and Lin et al.'s penalty ablation.

Trains the sentiment classifier of `examples/sentiment_classifier.py`
(BiLSTM + `keras_attention.StructuredSelfAttention`, embeddings from
scratch) with the settings of its `--preset sst2` on the sentence-level
split of `keras_attention.data.sst.load_sst_splits("sst2")`: whole
sentences of `../shared/data/sst5/train.tsv` are held out (10% test, 10%
validation, seeded; neutral ones dropped, 0-1 negative, 3-4 positive) and
every phrase of `sst2/train.tsv` and `sst2/dev.tsv` (SST-2 as GLUE
distributes it) that occurs inside a held-out sentence is removed from
training, which keeps the other phrases and the training sentences
(`--no-phrases`: the sentences only).

It trains one model per penalty coefficient and seed (`--penalties`,
`--seeds`: the ablation of Lin et al., 2017), with every other setting
fixed beforehand, and reports each run's sentence-level test accuracy,
training time and the redundancy of its hops (mean off-diagonal entry of
`AAᵀ` over the test sentences: 0 when the hops attend to disjoint tokens,
1 when all put all their weight on one token), then the mean and standard
deviation over the seeds. Exits with a message when the data is absent.

    python benchmarks/sst2_sentiment.py
    python benchmarks/sst2_sentiment.py --penalties 1 0 --seeds 0 1

Anchors, on the official SST-2 test sentences (not ours): CNN-rand 82.7%,
CNN-non-static with word2vec 87.2% (Kim, 2014). Results go to stdout as
Markdown and to `--output/metrics.json`.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA = os.path.join(ROOT, "..", "shared", "data")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--data-root", default=DEFAULT_DATA, help="folder of sst5/, sst2/")
    add("--split-seed", type=int, default=0, help="seed of the split")
    add("--seeds", type=int, nargs="+", default=[0], help="weights")
    add(
        "--penalties",
        type=float,
        nargs="+",
        default=[0.0, 1.0],
        help="redundancy penalty coefficients to compare",
    )
    add(
        "--phrases",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="train on the SST-2 phrases outside the held-out sentences",
    )
    add("--epochs", type=int, default=2, help="most epochs")
    add("--patience", type=int, default=1, help="early-stopping patience")
    add("--batch-size", type=int, default=64, help="batch size")
    add("--learning-rate", type=float, default=1e-3, help="Adam")
    add("--embedding-dim", type=int, default=128, help="embedding size")
    add("--lstm-units", type=int, default=64, help="BiLSTM units/direction")
    add("--attention-units", type=int, default=64, help="attention d_a")
    add("--num-hops", type=int, default=4, help="attention hops")
    add("--mlp-units", type=int, default=64, help="classifier MLP units")
    add("--dropout", type=float, default=0.5, help="dropout rate")
    add("--recurrent-dropout", type=float, default=0.5, help="LSTM state")
    add("--max-tokens", type=int, default=20000, help="vocabulary size")
    add(
        "--output",
        default=os.path.join("runs", "sst2_sentiment"),
        help="run directory",
    )
    return parser.parse_args(argv)


def _model_kwargs(args, penalty):
    return {
        "embedding_dim": args.embedding_dim,
        "lstm_units": args.lstm_units,
        "attention_units": args.attention_units,
        "num_hops": args.num_hops,
        "penalty_coefficient": penalty,
        "mlp_units": args.mlp_units,
        "dropout": args.dropout,
        "recurrent_dropout": args.recurrent_dropout,
    }


def _train(args, splits, run_dir, penalty, seed):
    from keras_attention.models import sentiment

    return sentiment.train_sentiment_classifier(
        splits,
        run_dir,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        patience=args.patience,
        seed=seed,
        max_tokens=args.max_tokens,
        verbose=2,
        **_model_kwargs(args, penalty),
    )


def _summary(runs):
    import numpy as np

    rows = []
    for penalty in sorted({r["penalty"] for r in runs}):
        chosen = [r for r in runs if r["penalty"] == penalty]
        row = {"penalty": penalty, "runs": len(chosen)}
        for key in ("test_accuracy", "attention_redundancy"):
            values = np.array([r[key] for r in chosen])
            row[key] = float(values.mean())
            row[key + "_std"] = (
                float(values.std(ddof=1)) if len(chosen) > 1 else 0.0
            )
        rows.append(row)
    return rows


def main(argv=None):
    args = parse_args(argv)
    from keras_attention.data import sst

    missing = sst.missing_files(args.data_root)
    if missing:
        print(
            f"SST data not found: {', '.join(missing)}; nothing to benchmark."
        )
        return None
    from keras_attention.models import sentiment

    splits = sst.load_sst_splits(
        "sst2", args.data_root, seed=args.split_seed, phrases=args.phrases
    )
    print(
        ", ".join(f"{k} {len(v)}" for k, v in splits.items()),
        "sentences or phrases",
    )
    runs = []
    for penalty in args.penalties:
        for seed in args.seeds:
            run_dir = os.path.join(
                args.output, f"penalty_{penalty:g}_seed_{seed}"
            )
            result = _train(args, splits, run_dir, penalty, seed)
            seconds = result.train_seconds
            validation, _, _ = sentiment.evaluate_sentiment_classifier(
                result.model, splits["validation"], 256
            )
            test, _, _ = sentiment.evaluate_sentiment_classifier(
                result.model, splits["test"], 256
            )
            runs.append(
                {
                    "penalty": penalty,
                    "seed": seed,
                    "validation_accuracy": validation["accuracy"],
                    "test_accuracy": test["accuracy"],
                    "attention_redundancy": test["attention_redundancy"],
                    "epochs_trained": result.epochs_trained,
                    "train_seconds": round(seconds, 1),
                    "load_average": os.getloadavg()[0],
                }
            )
            print(json.dumps(runs[-1]), flush=True)
    summary = _summary(runs)
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
        "off-diag. AAᵀ (mean ± sd) |"
    )
    print("|---|---|---|---|")
    for r in summary:
        print(
            f"| {r['penalty']:g} | {r['runs']} | {r['test_accuracy']:.3f} ± "
            f"{r['test_accuracy_std']:.3f} | {r['attention_redundancy']:.3f} ± "
            f"{r['attention_redundancy_std']:.3f} |"
        )
    os.makedirs(args.output, exist_ok=True)
    with open(os.path.join(args.output, "metrics.json"), "w") as f:
        json.dump(
            {"args": vars(args), "runs": runs, "summary": summary}, f, indent=2
        )
    return {"runs": runs, "summary": summary}


if __name__ == "__main__":
    main(sys.argv[1:])
