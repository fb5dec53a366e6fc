"""Command-line plumbing of the example scripts, standard library only.

The scripts parse their arguments with `Parser` before they import Keras
or TensorFlow, so `--help` and a bad argument answer at once: they load
this file by its path, not as `keras_attention.models.cli`,
whose import would first run the package's `__init__` and with it Keras
and TensorFlow. So it imports nothing but the standard library at the
top; what needs the package imports it inside a function. A user error
(a bad argument, a missing, empty or malformed file, no trained model)
prints one line `error: ...` to stderr and exits with status 2, without a
traceback: `Parser.error`, `fail` and `user_errors` do that. Warnings of
the package print as one line `warning: ...` (`one_line_warnings`).
"""

import argparse
import contextlib
import json
import os
import re
import shlex
import sys
import tempfile
import textwrap
import warnings

#: The `--distribute` choices (`keras_attention.models.distribute.NAMES`).
DISTRIBUTE_NAMES = ("none", "mirrored", "multi-worker", "model")


def _one_line(message) -> str:
    """`message` on one line: its line breaks (and their indent) as spaces.

    Only the breaks: spaces inside a line are kept, so that a quoted
    input such as `'   '` is shown as it was received.
    """
    return re.sub(r"\s*[\r\n]+\s*", " ", str(message).strip())


def fail(message):
    """Prints `error: MESSAGE` on one line to stderr and exits with 2."""
    print("error: " + _one_line(message), file=sys.stderr)
    sys.exit(2)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends `(default: ...)` unless the help already says the default.

    A flag whose default depends on others (`--label-names`) explains it
    in its own words; argparse would add a second, `(default: None)`.
    Lines break at spaces only, so that a flag or a name such as
    `--data-root` or `sst5-sentences` is never cut at its hyphen.
    """

    def _get_help_string(self, action):
        if "(default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)

    def _split_lines(self, text, width):
        return textwrap.wrap(
            " ".join(text.split()), width, break_on_hyphens=False
        )


class Parser(argparse.ArgumentParser):
    """An `ArgumentParser` that shows defaults and errs in one line."""

    def __init__(self, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(**kwargs)

    def error(self, message):
        fail(f"{message} (see {self.prog} --help)")


@contextlib.contextmanager
def user_errors(*types):
    """Turns `types` (default `OSError`, `ValueError`) into `fail`."""
    caught = tuple(types) or (OSError, ValueError)
    try:
        yield
    except caught as error:
        fail(error)


def _format_warning(message, category, filename, lineno, line=None):
    return "warning: " + _one_line(message) + "\n"


@contextlib.contextmanager
def one_line_warnings():
    """Warnings print as `warning: MESSAGE`, one line, inside the block."""
    saved = warnings.formatwarning
    warnings.formatwarning = _format_warning
    try:
        yield
    finally:
        warnings.formatwarning = saved


# What TensorFlow 2.21's C++ logging prints at import whatever
# TF_CPP_MIN_LOG_LEVEL says: absl's preamble and INFO lines ("I1201
# 09:41:02.123 ... port.cc:153] oneDNN custom operations are on ...").
_ABSL_INFO = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called"
    r" are written to STDERR|I\d{4} \S+ +\d+ \S+:\d+\] .*)$"
)


def import_tensorflow():
    """Imports TensorFlow, honouring `TF_CPP_MIN_LOG_LEVEL` for its INFO lines.

    TensorFlow 2.21 prints four to six INFO lines while it loads even when
    `TF_CPP_MIN_LOG_LEVEL` (which the scripts set to 3 unless the user set
    it) asks for none, so that a one-line `error: ...` came after six lines
    of noise. While it loads, the process's stderr (file descriptor 2,
    where the C++ logging writes) goes to a temporary file; the lines are
    then passed on, less absl's INFO lines when the level is 1 or more.
    Anything else (warnings, a failed import's own output) still prints.
    Does nothing if TensorFlow is already imported.
    """
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            _pass_on(captured.read().decode("utf-8", "replace"))


def keras_backend() -> str:
    """The backend Keras will load, read as Keras reads it
    (`KERAS_BACKEND`, else `keras.json` in `KERAS_HOME` or `~/.keras`),
    without importing Keras."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get(
        "KERAS_HOME", os.path.join(os.path.expanduser("~"), ".keras")
    )
    try:
        with open(os.path.join(home, "keras.json")) as f:
            return str(json.load(f).get("backend", "tensorflow"))
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def _pass_on(text):
    """Prints `text` to stderr, less absl's INFO lines if asked to."""
    quiet = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") not in ("", "0")
    kept = [
        line
        for line in text.splitlines()
        if not (quiet and _ABSL_INFO.match(line))
    ]
    if kept:
        print("\n".join(kept), file=sys.stderr)


