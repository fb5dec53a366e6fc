"""Sentiment classification with structured self-attention (Lin et al.).

Trains a BiLSTM + `keras_attention.StructuredSelfAttention` classifier on
raw sentences and shows where its attention hops look. The default data is
synthetic (generated, no download): the label is the majority vote of a few
sentiment phrases ("good", "not bad", ...) hidden among neutral filler
words, so the script can also measure how much of the attention lands on
those phrases.

    python examples/sentiment_classifier.py
    python examples/sentiment_classifier.py --data sst2 --epochs 3
    python examples/sentiment_classifier.py --data train.tsv \\
        --validation dev.tsv --test test.tsv --epochs 5 --output runs/tsv \\
        --label-names "very negative,negative,neutral,positive,very positive"

Labels are integers 0, 1, ...: any number of classes, named by
`--label-names` (saved with the model). Writes to `--output`:
`model.keras` (raw strings in; outputs `probabilities`, `embedding`,
`attention`), `metrics.json` (`test_accuracy`, `attention_redundancy`,
and on synthetic data `attention_on_cues`), `attention.png` (hops ×
tokens for a few test sentences of every class), `attention.html`,
`attention_hops.html` (the interactive head view of one sentence's hops)
and `rollout.txt` (each shown sentence's tokens with their share).
Errors in the arguments or the data print one line `error: ...` and exit
with status 2. A killed run resumes from its last epoch when started
again with the same `--output`. `--distribute` spreads training over
several devices or machines (docs/distributed.md). The vectorizer runs in
the input pipeline during training; `model.keras` is the raw-string model.
"""

import argparse
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

# Defaults of keras_attention.data.splits, repeated here so that --help
# needs no import of the package (tests check that they agree).
SYNTHETIC_EXAMPLES = 6000
VALIDATION_FRACTION = 0.1
TEST_FRACTION = 0.1
NAMED_DATA = ("synthetic", "imdb", "sst2", "sst2-sentences", "sst5-sentences")
SST_DATA = ("sst2-sentences", "sst5-sentences")
# keras_attention.data.sst.DATA_FILES, repeated for the same reason.
SST_FILES = ("sst5/train.tsv", "sst2/train.tsv", "sst2/dev.tsv")
# The local SST files (keras_attention.data.sst.DATA_FILES under it).
DATA_ROOT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "..",
    "shared",
    "data",
)
#: `--preset` values: the defaults they set (flags given override them).
PRESETS = {
    "sst2": {
        "data": "sst2-sentences",
        "embedding_dim": 128,
        "lstm_units": 64,
        "attention_units": 64,
        "num_hops": 4,
        "mlp_units": 64,
        "dropout": 0.5,
        "recurrent_dropout": 0.5,
        "epochs": 2,
        "batch_size": 64,
        "learning_rate": 1e-3,
        "patience": 1,
        "output": os.path.join("runs", "sst2"),
    },
    "sst5": {
        "data": "sst5-sentences",
        "embedding_dim": 64,
        "lstm_units": 16,
        "attention_units": 32,
        "num_hops": 2,
        "mlp_units": 32,
        "dropout": 0.2,
        "recurrent_dropout": 0.5,
        "epochs": 10,
        "batch_size": 32,
        "learning_rate": 3e-3,
        "patience": 3,
        "output": os.path.join("runs", "sst5"),
    },
}


def label_names(text):
    """`--label-names`: comma-separated names, or a file of one per line."""
    if os.path.isfile(text):
        with open(text, encoding="utf-8") as f:
            names = [line.strip() for line in f if line.strip()]
    else:
        names = [name.strip() for name in text.split(",")]
    if len(names) < 2 or not all(names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            "expected at least two distinct, non-empty class names "
            f"(comma-separated, or a file with one per line), got {text!r}"
        )
    return names


def data_source(text):
    """`--data`: a named set or a non-empty file."""
    return text if text in NAMED_DATA else cli.existing_file(text)


