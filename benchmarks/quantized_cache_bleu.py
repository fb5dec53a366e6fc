"""BLEU of a trained Transformer translator decoding with an int8 (or
float8) key/value cache against the same model with its float cache.

The translator of `examples/translation.py --model transformer` (its run
folder: `model.keras`, and `truecaser.json` on real data) is loaded twice:
as saved (`cache_dtype=None`, the compute dtype) and with every
`cache_dtype` of its configuration set to `--cache-dtype` (the same
weights: only the config in a copy of the `.keras` archive changes). Both
decode the same sentences with the same search (`--beam-width`,
`--length-penalty`), and sacrebleu scores both against the references.
Printed: BLEU (cased and uncased) of each, their difference, how many
translations differ, and each one's decoding seconds.

    python examples/translation.py --preset multi30k-transformer \\
        --max-minutes 20 --schedule cosine_time --output runs/t20
    python benchmarks/quantized_cache_bleu.py runs/t20 \\
        --data ../shared/data/multi30k/val
"""

import argparse
import json
import os
import sys
import tempfile
import time
import zipfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VAL = os.path.join(ROOT, os.pardir, "shared", "data", "multi30k", "val")
CACHE_DTYPES = ("int8", "float8_e4m3fn")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "run", help="run folder of examples/translation.py (model.keras)"
    )
    parser.add_argument(
        "--data",
        default=VAL,
        help="PREFIX of the sentences to translate: PREFIX.de, PREFIX.en",
    )
    parser.add_argument("--source", default="de")
    parser.add_argument("--target", default="en")
    parser.add_argument("--cache-dtype", choices=CACHE_DTYPES, default="int8")
    parser.add_argument("--beam-width", type=int, default=5)
    parser.add_argument("--length-penalty", type=float, default=1.0)
    parser.add_argument("--limit", type=int, help="only the first N pairs")
    return parser.parse_args(argv)


def _set_cache_dtype(config, dtype):
    """How many `cache_dtype` entries of a nested config were set."""
    count = 0
    if isinstance(config, dict):
        for key, value in config.items():
            if key == "cache_dtype":
                config[key] = dtype
                count += 1
            else:
                count += _set_cache_dtype(value, dtype)
    elif isinstance(config, list):
        count = sum(_set_cache_dtype(item, dtype) for item in config)
    return count


def with_cache_dtype(path, dtype, folder):
    """A copy of the `.keras` archive at `path` whose config sets
    `cache_dtype` to `dtype`; the weights are the same bytes."""
    copy = os.path.join(folder, f"model-{dtype}.keras")
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(copy, "w") as out:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                if not _set_cache_dtype(config, dtype):
                    raise ValueError(
                        f"{path} has no `cache_dtype` in its config: is it "
                        "a Transformer translator of this package?"
                    )
                data = json.dumps(config).encode()
            out.writestr(item, data)
    return copy


def _decode(model, corpus, args, truecaser):
    from keras_attention.models import translation

    began = time.perf_counter()
    result = translation.evaluate_translator(
        model,
        corpus,
        beam_width=args.beam_width if args.beam_width > 1 else None,
        decoding="beam" if args.beam_width > 1 else "greedy",
        length_penalty=args.length_penalty,
        truecaser=truecaser,
    )
    result["seconds"] = time.perf_counter() - began
    return result


def main(argv=None):
    args = parse_args(argv)
    path = os.path.join(args.run, "model.keras")
    if not os.path.isfile(path):
        print(f"error: {path} does not exist", file=sys.stderr)
        return 2
    import keras

    import keras_attention
    from keras_attention.data import translation as data

    corpus = data.read_parallel(args.data, args.source, args.target)
    if args.limit:
        corpus = data.ParallelCorpus(
            corpus.sources[: args.limit], corpus.targets[: args.limit]
        )
    truecaser = None
    table = os.path.join(args.run, "truecaser.json")
    if os.path.isfile(table):
        with open(table, encoding="utf-8") as f:
            truecaser = json.load(f)
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        quantized = with_cache_dtype(path, args.cache_dtype, folder)
        for name, file in (("float", path), (args.cache_dtype, quantized)):
            model = keras_attention.load_model(file)
            results[name] = _decode(model, corpus, args, truecaser)
    print(
        f"backend {keras.backend.backend()}, {len(corpus)} pairs of "
        f"{args.data}, beam {args.beam_width}, length penalty "
        f"{args.length_penalty}"
    )
    print("| cache | BLEU (cased) | BLEU (uncased) | decoding s |")
    print("|---|---|---|---|")
    for name, result in results.items():
        print(
            f"| {name} | {result['bleu']:.2f} | {result['bleu_uncased']:.2f} "
            f"| {result['seconds']:.0f} |"
        )
    base, quantized = results["float"], results[args.cache_dtype]
    differ = sum(
        a != b
        for a, b in zip(
            base["translations"], quantized["translations"], strict=True
        )
    )
    print(
        f"difference {quantized['bleu'] - base['bleu']:+.2f} BLEU (cased); "
        f"{differ} of {len(corpus)} translations differ"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