def _number(text, convert, accept, expected):
    """`convert(text)` if `accept` takes it, else an argparse error."""
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not accept(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_int(text):
    """An `argparse` type: an integer >= 1."""
    return _number(text, int, lambda v: v >= 1, "a positive integer")


def non_negative_int(text):
    """An `argparse` type: an integer >= 0."""
    return _number(text, int, lambda v: v >= 0, "a non-negative integer")


def seed_int(text):
    """An `argparse` type: a seed, an integer in [0, 2**32)."""
    return _number(
        text, int, lambda v: 0 <= v < 2**32, "an integer in [0, 2**32)"
    )


def positive_float(text):
    """An `argparse` type: a float > 0."""
    return _number(text, float, lambda v: v > 0, "a positive number")


def non_negative_float(text):
    """An `argparse` type: a finite float >= 0."""
    return _number(
        text,
        float,
        lambda v: 0.0 <= v < float("inf"),
        "a non-negative number",
    )


def vocabulary_size(text):
    """An `argparse` type: an integer >= 3 (padding, `[UNK]`, a word)."""
    return _number(
        text,
        int,
        lambda v: v >= 3,
        "an integer of at least 3 (padding, [UNK] and one word)",
    )


def sentence(text):
    """An `argparse` type: a string with a word (`text.check_words`' rule).

    The package is imported here, when the option is given, not for
    `--help`.
    """
    from keras_attention.text import has_words

    if not has_words(text):
        raise argparse.ArgumentTypeError(
            "expected a sentence with at least one word (a letter or a "
            f"digit), got {text!r}"
        )
    return text


def fraction(text):
    """An `argparse` type: a float in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(
            f"expected a number in [0, 1), got {text!r}"
        )
    return value


def existing_file(text):
    """An `argparse` type: the path of a non-empty file."""
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    if os.path.getsize(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is empty")
    return text


def run_directory(text):
    """An `argparse` type: not a file, and not under one.

    Checked when parsed, so that a file in the way is a one-line error
    before any training, not a traceback after it; `make_run_directory`
    then makes it (or fails in one line) before the data loads.
    """
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is a file; the run directory must be a directory"
        )
    parent = os.path.abspath(text)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(
            f"cannot make {text!r}: {parent!r} is a file"
        )
    return text


def make_run_directory(path):
    """Makes the run directory before training; a failure is `fail`."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        fail(f"argument --output: cannot make {path!r}: {error}")


#: The flags a killed run may be resumed with other values of.
RESUMABLE_FLAGS = ("epochs", "patience", "max_minutes", "quiet", "output")
#: Where a run records its flags, for `check_resume`.
ARGUMENTS_FILE = "arguments.json"


def check_resume(args):
    """Refuses to resume a killed run's backup under other settings.

    A killed run leaves `OUTPUT/backup` (Keras's `BackupAndRestore`), and
    the same command resumes it; with a model of other sizes, Keras failed
    to restore it with a 46-line traceback. Each run records its flags in
    `OUTPUT/arguments.json`; if a backup is there and a flag other than
    `RESUMABLE_FLAGS` differs, this is `fail` naming the flags. Then it
    records this run's flags.
    """
    settings = {
        key: value
        for key, value in vars(args).items()
        if key not in RESUMABLE_FLAGS
    }
    # As JSON reads them back: tuples as lists, anything else as text.
    settings = json.loads(json.dumps(settings, default=str))
    path = os.path.join(args.output, ARGUMENTS_FILE)
    backups = [
        os.path.join(root, "backup")
        for root, folders, _ in os.walk(args.output)
        if "backup" in folders
    ]
    if backups and os.path.exists(path):
        with open(path) as f:
            recorded = json.load(f)
        changed = sorted(
            key
            for key in set(settings) | set(recorded)
            if settings.get(key) != recorded.get(key)
        )
        if changed:
            flags = ", ".join(
                f"--{key.replace('_', '-')} {recorded.get(key)!r} "
                f"(now {settings.get(key)!r})"
                for key in changed
            )
            fail(
                f"{backups[0]} is the backup of a killed run with other "
                f"settings: {flags}. Run the same command to resume it, "
                "or delete the backup (or pick another --output) to start "
                "afresh."
            )
    # Workers of a multi-worker run write the same file: atomically.
    temporary = f"{path}.{os.getpid()}"
    with open(temporary, "w") as f:
        json.dump(settings, f, indent=2)
    os.replace(temporary, path)


def add_training_arguments(group, epochs, batch_size, learning_rate, seed):
    """`--epochs`, `--batch-size`, `--learning-rate`, `--patience`, `--seed`.

    The defaults differ per example; `seed` is the help text of `--seed`.
    """
    group.add_argument(
        "--epochs", type=positive_int, default=epochs, help="most epochs"
    )
    group.add_argument(
        "--batch-size", type=positive_int, default=batch_size, help="batch size"
    )
    group.add_argument(
        "--learning-rate",
        type=positive_float,
        default=learning_rate,
        help="Adam learning rate",
    )
    group.add_argument(
        "--patience",
        type=positive_int,
        default=3,
        help="epochs without a lower validation loss before stopping",
    )
    group.add_argument("--seed", type=seed_int, default=0, help=seed)


def add_run_arguments(group):
    """`--distribute`, `--cpu-devices`, `--quiet`: the training scaffold's.

    Their values go to `keras_attention.models.fitting.strategy_from_flags`;
    defined here so that `--help` imports no TensorFlow.
    """
    group.add_argument(
        "--distribute",
        "--distribution",
        choices=list(DISTRIBUTE_NAMES),
        default="none",
        help="mirrored: all local devices (tf.distribute.MirroredStrategy, "
        "or keras.distribution.DataParallel on JAX); multi-worker: the "
        "cluster in TF_CONFIG; model: the attention heads and embeddings "
        "split over the local devices (keras.distribution.ModelParallel, "
        "JAX only); see docs/distributed.md",
    )
    group.add_argument(
        "--cpu-devices",
        type=positive_int,
        help="split the CPU into this many logical devices first, so that "
        "--distribute mirrored or model has several to use without a GPU "
        "(see docs/distributed.md)",
    )
    group.add_argument(
        "--quiet",
        action="store_true",
        help="one line per epoch instead of a progress bar",
    )


def model_path(output, script):
    """`OUTPUT/model.keras`, or `fail` saying how to train one first."""
    path = os.path.join(output, "model.keras")
    if not os.path.isfile(path):
        fail(
            f"no trained model in {output}, train first with: python "
            f"{script} --output {output}"
        )
    return path


def add_preset_argument(parser, presets):
    """Adds `--preset NAME`: a named set of defaults for other flags.

    `presets` maps each name to `{dest: value}` (the `dest` of the flags
    it sets, e.g. `"learning_rate"`). `parse_with_preset` applies it and
    writes into `--help` what each preset sets, as flags to copy
    (`preset_flags`). Flags given explicitly still override the preset's
    values.
    """
    parser.add_argument(
        "--preset",
        choices=list(presets),
        help="set the defaults of other flags (flags given explicitly "
        "override them)",
    )


def _action(parser, dest):
    for action in parser._actions:
        if action.dest == dest and action.option_strings:
            return action
    raise ValueError(
        f"a preset sets {dest!r}, which no flag of {parser.prog} sets"
    )


def _flag(action, value):
    """The command-line words that set `action`'s `dest` to `value`."""
    option = action.option_strings[0]
    if action.nargs == 0:
        # A flag without a value: store_true / store_false, or both
        # spellings of a `BooleanOptionalAction` (`--x` / `--no-x`).
        for spelling in action.option_strings:
            negated = spelling.startswith("--no-")
            if isinstance(action, argparse.BooleanOptionalAction):
                if value is (not negated):
                    return [spelling]
            elif value == action.const:
                return [spelling]
        if value == action.default:
            return []
        raise ValueError(f"no spelling of {option} sets it to {value!r}")
    values = value if isinstance(value, (list, tuple)) else [value]
    return [option] + [str(v) for v in values]


def preset_flags(parser, values) -> str:
    """A preset's `{dest: value}` as flags that `parser` parses back to it.

    What `--help` shows, to copy as it stands: a flag that takes no value
    is written alone (`--bucket-by-length`), a value with spaces quoted.
    """
    words = []
    for dest, value in values.items():
        words += _flag(_action(parser, dest), value)
    return shlex.join(words)


def parse_with_preset(parser, presets, argv=None):
    """`parser.parse_args(argv)` with the defaults of the chosen `--preset`.

    Call it once every flag is added: it also writes into `--preset`'s help
    the flags each preset stands for.
    """
    preset = _action(parser, "preset")
    lines = [
        f"{name}: {preset_flags(parser, values)}"
        for name, values in presets.items()
    ]
    preset.help = (
        preset.help.split(";")[0] + "; " + "; ".join(lines).replace("%", "%%")
    )
    probe = Parser(add_help=False, prog=parser.prog)
    probe.add_argument("--preset", choices=list(presets))
    known, _ = probe.parse_known_args(argv)
    if known.preset is not None:
        parser.set_defaults(**presets[known.preset])
    return parser.parse_args(argv)
