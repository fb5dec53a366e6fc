"""Regenerates `sentiment_synthetic.keras` and its golden outputs.

    PYTHONPATH=. python saved_models/make_sentiment_synthetic.py [--name NAME]

Runs `examples/sentiment_classifier.py` with its default settings (the
synthetic task, seed 0, about a minute on 2 CPU cores) in a temporary
directory, copies the `model.keras` it writes (the three-output model,
uncompiled: no optimizer state) to `NAME.keras`, and writes
`NAME.golden.npz`: `x` holds seven raw sentences as a fixed-width unicode
array (NumPy stores it without pickle; `model.predict` wants
`x.astype(object)`), `y0`, `y1`, `y2` the outputs of `model.predict`
in `keras.tree.flatten` order: the attention `(7, num_hops, time)`, the
sentence embedding and the class probabilities, and `refused` texts
without a word, which the model must refuse (the rule for empty text,
`keras_attention.text.check_words`). The example's model is a
`keras_attention.text.TextModel`, whose `predict` also takes a list of
strings, a NumPy string array or one string. A committed model is never
replaced (it guards loading of old files); write a new one under a new
`--name` instead.
"""

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_attention  # noqa: E402, F401
from keras_attention.data import splits  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, os.pardir, "examples", "sentiment_classifier.py")

# Beyond five held-out sentences: upper case and punctuation (stripped by
# the vectorizer) and a word outside the vocabulary. No text without a
# word: the model refuses it (issue 30); those are in REFUSED.
EXTRA_SENTENCES = [
    "Not BAD, not bad at all!",
    "a zyxwvut movie -- never good",
]
REFUSED = ["", "   ", "?!"]


def _load_example():
    spec = importlib.util.spec_from_file_location("sentiment_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="sentiment_synthetic")
    parser.add_argument("--output-dir", default=HERE)
    args = parser.parse_args(argv)

    example = _load_example()
    with tempfile.TemporaryDirectory() as run_dir:
        metrics = example.main(["--output", run_dir, "--quiet"])
        path = os.path.join(args.output_dir, f"{args.name}.keras")
        shutil.copyfile(os.path.join(run_dir, "model.keras"), path)

    test = splits.load_sentiment_splits("synthetic", seed=0)["test"]
    sentences = list(test.sentences[:5]) + EXTRA_SENTENCES
    x = np.array(sentences, dtype=str)
    loaded = keras.saving.load_model(path, safe_mode=True)
    outputs = loaded.predict(x.astype(object), verbose=0)
    golden = {"x": x}
    for i, output in enumerate(keras.tree.flatten(outputs)):
        golden[f"y{i}"] = np.asarray(output)
    golden["refused"] = np.array(REFUSED, dtype=str)
    np.savez(os.path.join(args.output_dir, f"{args.name}.golden.npz"), **golden)
    print(
        f"test accuracy {metrics['test_accuracy']:.3f}, attention on cues "
        f"{metrics['attention_on_cues']:.3f}"
    )
    print(f"wrote {path} ({os.path.getsize(path) / 1e6:.2f} MB)")
    for sentence, p in zip(sentences, outputs["probabilities"], strict=True):
        print(f"  {sentence!r}: P(positive) = {p[1]:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
