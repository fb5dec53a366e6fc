"""models/distribute.py: which task is the chief under TF_CONFIG, where
each worker writes, and the `--distribute` names (the strategies train
in tests/examples/test_distributed.py)."""

import json

import pytest

from keras_attention.models import distribute

pytestmark = pytest.mark.backend_independent

CLUSTER = {"chief": ["a:1"], "worker": ["b:1", "c:1"]}


@pytest.mark.parametrize(
    "config, index",
    [
        ({}, 0),
        ({"task": {"type": "chief", "index": 0}, "cluster": CLUSTER}, 0),
        ({"task": {"type": "worker", "index": 0}, "cluster": CLUSTER}, 1),
        # Without a chief task, worker 0 is the chief.
        ({"task": {"type": "worker", "index": 0}}, 0),
        ({"task": {"type": "worker", "index": 2}}, 2),
        ({"task": {"type": "evaluator", "index": 0}}, 1000),
    ],
)
def test_tf_config_index(config, index):
    assert distribute.tf_config_index(config) == index


def test_only_the_chief_writes_to_the_output_directory(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert distribute.is_chief() and distribute.work_dir("run") == "run"
    config = {"task": {"type": "worker", "index": 1}, "cluster": CLUSTER}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    assert not distribute.is_chief()
    assert distribute.work_dir("run") == "run/worker-2"
    assert distribute.num_replicas(None) == 1
    assert not distribute.is_multi_worker(None)


def test_bad_names_and_a_malformed_tf_config_are_named(monkeypatch):
    with pytest.raises(ValueError, match="distribute='ring'"):
        distribute.get_strategy("ring")
    monkeypatch.setenv("TF_CONFIG", "[1, 2]")
    with pytest.raises(ValueError, match=r"TF_CONFIG='\[1, 2\]'"):
        distribute.get_strategy("multi-worker")
