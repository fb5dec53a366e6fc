"""Regenerates `translator_synthetic.keras` and its golden outputs.

    python saved_models/make_translator_synthetic.py [--name NAME]

Trains a small `keras_attention.seq2seq.Translator` on the synthetic
translation task (seed 0, about a minute on 2 CPU cores), saves it without
optimizer state as `NAME.keras`, and writes `NAME.golden.npz`: `x` holds the
source token ids of eight held-out sentences (`int32`, padded with 0) and
`y0`, `y1`, `y2` the outputs of `model.predict(x)`: greedy tokens, their
log-probabilities and the attention weights `(8, max_output_length,
source_time)`. A committed model is never replaced (it guards loading of
old files); write a new one under a new `--name` instead.
"""

import argparse
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_attention  # noqa: E402
from keras_attention.data import translation as data  # noqa: E402
from keras_attention.models import translation  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="translator_synthetic")
    parser.add_argument("--output-dir", default=HERE)
    args = parser.parse_args(argv)

    train = data.make_synthetic_translation(2000, seed=0)
    validation = data.make_synthetic_translation(300, seed=1)
    test = data.make_synthetic_translation(300, seed=2)
    with tempfile.TemporaryDirectory() as run_dir:
        result = translation.train_translator(
            train,
            validation,
            run_dir,
            epochs=10,
            batch_size=64,
            learning_rate=5e-3,
            seed=0,
            verbose=2,
            embedding_dim=16,
            units=32,
            max_output_length=20,
        )
    model = result.model
    metrics = translation.evaluate_translator(model, test)
    print(
        f"bleu {metrics['bleu']:.1f}, alignment accuracy "
        f"{metrics['alignment_accuracy']:.3f}"
    )

    # An uncompiled copy: the file holds the weights, not Adam's state.
    clean = keras_attention.seq2seq.Translator.from_config(model.get_config())
    clean.set_weights(model.get_weights())
    path = os.path.join(args.output_dir, f"{args.name}.keras")
    clean.save(path)

    x = clean.vectorize_sources(test.sources[:8])
    loaded = keras.saving.load_model(path, safe_mode=True)
    outputs = loaded.predict(x, verbose=0)
    golden = {"x": x}
    for i, output in enumerate(outputs):
        golden[f"y{i}"] = np.asarray(output)
    np.savez(os.path.join(args.output_dir, f"{args.name}.golden.npz"), **golden)
    print(f"wrote {path} ({os.path.getsize(path) / 1e6:.2f} MB)")
    for sentence, words in zip(
        test.sources[:3],
        [loaded.tokens_to_words(t) for t in golden["y0"][:3]],
        strict=True,
    ):
        print(f"  {sentence} -> {' '.join(words)}")


if __name__ == "__main__":
    main(sys.argv[1:])
