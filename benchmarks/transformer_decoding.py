"""Decoding speed of `TransformerTranslator`, with and without its KV cache.

Sentences per second of greedy search and beam search (width 5), each
decoded once with the key/value cache (one decoder step per token: the
new token's keys and values are written into the cache and the memory's
are projected once) and once without (every step runs the whole prefix
through the decoder again), through `model.predict` (compiled, batched),
in one process on the same sentences. Both must give the same
translations; the script says whether they did.

    python examples/translation.py --preset multi30k-transformer
    python benchmarks/transformer_decoding.py --run runs/multi30k-transformer

Without `--run` it times an untrained model of the preset's sizes on the
synthetic task's sentences (the speed does not depend on the weights,
only on the lengths decoded; an untrained model decodes to
`max_output_length`, the worst case). Results go to stdout as a Markdown
table.
"""

import argparse
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
    parser.add_argument(
        "--run", help="run directory of the example (model.keras)"
    )
    parser.add_argument("--data-dir", default=DEFAULT_DATA)
    parser.add_argument(
        "--sentences", type=int, default=256, help="how many to decode"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--beam-width", type=int, default=5)
    return parser.parse_args(argv)


def _model_and_sentences(args):
    import keras_attention
    from keras_attention.data import translation as data

    if args.run:
        model = keras_attention.load_model(
            os.path.join(args.run, "model.keras")
        )
        sentences = data.read_parallel(
            os.path.join(args.data_dir, "val"), "de", "en"
        ).sources
        return model, list(sentences[: args.sentences])
    from keras_attention.models.translation import build_vocabularies
    from keras_attention.seq2seq import TransformerTranslator

    corpus = data.make_synthetic_translation(args.sentences, seed=0)
    vocabularies = build_vocabularies(corpus.sources, corpus.targets)
    model = TransformerTranslator(*vocabularies, max_output_length=30)
    return model, list(corpus.sources)


def _decode(model, ids, batch_size):
    """Seconds and tokens of one `predict` over `ids` (compiled before)."""
    import numpy as np

    model.make_predict_function(force=True)
    model.predict(ids[:batch_size], batch_size=batch_size, verbose=0)
    start = time.perf_counter()
    tokens, _, _ = model.predict(ids, batch_size=batch_size, verbose=0)
    return time.perf_counter() - start, np.asarray(tokens)


def main(argv=None):
    args = parse_args(argv)
    if args.run and not os.path.isfile(os.path.join(args.run, "model.keras")):
        sys.exit(f"error: no model.keras in {args.run}: train it first")
    import keras

    model, sentences = _model_and_sentences(args)
    ids = model.vectorize_sources(sentences)
    print(
        f"keras {keras.__version__}, backend {keras.backend.backend()}, "
        f"{len(sentences)} sentences, batch {args.batch_size}"
    )
    print("| decoding | cache | sentences/s | speed-up |")
    print("|---|---|---|---|")
    for name, width in (
        ("greedy", 1),
        (f"beam {args.beam_width}", args.beam_width),
    ):
        model.beam_width = width
        results = {}
        for use_cache in (False, True):
            model.use_cache = use_cache
            results[use_cache] = _decode(model, ids, args.batch_size)
        same = (results[True][1] == results[False][1]).all()
        for use_cache in (False, True):
            seconds = results[use_cache][0]
            speed_up = results[False][0] / seconds
            print(
                f"| {name} | {'yes' if use_cache else 'no'} | "
                f"{len(sentences) / seconds:.1f} | {speed_up:.2f}x |"
            )
        print(f"<!-- {name}: same translations with and without: {same} -->")


if __name__ == "__main__":
    main(sys.argv[1:])
