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


@pytest.mark.parametrize(
    "devices, sizes, shape",
    [
        # Sentiment: embedding dim 64, attention units 32.
        (4, (64, 32), (1, 4)),
        # 4 heads, 2 key/value heads, width 16 on 8 devices.
        (8, (4, 2, 16), (4, 2)),
        (8, (6, 6, 48), (4, 2)),
        # Nothing divides: data parallel.
        (4, (3, 9), (4, 1)),
        (1, (4,), (1, 1)),
    ],
)
def test_model_mesh_keeps_heads_whole(devices, sizes, shape):
    batch, model = distribute.model_mesh_shape(devices, sizes)
    assert (batch, model) == shape
    assert batch * model == devices
    assert all(size % model == 0 for size in sizes)


def test_model_parallel_is_jax_only():
    # The TensorFlow lane runs this file; JAX trains it in
    # tests/examples/test_distributed.py.
    with pytest.raises(ValueError, match="needs the JAX backend"):
        distribute.get_strategy("model", (4,))
