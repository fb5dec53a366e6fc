"""Multi30k German → English: BLEU, training time, greedy vs beam search.

Trains `keras_attention.seq2seq.Translator` (BiGRU encoder, Bahdanau
attention GRU decoder with input feeding) on Multi30k task 1 (Elliott et
al., 2016) from `../shared/data/multi30k/` (`train.de`/`train.en`, 29,000
pairs; `val.de`/`val.en`, 1,014 pairs, used as the test set as well as for
early stopping), then scores greedy and beam-search decoding with sacrebleu
(case-insensitive corpus BLEU on detokenized text). Exits with a message
when the data is absent.

    python benchmarks/multi30k_translation.py --minutes 25
    python benchmarks/multi30k_translation.py --units 256 --epochs 15

`--minutes` bounds the training time (the run stops after the batch that
crosses it); results go to stdout as a Markdown table and to
`--output/metrics.json`.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA = os.path.join(ROOT, "..", "shared", "data", "multi30k")


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
        help="use only the first N training pairs",
    )
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument(
        "--minutes", type=float, default=None, help="training time budget"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--embedding-dim", type=int, default=128)
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument(
        "--attention",
        choices=["bahdanau", "general", "concat"],
        default="bahdanau",
    )
    parser.add_argument("--max-source-tokens", type=int, default=8000)
    parser.add_argument("--max-target-tokens", type=int, default=6000)
    parser.add_argument("--beam-width", type=int, default=5)
    parser.add_argument("--length-penalty", type=float, default=0.6)
    parser.add_argument("--patience", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--output", default=os.path.join(ROOT, "runs", "multi30k")
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    files = [
        os.path.join(args.data_dir, f"{split}.{lang}")
        for split in ("train", "val")
        for lang in ("de", "en")
    ]
    missing = [f for f in files if not os.path.exists(f)]
    if missing:
        print(
            f"Multi30k not found ({', '.join(missing)}); nothing to "
            "benchmark. Put train/val .de/.en files in --data-dir."
        )
        return None

    import keras

    from keras_attention.data.translation import read_parallel
    from keras_attention.models import translation

    train = read_parallel(os.path.join(args.data_dir, "train"))
    test = read_parallel(os.path.join(args.data_dir, "val"))
    if args.train_limit:
        train = type(train)(
            train.sources[: args.train_limit], train.targets[: args.train_limit]
        )

    class TimeBudget(keras.callbacks.Callback):
        def __init__(self, seconds):
            super().__init__()
            self.seconds = seconds
            self.start = None

        def on_train_begin(self, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            if time.perf_counter() - self.start > self.seconds:
                self.model.stop_training = True

    callbacks = []
    if args.minutes:
        callbacks.append(TimeBudget(args.minutes * 60))
    print(f"train {len(train)} pairs, test (val) {len(test)} pairs")
    result = translation.train_translator(
        train,
        test,
        args.output,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        patience=args.patience,
        seed=args.seed,
        verbose=2,
        max_source_tokens=args.max_source_tokens,
        max_target_tokens=args.max_target_tokens,
        callbacks=callbacks,
        embedding_dim=args.embedding_dim,
        units=args.units,
        attention=args.attention,
        dropout=args.dropout,
        length_penalty=args.length_penalty,
        max_output_length=60,
    )
    rows, hypotheses = _decode(result.model, test, args)
    metrics = {
        "train_pairs": len(train),
        "test_pairs": len(test),
        "epochs_trained": result.epochs_trained,
        "train_seconds": round(result.train_seconds, 1),
        "best_val_loss": min(result.history.get("val_loss", [float("nan")])),
        "decoding": rows,
        "args": vars(args),
    }
    os.makedirs(args.output, exist_ok=True)
    with open(os.path.join(args.output, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    result.model.save(os.path.join(args.output, "model.keras"))
    _report(args, train, test, result, rows, hypotheses)
    return metrics


def _decode(model, test, args):
    """BLEU and decoding time, greedy and with beam search."""
    from keras_attention.models import translation

    references = list(test.targets)
    rows = []
    for beam_width in (1, args.beam_width):
        start = time.perf_counter()
        hypotheses, _, _ = translation.translate_corpus(
            model, test.sources, beam_width=beam_width, batch_size=128
        )
        seconds = time.perf_counter() - start
        bleu = translation.corpus_bleu(hypotheses, references)
        rows.append(
            {"beam_width": beam_width, "bleu": bleu, "decode_seconds": seconds}
        )
    return rows, hypotheses


def _report(args, train, test, result, rows, hypotheses):
    """Prints the table of the README and a few translations."""
    print(
        f"\n{len(train)} training pairs, {result.epochs_trained} epochs, "
        f"{result.train_seconds / 60:.1f} min of training\n"
    )
    print("| decoding | BLEU (val) | decode time (1,014 sentences) |")
    print("|---|---|---|")
    for row in rows:
        name = (
            "greedy"
            if row["beam_width"] == 1
            else f"beam {row['beam_width']}, α={args.length_penalty}"
        )
        print(f"| {name} | {row['bleu']:.1f} | {row['decode_seconds']:.1f} s |")
    for source, hypothesis, reference in list(
        zip(test.sources, hypotheses, test.targets, strict=True)
    )[:3]:
        print(f"\n  {source}\n  -> {hypothesis}\n  (ref) {reference}")


if __name__ == "__main__":
    main(sys.argv[1:])
