"""SST-5: five-class sentence sentiment and Lin et al.'s penalty ablation.

Trains the sentiment classifier of `examples/sentiment_classifier.py`
(BiLSTM + `keras_attention.StructuredSelfAttention`, embeddings from
scratch) with the settings of its `--preset sst5` on the sentence-level
split of `keras_attention.data.sst.load_sst_splits("sst5")`: of the 8,544
training sentences of SST-5 in `../shared/data/sst5/train.tsv` (Socher et
al. 2013; labels 0 very negative .. 4 very positive), a seeded
permutation holds out 10% as the test set and 10% for validation (early
stopping, best weights restored), the rest trains. With
`--pretrain-epochs N` each run first trains the same model for N epochs on
the SST-2 phrases that are no part of a held-out sentence (the split of
`load_sst_splits("sst2")`, same held-out sentences) and starts from it.

It trains one model per penalty coefficient and seed (`--penalties`,
`--seeds`: the ablation of Lin et al., 2017), with every other setting
fixed beforehand, and reports each run's test accuracy and the redundancy
of its hops (mean off-diagonal entry of `AAᵀ` over the test sentences: 0
when the hops attend to disjoint tokens, 1 when all put all their weight
on one token), then the mean and standard deviation over the seeds. The
split's seed stays `--split-seed` for every run. Exits with a message
when the data is absent.

    python benchmarks/sst5_sentiment.py
    python benchmarks/sst5_sentiment.py --penalties 0 1 --seeds 0 1 2

Anchors, on the official SST-5 test set (2,210 sentences; not the same
sentences as our held-out share): CNN-rand 45.0% (Kim, 2014), tree-LSTM
51.0% (Tai et al., 2015). Results go to stdout as Markdown and to
`--output/metrics.json`.
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
    add("--seeds", type=int, nargs="+", default=[0, 1, 2], help="weights")
    add(
        "--penalties",
        type=float,
        nargs="+",
        default=[0.0, 1.0],
        help="redundancy penalty coefficients to compare",
    )
    add("--pretrain-epochs", type=int, default=0, help="on SST-2 phrases")
    _penalty_grid.add_training_arguments(add, "sst5")
    add(
        "--output",
        default=os.path.join("runs", "sst5_sentiment"),
        help="run directory",
    )
    return parser.parse_args(argv)


def _train(args, splits, phrases, run_dir, penalty, seed):
    from keras_attention.models import sentiment

    initial = None
    kwargs = _penalty_grid.model_kwargs(args, penalty)
    seconds = 0.0
    if args.pretrain_epochs:
        pretrained = sentiment.train_sentiment_classifier(
            phrases,
            os.path.join(run_dir, "pretrain"),
            epochs=args.pretrain_epochs,
            batch_size=64,
            learning_rate=args.learning_rate,
            patience=1,
            seed=seed,
            max_tokens=args.max_tokens,
            verbose=2,
            vocabulary_text=splits["train"].sentences,
            **kwargs,
        )
        initial, seconds = pretrained.model, pretrained.train_seconds
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
        initial_model=initial,
        **kwargs,
    )
    return result, seconds + result.train_seconds


def main(argv=None):
    args = parse_args(argv)
    from keras_attention.data import sst

    missing = sst.missing_files(args.data_root)
    if missing:
        print(
            f"SST data not found: {', '.join(missing)}; nothing to benchmark."
        )
        return None
    splits = sst.load_sst_splits("sst5", args.data_root, seed=args.split_seed)
    phrases = None
    if args.pretrain_epochs:
        phrases = sst.load_sst_splits(
            "sst2", args.data_root, seed=args.split_seed
        )
    print(", ".join(f"{k} {len(v)}" for k, v in splits.items()), "sentences")
    return _penalty_grid.run_grid(
        args,
        splits,
        lambda run_dir, penalty, seed: _train(
            args, splits, phrases, run_dir, penalty, seed
        ),
    )


if __name__ == "__main__":
    main(sys.argv[1:])
