"""The lanes of tests/conftest.py select what docs/testing.md says."""

import pathlib

import pytest

from tests import conftest

pytestmark = pytest.mark.backend_independent

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_path_of_the_torch_lane_exists():
    # A renamed test file would otherwise drop out of the PyTorch lane
    # without a word.
    missing = [p for p in conftest.TORCH_LANE if not (ROOT / p).exists()]
    assert not missing, missing


def test_the_torch_lane_holds_the_library_tests():
    library = {"ops", "scores", "layers", "seq2seq", "saving", "errors"}
    named = " ".join(conftest.TORCH_LANE)
    assert all(part in named for part in library), named


def test_every_mutant_still_finds_its_code():
    # A refactor that moves a mutant's text would otherwise leave
    # `python -m tests.mutants` planting nothing for it (it exits on it,
    # but nothing runs it in CI).
    from tests import mutants

    stale = [
        m.name
        for m in mutants.MUTANTS
        if (ROOT / m.path).read_text(encoding="utf-8").count(m.old) != 1
    ]
    assert not stale, stale
