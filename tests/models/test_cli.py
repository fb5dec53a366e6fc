"""The example scripts' command line, `keras_attention.models.cli`.

The scripts themselves (their --help, errors and presets) are tested in
tests/examples/test_cli.py.
"""

import argparse
import shlex

import pytest

from keras_attention.models import cli

pytestmark = pytest.mark.backend_independent


def _parser():
    parser = cli.Parser(prog="demo")
    parser.add_argument("--bucket-by-length", action="store_true")
    parser.add_argument("--shuffle", action=argparse.BooleanOptionalAction)
    parser.add_argument("--label-names", default="a,b")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1])
    parser.add_argument("--rate", type=float, default=0.1)
    return parser


def test_preset_flags_write_each_flag_as_the_parser_reads_it():
    parser = _parser()
    values = {
        "bucket_by_length": True,
        "shuffle": False,
        "label_names": "very bad,very good",
        "sizes": [2, 3],
        "rate": 1e-3,
    }
    flags = cli.preset_flags(parser, values)
    assert flags == (
        "--bucket-by-length --no-shuffle --label-names 'very bad,very good' "
        "--sizes 2 3 --rate 0.001"
    )
    assert vars(parser.parse_args(shlex.split(flags))) == values


def test_a_flag_without_a_value_at_its_default_is_left_out():
    assert cli.preset_flags(_parser(), {"bucket_by_length": False}) == ""


@pytest.mark.parametrize(
    "values, match",
    [
        ({"no_such": 1}, "a preset sets 'no_such', which no flag of demo"),
        ({"bucket_by_length": "yes"}, "no spelling of --bucket-by-length"),
    ],
)
def test_a_preset_no_flag_can_give_is_refused(values, match):
    with pytest.raises(ValueError, match=match):
        cli.preset_flags(_parser(), values)


def test_help_lists_the_preset_as_flags(capsys):
    parser = _parser()
    presets = {"fast": {"bucket_by_length": True, "rate": 0.5}}
    cli.add_preset_argument(parser, presets)
    with pytest.raises(SystemExit):
        cli.parse_with_preset(parser, presets, ["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "fast: --bucket-by-length --rate 0.5 (default: None)" in help_text
    assert (
        cli.parse_with_preset(parser, presets, ["--preset", "fast"]).rate == 0.5
    )


def test_the_docs_list_the_flags_that_may_differ_on_resume():
    # docs/examples.md and docs/distributed.md listed different flags
    # (issue 54): distributed.md says it, examples.md links there.
    import os
    import re

    docs = os.path.join(os.path.dirname(__file__), "..", "..", "docs")
    with open(os.path.join(docs, "distributed.md"), encoding="utf-8") as f:
        text = " ".join(f.read().split())
    listed = text.split("which may differ on resume: ", 1)[1].split(";")[0]
    flags = re.findall(r"`--([a-z-]+)`", listed)
    assert sorted(flags) == sorted(
        flag.replace("_", "-") for flag in cli.RESUMABLE_FLAGS
    )
    with open(os.path.join(docs, "examples.md"), encoding="utf-8") as f:
        examples = f.read()
    assert "distributed.md#resuming-a-killed-run" in examples