def _add_data_arguments(data):
    data.add_argument(
        "--data",
        type=data_source,
        default="synthetic",
        help="'synthetic' (generated), 'imdb' or 'sst2' (downloaded by "
        "TensorFlow Datasets), 'sst2-sentences' or 'sst5-sentences' (the "
        "local SST files under --data-root, whole sentences held out for "
        "validation and test, no part of them trained on: "
        "keras_attention.data.sst), or the path of a TSV file with the "
        "header sentence<TAB>label and integer labels 0, 1, ... (any "
        "number of classes)",
    )
    data.add_argument(
        "--data-root",
        default=DATA_ROOT,
        help="folder with sst5/train.tsv, sst2/train.tsv and sst2/dev.tsv "
        "for --data sst2-sentences / sst5-sentences",
    )
    data.add_argument(
        "--pretrain-epochs",
        type=int,
        default=0,
        help="with --data sst5-sentences, first train the same model this "
        "many epochs on the SST-2 phrases that are no part of a held-out "
        "sentence (binary labels), then train on SST-5 from its weights",
    )
    data.add_argument(
        "--phrases",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --data sst2-sentences, also train on the labelled SST-2 "
        "phrases that are no part of a held-out sentence",
    )
    data.add_argument(
        "--validation",
        type=cli.existing_file,
        help="TSV file of validation data (else a share of --data)",
    )
    data.add_argument(
        "--test",
        type=cli.existing_file,
        help="TSV file of test data (else a share of --data, or the named "
        "set's own held-out split)",
    )
    data.add_argument(
        "--label-names",
        type=label_names,
        help="names of the classes, label 0 first: 'negative,positive', or "
        "a file with one name per line; saved with the model (default: "
        "negative/positive for the named sets, else the label numbers)",
    )
    data.add_argument(
        "--num-examples",
        type=cli.positive_int,
        default=SYNTHETIC_EXAMPLES,
        help="synthetic sentences to generate (before the split)",
    )
    data.add_argument(
        "--validation-fraction",
        type=cli.fraction,
        default=VALIDATION_FRACTION,
        help="share of the training data held out for validation when "
        "--validation is not given",
    )
    data.add_argument(
        "--test-fraction",
        type=cli.fraction,
        default=TEST_FRACTION,
        help="share of the training data held out for testing when there "
        "is no test set",
    )
    data.add_argument(
        "--data-dir",
        help="TensorFlow Datasets directory (default: TFDS's own, "
        "~/tensorflow_datasets)",
    )
    data.add_argument(
        "--max-tokens",
        type=cli.vocabulary_size,
        default=20000,
        help="vocabulary size",
    )
    data.add_argument(
        "--max-length",
        type=cli.positive_int,
        default=None,
        help="truncate sentences to this many tokens (None: keep them whole)",
    )


def _add_model_arguments(model):
    # The defaults are tuned on the synthetic task (2 cores, ~1 minute):
    # a small BiLSTM with recurrent dropout keeps each hidden state about
    # its own word, so the hops attend to the cue phrases themselves.
    for flag, default, text in (
        ("--embedding-dim", 64, "size of the word embeddings"),
        ("--lstm-units", 16, "units of each direction of the BiLSTM"),
        ("--attention-units", 32, "hidden size d_a of the attention MLP"),
        ("--num-hops", 2, "attention hops r"),
        ("--mlp-units", 32, "hidden units of the classifier MLP"),
    ):
        model.add_argument(
            flag, type=cli.positive_int, default=default, help=text
        )
    model.add_argument(
        "--penalty",
        type=cli.non_negative_float,
        default=0.0,
        help="coefficient of the redundancy penalty ||AA^T - I||_F^2; 0 by "
        "default because on the synthetic task a sentence may hold a "
        "single cue, which disjoint hops cannot all attend to (Lin et al. "
        "use 1.0 on long reviews)",
    )
    model.add_argument(
        "--dropout",
        type=cli.fraction,
        default=0.2,
        help="dropout rate on the sentence embedding and in the MLP",
    )
    model.add_argument(
        "--recurrent-dropout",
        type=cli.fraction,
        default=0.5,
        help="dropout rate on the LSTM's recurrent state",
    )
    model.add_argument(
        "--spatial-dropout",
        type=cli.fraction,
        default=0.0,
        help="rate of SpatialDropout1D on the word embeddings (each "
        "embedding channel dropped for a whole sentence)",
    )


