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
import os
import sys

import _penalty_grid

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
    _penalty_grid.add_training_arguments(add, "sst2")
    add(
        "--output",
        default=os.path.join("runs", "sst2_sentiment"),
        help="run directory",
    )
    return parser.parse_args(argv)


def _train(args, splits, run_dir, penalty, seed):
    from keras_attention.models import sentiment

    result = sentiment.train_sentiment_classifier(
        splits,
        run_dir,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        patience=args.patience,
        seed=seed,
        max_tokens=args.max_tokens,
        verbose=2,
        **_penalty_grid.model_kwargs(args, penalty),
    )
    return result, result.train_seconds


def main(argv=None):
    args = parse_args(argv)
    from keras_attention.data import sst

    missing = sst.missing_files(args.data_root)
    if missing:
        print(
            f"SST data not found: {', '.join(missing)}; nothing to benchmark."
        )
        return None
    splits = sst.load_sst_splits(
        "sst2", args.data_root, seed=args.split_seed, phrases=args.phrases
    )
    print(
        ", ".join(f"{k} {len(v)}" for k, v in splits.items()),
        "sentences or phrases",
    )
    return _penalty_grid.run_grid(
        args,
        splits,
        lambda run_dir, penalty, seed: _train(
            args, splits, run_dir, penalty, seed
        ),
    )


if __name__ == "__main__":
    main(sys.argv[1:])
