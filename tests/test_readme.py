"""The README has Python snippets (tests/test_doc_blocks.py runs them on
every backend), and its test command is CI's."""

import pathlib
import re

import pytest

# Checks the README, not a backend: the TensorFlow lane runs it.
pytestmark = pytest.mark.backend_independent

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SNIPPETS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_readme_has_snippets():
    assert len(SNIPPETS) >= 5


def test_ci_runs_the_readme_test_command():
    quickstart = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```(?:bash|sh)\n(.*?)```", quickstart, flags=re.S)
    assert len(commands) == 1, "the Quickstart is one block of two commands"
    lines = [x for x in commands[0].strip().splitlines() if x.strip()]
    assert len(lines) == 2, lines
    test_commands = [
        part.strip() for part in lines[1].split("&&") if "pytest" in part
    ]
    assert test_commands, lines[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for command in test_commands:
        assert command in ci, command