def parse_args(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    cli.add_preset_argument(parser, PRESETS)
    _add_data_arguments(parser.add_argument_group("data"))
    _add_model_arguments(parser.add_argument_group("model"))
    fit = parser.add_argument_group("training")
    cli.add_training_arguments(
        fit,
        epochs=10,
        batch_size=32,
        learning_rate=3e-3,
        seed="seed of the data, the splits and the weights",
    )
    cli.add_run_arguments(fit)
    parser.add_argument(
        "--output",
        type=cli.run_directory,
        default=os.path.join("runs", "sentiment"),
        help="run directory: model.keras, metrics.json, attention.png, "
        "attention.html, attention_hops.html, rollout.txt, "
        "checkpoint.weights.h5",
    )
    args = cli.parse_with_preset(parser, PRESETS, argv)
    if args.data in SST_DATA and (args.validation or args.test):
        parser.error(
            f"--data {args.data} holds out its own validation and test "
            "sentences; --validation and --test cannot be given with it"
        )
    if args.data in SST_DATA:
        check_sst_files(args)
    if args.pretrain_epochs < 0:
        parser.error(
            f"--pretrain-epochs must be 0 or more, got {args.pretrain_epochs}"
        )
    if args.pretrain_epochs and args.data != "sst5-sentences":
        parser.error(
            "--pretrain-epochs needs --data sst5-sentences (or --preset "
            f"sst5), got --data {args.data}"
        )
    if args.validation_fraction + args.test_fraction >= 1:
        parser.error(
            "--validation-fraction and --test-fraction must sum to less "
            f"than 1, got {args.validation_fraction} + {args.test_fraction}"
        )
    return args


def check_sst_files(args):
    """Fails in one line, before Keras loads, when an SST file is absent."""
    for name in SST_FILES:
        path = os.path.join(args.data_root, name)
        if not os.path.isfile(path):
            cli.fail(
                f"--data {args.data} needs {path}, which is absent (set "
                "--data-root to the folder holding sst5/train.tsv, "
                "sst2/train.tsv and sst2/dev.tsv: the SST-5 training "
                "sentences and GLUE's SST-2 train/dev files, see the "
                "README's Sentiment classifier section)"
            )


def load_sst(args, task=None, phrases=None):
    """The sentence-level SST splits of `args` (or of `task`, `phrases`)."""
    from keras_attention.data import sst

    with cli.user_errors():
        return sst.load_sst_splits(
            task or args.data.split("-")[0],
            args.data_root,
            validation_fraction=args.validation_fraction,
            test_fraction=args.test_fraction,
            seed=args.seed,
            phrases=args.phrases if phrases is None else phrases,
        )


def load_splits(args):
    """The data of `args`; a bad file or label is a one-line error."""
    from keras_attention.data import splits

    if args.data in SST_DATA:
        return load_sst(args)

    try:
        with cli.user_errors(), cli.one_line_warnings():
            return splits.load_sentiment_splits(
                args.data,
                validation=args.validation,
                test=args.test,
                num_examples=args.num_examples,
                validation_fraction=args.validation_fraction,
                test_fraction=args.test_fraction,
                seed=args.seed,
                data_dir=args.data_dir,
                label_names=args.label_names,
            )
    except ImportError as error:
        missing = (error.name or "").split(".")[0]
        if missing in ("", "tensorflow_datasets"):
            cli.fail(
                f"--data {args.data} needs TensorFlow Datasets (pip install "
                f"tensorflow-datasets): {error}"
            )
        cli.fail(
            f"--data {args.data}: TensorFlow Datasets needs a module that is "
            f"not installed (pip install {missing}): {error}"
        )


def _model_kwargs(args):
    return {
        "embedding_dim": args.embedding_dim,
        "lstm_units": args.lstm_units,
        "attention_units": args.attention_units,
        "num_hops": args.num_hops,
        "penalty_coefficient": args.penalty,
        "mlp_units": args.mlp_units,
        "dropout": args.dropout,
        "recurrent_dropout": args.recurrent_dropout,
        "spatial_dropout": args.spatial_dropout,
    }


def _fit(args, splits, output, strategy, **kwargs):
    """`train_sentiment_classifier` with the flags both trainings share."""
    from keras_attention.models import sentiment

    return sentiment.train_sentiment_classifier(
        splits,
        output,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        patience=args.patience,
        strategy=strategy,
        seed=args.seed,
        max_tokens=args.max_tokens,
        max_length=args.max_length,
        verbose=2 if args.quiet else 1,
        **_model_kwargs(args),
        **kwargs,
    )


def _pretrain(args, sentences, strategy):
    """The model trained on the SST-2 phrases (`--pretrain-epochs`).

    `sentences` are the SST-5 splits trained on next: their training
    sentences give the vocabulary.
    """
    phrases = load_sst(args, task="sst2", phrases=True)
    print(f"pretraining on {len(phrases['train'])} SST-2 phrases")
    return _fit(
        args,
        phrases,
        os.path.join(args.output, "pretrain"),
        strategy,
        epochs=args.pretrain_epochs,
        vocabulary_text=sentences["train"].sentences,
    )


def _train(args, splits, strategy):
    initial = None
    if args.pretrain_epochs:
        initial = _pretrain(args, splits, strategy)
    result = _fit(
        args,
        splits,
        args.output,
        strategy,
        epochs=args.epochs,
        initial_model=None if initial is None else initial.model,
    )
    if initial is not None:
        result.train_seconds += initial.train_seconds
        result.restored_seconds += initial.restored_seconds
    return result


def main(argv=None):
    args = parse_args(argv)
    cli.make_run_directory(args.output)
    cli.check_resume(args)
    cli.import_tensorflow()
    from keras_attention.models import fitting
    from keras_attention.models import sentiment

    with cli.user_errors(ValueError):
        strategy = fitting.strategy_from_flags(
            args.distribute,
            args.cpu_devices,
            # What distribution.layout_map splits: the embedding dim and
            # the attention MLP's units.
            (args.embedding_dim, args.attention_units),
        )
    splits = load_splits(args)
    print(
        "examples: "
        + ", ".join(f"{name} {len(split)}" for name, split in splits.items())
        + "; classes: "
        + ", ".join(splits["train"].label_names)
    )
    result = _train(args, splits, strategy)
    test, probabilities, attention = sentiment.evaluate_sentiment_classifier(
        result.model, splits["test"]
    )
    metrics = {
        "test_accuracy": test["accuracy"],
        "test_examples": test["examples"],
        "label_names": list(splits["train"].label_names),
        "attention_redundancy": test["attention_redundancy"],
        "best_validation_accuracy": max(
            result.history.get("val_accuracy", [float("nan")])
        ),
        **fitting.training_metrics(result),
        "args": vars(args),
    }
    if "attention_on_cues" in test:
        metrics["attention_on_cues"] = test["attention_on_cues"]
    if fitting.write_run(args.output, result.model, metrics, strategy):
        with cli.one_line_warnings():
            report = sentiment.save_attention_report(
                result.model,
                splits["test"],
                probabilities,
                attention,
                args.output,
            )
        print(
            f"wrote {args.output}/model.keras, metrics.json"
            + (", attention.*" if report else "")
        )
    fitting.print_metrics(
        metrics,
        (
            "test_accuracy",
            "attention_on_cues",
            "attention_redundancy",
            "epochs_trained",
            "epochs_restored",
            "train_seconds",
        ),
    )
    return metrics


if __name__ == "__main__":
    main(sys.argv[1:])
