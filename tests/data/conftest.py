"""Fixtures of the data-pipeline tests."""

import tempfile

import pytest


@pytest.fixture
def tfds_temp_in_tmp_path(monkeypatch, tmp_path):
    """Keeps the directories tensorflow-datasets leaves behind in `tmp_path`.

    Building a dataset with no prepared data calls TFDS's
    `DatasetInfo.initialize_from_bucket`, which makes a `tempfile.mkdtemp`
    directory and never removes it: 17 of them in /tmp per test run before.
    """
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
