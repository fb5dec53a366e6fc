"""Helpers of the keras-self-attention and keras-multi-head comparisons.

The weight mappings are not restated here: `port` reads the
`layer.set_weights(...)` call of a guide's checked block (the block after
`<!-- check: NAME -->` in docs/migration) and evaluates that very
expression on the old layer's weights, so a guide whose mapping is wrong
fails these tests, and a fixed guide is what they then check.
"""

import ast
import os

import numpy as np
from tensorflow import keras as tf_keras

from tests.test_migration_docs import _blocks

assert "tf_keras" in repr(tf_keras), "TF_USE_LEGACY_KERAS=1 is not in effect"

SELF_ATTENTION_GUIDE = "keras-self-attention.md"
MULTI_HEAD_GUIDE = "keras-multi-head.md"

if os.environ.get("TF_KERAS") != "1":  # pragma: no cover - conftest stops it
    raise RuntimeError("TF_KERAS=1 is needed: the old packages use tf.keras")


def guide_mapping(guide, check):
    """`(receiver, expression)` of the `set_weights` call in block `check`."""
    [block] = [b for b in _blocks(guide) if b["check"] == check]
    calls = [
        node
        for node in ast.walk(ast.parse(block["code"]))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "set_weights"
    ]
    assert len(calls) == 1, f"{guide} {check}: {len(calls)} set_weights calls"
    [call] = calls
    return ast.unparse(call.func.value), ast.unparse(call.args[0])


def port(layer, guide, check, **old):
    """Sets `layer`'s weights with the guide's own expression.

    `old` binds the names the guide's block uses for the old weights
    (`Wt`, `Wx`, `old_weights`, ...); the guide's receiver name is bound
    to `layer`. Returns the list given to `set_weights`.
    """
    receiver, expression = guide_mapping(guide, check)
    names = {"np": np, **old, receiver: layer}  # globals: comprehensions
    values = eval(expression, names)  # noqa: S307
    layer.set_weights(values)
    return values


def randomize(old_layer, seed, scale=0.4):
    """Normal draws (biases included, so none is zero) into `old_layer`."""
    rng = np.random.default_rng(seed)
    old_layer.set_weights(
        [
            rng.normal(scale=scale, size=w.shape).astype("float32")
            for w in old_layer.get_weights()
        ]
    )


def by_suffix(old_layer):
    """The old weights by the last part of their name: `Wt`, `ba`, ..."""
    return {
        w.name.split("/")[-1].split(":")[0].split("_")[-1]: w.numpy()
        for w in old_layer.weights
    }


def numpy(*tensors):
    return [np.asarray(t, dtype="float64") for t in tensors]


def close(actual, expected, atol=1e-5):
    np.testing.assert_allclose(
        np.asarray(actual, dtype="float64"),
        np.asarray(expected, dtype="float64"),
        rtol=1e-5,
        atol=atol,
    )


def padded_ids(rng, batch=3, length=6, vocab=20):
    """Right-padded token ids: lengths `length`, `length - 2`, ..., >= 1."""
    ids = rng.integers(1, vocab, size=(batch, length))
    for row in range(batch):
        ids[row, max(1, length - 2 * row) :] = 0
    return ids
