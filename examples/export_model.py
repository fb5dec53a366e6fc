"""Exports a saved keras_attention model as a SavedModel for TF Serving.

Loads a `.keras` file (with `keras_attention.load_model`, so a broken file
gets an error that says what is wrong with it), writes a TensorFlow
SavedModel with `keras_attention.export_for_serving` and prints its
signatures. The sentiment classifier gets one signature, `serve` (raw
strings `(batch, 1)` in, `probabilities`, `embedding` and `attention`
out); a translator gets `serve` (source ids in, greedy tokens, scores and
alignments out) and `translate` (raw strings in, also `translations`).

    python examples/export_model.py saved_models/sentiment_synthetic.keras \\
        exported/sentiment/1
    python examples/export_model.py runs/translation/model.keras \\
        exported/translator/1 --beam-width 5

TF Serving reads numbered version directories (`.../1`); see
docs/serving.md. Needs the TensorFlow backend. A missing or broken model
file, or a non-empty output directory, prints one line `error: ...` and
exits with status 2.
"""

import importlib.util
import os
import runpy
import sys
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


# The scripts' shared command line, run from its file: importing
# `keras_attention.models.cli` would load Keras before `--help` answers.
_PACKAGE = os.path.dirname(importlib.util.find_spec("keras_attention").origin)
cli = types.SimpleNamespace(**runpy.run_path(f"{_PACKAGE}/models/cli.py"))


def parse_args(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "model",
        type=cli.existing_file,
        help="path of a .keras file (e.g. runs/sentiment/model.keras)",
    )
    parser.add_argument(
        "output", help="SavedModel directory to write (e.g. exported/NAME/1)"
    )
    parser.add_argument(
        "--beam-width",
        type=int,
        default=1,
        help="beam width of a translator's signatures (1 is greedy)",
    )
    args = parser.parse_args(argv)
    if args.beam_width < 1:
        parser.error(f"--beam-width must be at least 1, got {args.beam_width}")
    if os.path.isfile(args.output) or (
        os.path.isdir(args.output) and os.listdir(args.output)
    ):
        parser.error(f"{args.output} exists and is not empty")
    return parser, args


def main(argv=None):
    parser, args = parse_args(argv)
    cli.import_tensorflow()
    import keras

    import keras_attention

    if keras.backend.backend() != "tensorflow":
        cli.fail(
            "exporting a SavedModel needs KERAS_BACKEND=tensorflow, not "
            f"{keras.backend.backend()}"
        )
    with cli.user_errors():
        model = keras_attention.load_model(args.model)
    with cli.user_errors(ValueError):
        keras_attention.export_for_serving(
            model, args.output, beam_width=args.beam_width
        )
    import tensorflow as tf

    signatures = tf.saved_model.load(args.output).signatures
    print(f"wrote {args.output}")
    for name, function in sorted(signatures.items()):
        inputs = function.structured_input_signature[1]
        outputs = function.structured_outputs
        print(f"  {name}:")
        for kind, specs in (("in", inputs), ("out", outputs)):
            for key, spec in sorted(specs.items()):
                shape = tuple(spec.shape.as_list())
                print(f"    {kind:>3} {key}: {spec.dtype.name} {shape}")
    return args.output


if __name__ == "__main__":
    main(sys.argv[1:])
