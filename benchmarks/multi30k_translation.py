"""Multi30k German → English: decoding chosen on val, BLEU on held-out pairs.

Scores a translator trained by `python examples/translation.py --preset
multi30k` (Multi30k task 1, Elliott et al., 2016, from
`../shared/data/multi30k/`): 1,000 of the 29,000 `train` pairs are held out
as the test set (`keras_attention.data.translation.hold_out`, seed 0, the
preset's split), the other 28,000 trained on; the 1,014 `val` pairs chose
the checkpoint (early stopping) and choose here the decoding: greedy, or
beam search of each `--beam-widths` with each `--length-penalties`, the
highest case-sensitive BLEU on `val` winning. The test pairs are decoded
with greedy search and with the chosen setting only. BLEU is sacrebleu's
`corpus_bleu` (13a) on detokenized text against the raw references:
case-sensitive as published, with the case-insensitive figure beside it.
The test rows also show what the post-processing brings (recasing,
replacing `[UNK]` by the source word attended to most).

    python examples/translation.py --preset multi30k
    python benchmarks/multi30k_translation.py --run runs/multi30k

Results go to stdout as Markdown tables and to `RUN/decoding.json`. Exits
with a message when the data or the run is absent.
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
        "--run",
        default=os.path.join(ROOT, "runs", "multi30k"),
        help="run directory of the example (model.keras)",
    )
    parser.add_argument("--hold-out", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0, help="of the hold-out")
    parser.add_argument(
        "--beam-widths", type=int, nargs="+", default=[5], metavar="K"
    )
    parser.add_argument(
        "--length-penalties",
        type=float,
        nargs="+",
        default=[0.0, 0.6, 1.0],
        metavar="ALPHA",
    )
    parser.add_argument("--batch-size", type=int, default=128)
    return parser.parse_args(argv)


def _missing(args):
    files = [
        os.path.join(args.data_dir, f"{split}.{lang}")
        for split in ("train", "val")
        for lang in ("de", "en")
    ]
    missing = [f for f in files if not os.path.exists(f)]
    if missing:
        return (
            f"Multi30k not found ({', '.join(missing)}); nothing to "
            "benchmark. Put train/val .de/.en files in --data-dir."
        )
    if not os.path.exists(os.path.join(args.run, "model.keras")):
        return (
            f"no model in {args.run}: train one first with "
            "python examples/translation.py --preset multi30k"
        )
    return None


def _score(model, corpus, setting, truecaser, batch_size):
    """BLEU of one decoding setting, with and without post-processing."""
    from keras_attention.models import translation
    from keras_attention.models import truecasing

    width, alpha = setting
    start = time.perf_counter()
    hypotheses, words, alignments = translation.translate_corpus(
        model,
        corpus.sources,
        decoding="greedy" if width == 1 else "beam",
        beam_width=width,
        length_penalty=alpha,
        batch_size=batch_size,
        truecaser=truecaser,
    )
    seconds = time.perf_counter() - start
    references = list(corpus.targets)
    pairs = zip(words, corpus.sources, alignments, strict=True)
    plain = [truecasing.postprocess(w, s, a, None) for w, s, a in pairs]
    # An empty source leaves `[UNK]` as it is.
    no_unk = [truecasing.postprocess(w, "", [], truecaser) for w in words]
    bleu = translation.corpus_bleu
    return {
        "beam_width": width,
        "length_penalty": alpha,
        "bleu": bleu(hypotheses, references, lowercase=False),
        "bleu_uncased": bleu(hypotheses, references),
        "bleu_without_recasing": bleu(plain, references, lowercase=False),
        "bleu_without_unk_replacement": bleu(
            no_unk, references, lowercase=False
        ),
        "decode_seconds": round(seconds, 1),
        "examples": hypotheses[:3],
    }


def _name(row):
    if row["beam_width"] == 1:
        return "greedy"
    return f"beam {row['beam_width']}, α = {row['length_penalty']}"


def main(argv=None):
    args = parse_args(argv)
    message = _missing(args)
    if message:
        print(message)
        return None
    import keras_attention
    from keras_attention.data.translation import hold_out
    from keras_attention.data.translation import read_parallel
    from keras_attention.models import truecasing

    train, test = hold_out(
        read_parallel(os.path.join(args.data_dir, "train")),
        args.hold_out,
        args.seed,
    )
    val = read_parallel(os.path.join(args.data_dir, "val"))
    truecaser = truecasing.build_truecaser(train.targets)
    model = keras_attention.load_model(os.path.join(args.run, "model.keras"))
    settings = [(1, 0.0)] + [
        (k, a) for k in args.beam_widths for a in args.length_penalties
    ]
    rows = {"val": [], "test": []}
    for setting in settings:
        rows["val"].append(
            _score(model, val, setting, truecaser, args.batch_size)
        )
        print(f"val {_name(rows['val'][-1])}: {rows['val'][-1]['bleu']:.2f}")
    best = max(rows["val"], key=lambda row: row["bleu"])
    chosen = (best["beam_width"], best["length_penalty"])
    for setting in dict.fromkeys([(1, 0.0), chosen]):
        rows["test"].append(
            _score(model, test, setting, truecaser, args.batch_size)
        )
    with open(os.path.join(args.run, "decoding.json"), "w") as f:
        json.dump({"chosen_on_val": chosen, **rows}, f, indent=2)
    _report(rows)
    return rows


def _report(rows):
    for split, title in (("val", "val, 1,014"), ("test", "held-out, 1,000")):
        print(
            f"\n| decoding | BLEU ({title}) | uncased | no recasing | "
            "no unk replacement | decode time |"
        )
        print("|---|---|---|---|---|---|")
        for row in rows[split]:
            print(
                f"| {_name(row)} | {row['bleu']:.1f} | "
                f"{row['bleu_uncased']:.1f} | "
                f"{row['bleu_without_recasing']:.1f} | "
                f"{row['bleu_without_unk_replacement']:.1f} | "
                f"{row['decode_seconds']:.0f} s |"
            )
    for line in rows["test"][-1]["examples"]:
        print(f"  {line}")


if __name__ == "__main__":
    main(sys.argv[1:])
