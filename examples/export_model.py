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
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _load_cli():
    """`keras_attention/models/cli.py`, the scripts' shared command line.

    Loaded from its file (it needs only the standard library): importing
    `keras_attention.models.cli` would run the package's `__init__`, and
    with it Keras and TensorFlow, before `--help` or a mistyped flag could
    answer.
    """
    package = importlib.util.find_spec("keras_attention")
    if package is None:
        sys.exit("error: keras_attention is not importable: pip install it")
    (root,) = package.submodule_search_locations
    path = os.path.join(root, "models", "cli.py")
    spec = importlib.util.spec_from_file_location("keras_attention_cli", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cli = _load_cli()


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
