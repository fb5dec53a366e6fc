"""Ablations of the Transformer translation preset, compared on `val` only.

Each variant is `python examples/translation.py --preset
multi30k-transformer` with a few flags changed and a shorter budget
(`--minutes`, default 10, for `--max-minutes`, with the rate annealed over
those minutes: `--schedule cosine_time`), run in a process of its own,
one after another: two runs at once would share the machine's cores and
train less each. Every run writes its own directory under `--output`
(`<output>/<variant>/`, the example's run directory: `model.keras`,
`metrics.json`, ...). A variant whose directory already holds a
`metrics.json` from the same flags is read, not run again (`--rerun`
runs it anyway), so an interrupted ablation picks up where it stopped.

The table (Markdown, stdout, and `<output>/ablation.json`) gives each
variant's flags, BLEU on the Multi30k `val` pairs (sacrebleu, cased and
uncased; greedy decoding, `--beam-width 1`, which decodes about 6x
faster than the preset's beam of 5: the ablation compares training
choices, the decoding is chosen afterwards), its best validation loss,
the epochs it trained and its training seconds. The held-out test pairs
are not shown: choose on `val`, then train the chosen preset for its
full epochs and read its test BLEU there (BENCHMARKS.md, "Transformer
translation").

    python benchmarks/transformer_ablation.py --list
    python benchmarks/transformer_ablation.py --variants preset tied width192

Exits with a one-line message when the Multi30k files are absent.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "translation.py")
DEFAULT_DATA = os.path.join(ROOT, "..", "shared", "data", "multi30k")

# What issue 32 asks to ablate: sizes, warm-up, label smoothing, shared
# embeddings; and the learning rate.
VARIANTS = {
    "preset": [],
    "tied": ["--tie-embeddings"],
    "width192": ["--embedding-dim", "192", "--feed-forward-dim", "768"],
    "width128": ["--embedding-dim", "128", "--feed-forward-dim", "512"],
    "layers2": ["--num-layers", "2"],
    "lr2e-3": ["--learning-rate", "2e-3"],
    "no-smoothing": ["--label-smoothing", "0"],
    "no-warmup": ["--warmup-steps", "0"],
    "dropout0.2": ["--dropout", "0.2"],
}

COLUMNS = (
    "validation_bleu",
    "validation_bleu_uncased",
    "best_val_loss",
    "epochs_trained",
    "train_seconds",
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=["preset", "tied", "width192", "lr2e-3"],
        help="which variants to run, in this order (--list shows them all)",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=10.0,
        help="training budget of each run (the example's --max-minutes)",
    )
    parser.add_argument(
        "--output",
        default=os.path.join("runs", "transformer-ablation"),
        help="directory of the runs, one sub-directory per variant",
    )
    parser.add_argument(
        "--data-dir",
        default=DEFAULT_DATA,
        help="Multi30k task 1 files (train.de/en, val.de/en)",
    )
    parser.add_argument(
        "--rerun",
        action="store_true",
        help="run every variant again, even with a finished run directory",
    )
    parser.add_argument(
        "--list",
        action="store_true",
        help="print the variants and their flags, run nothing",
    )
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error(f"--minutes must be positive. Received: {args.minutes}")
    return args


def command(args, variant):
    """The example's command line for `variant`."""
    data = args.data_dir
    return [
        sys.executable,
        EXAMPLE,
        "--preset",
        "multi30k-transformer",
        "--train",
        os.path.join(data, "train"),
        "--validation",
        os.path.join(data, "val"),
        # A time budget, the rate annealed over it: the preset's epochs
        # would not fit.
        "--schedule",
        "cosine_time",
        "--max-minutes",
        str(args.minutes),
        "--output",
        os.path.join(args.output, variant),
        "--beam-width",
        "1",
        "--quiet",
        *VARIANTS[variant],
    ]


def _finished(path, cmd):
    """The metrics of a finished run of the same command, else `None`."""
    metrics_path = os.path.join(path, "metrics.json")
    if not os.path.isfile(metrics_path):
        return None
    with open(metrics_path) as f:
        metrics = json.load(f)
    if metrics.get("ablation_command") != cmd[1:]:
        return None
    return metrics


def run_variant(args, variant):
    """Runs (or reads) one variant; returns its `metrics.json`."""
    cmd = command(args, variant)
    path = os.path.join(args.output, variant)
    metrics = None if args.rerun else _finished(path, cmd)
    if metrics is not None:
        return metrics
    subprocess.run(cmd, check=True)
    with open(os.path.join(path, "metrics.json")) as f:
        metrics = json.load(f)
    metrics["ablation_command"] = cmd[1:]
    with open(os.path.join(path, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    return metrics


def table(rows):
    """Markdown: one row per variant, its flags and `COLUMNS`."""
    lines = [
        "| variant | flags | " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * (len(COLUMNS) + 2),
    ]
    for variant, metrics in rows:
        cells = []
        for column in COLUMNS:
            value = metrics.get(column)
            cells.append("-" if value is None else f"{value:.4g}")
        flags = " ".join(VARIANTS[variant]) or "(the preset)"
        lines.append(f"| {variant} | `{flags}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    if args.list:
        for name, flags in VARIANTS.items():
            print(f"{name}: {' '.join(flags) or '(the preset)'}")
        return 0
    for name in ("train.de", "train.en", "val.de", "val.en"):
        if not os.path.isfile(os.path.join(args.data_dir, name)):
            print(
                f"error: {os.path.join(args.data_dir, name)} is missing: "
                "put Multi30k task 1 there or pass --data-dir",
                file=sys.stderr,
            )
            return 2
    rows = []
    for variant in args.variants:
        print(f"== {variant}: {' '.join(command(args, variant)[2:])}")
        try:
            rows.append((variant, run_variant(args, variant)))
        except subprocess.CalledProcessError as error:
            print(f"error: variant {variant} failed: {error}", file=sys.stderr)
            return 2
    print(table(rows))
    os.makedirs(args.output, exist_ok=True)
    with open(os.path.join(args.output, "ablation.json"), "w") as f:
        json.dump(dict(rows), f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
