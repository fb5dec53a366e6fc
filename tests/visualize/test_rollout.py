"""Attention rollout and flow against a NumPy port of the authors' code.

`_reference_rollout` and `_reference_flow` follow samiraabnar/
attention_flow (`attention_graph_util.py`: `compute_joint_attention`,
`get_adjmat` and `compute_node_flow`, with the head averaging and
`(A + I)` renormalization of its notebooks), written out here, per
example, in the layout of that code: one matrix per layer, an adjacency
matrix over `(layers + 1) * T` nodes and `networkx.maximum_flow_value`
with Edmonds-Karp between each last-layer node and each input node.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from keras_attention import visualize
from tests.profiles import examples

nx = pytest.importorskip("networkx")

# NumPy and networkx only, no backend: the TensorFlow lane runs it.
pytestmark = pytest.mark.backend_independent


def _stochastic(rng, *shape):
    weights = rng.random(shape) ** 2
    return weights / weights.sum(axis=-1, keepdims=True)


def _reference_layers(weights, fusion):
    """Per example: `(layers, T, T)`, heads fused, `A + I` renormalized."""
    stack = np.stack([getattr(np, fusion)(w, axis=1) for w in weights], 1)
    eye = np.eye(stack.shape[-1])[None, None]
    augmented = stack + eye
    return augmented / augmented.sum(axis=-1)[..., None]


def _reference_rollout(weights, fusion="mean"):
    out = []
    for layers in _reference_layers(weights, fusion):
        joint = np.zeros(layers.shape)
        joint[0] = layers[0]
        for i in range(1, layers.shape[0]):
            joint[i] = layers[i].dot(joint[i - 1])
        out.append(joint[-1])
    return np.stack(out)


def _adjacency(layers):
    count, length, _ = layers.shape
    adjacency = np.zeros(((count + 1) * length, (count + 1) * length))
    for i in range(1, count + 1):
        for k_from in range(length):
            for k_to in range(length):
                adjacency[i * length + k_from][(i - 1) * length + k_to] = (
                    layers[i - 1][k_from][k_to]
                )
    return adjacency


def _reference_flow(weights, fusion="mean"):
    out = []
    for layers in _reference_layers(weights, fusion):
        count, length, _ = layers.shape
        adjacency = _adjacency(layers)
        graph = nx.from_numpy_array(adjacency, create_using=nx.DiGraph())
        for i, j in zip(*np.nonzero(adjacency), strict=True):
            graph[i][j]["capacity"] = adjacency[i, j]
        flows = np.zeros((length, length))
        for u in range(length):
            node = count * length + u
            for v in range(length):
                flows[u, v] = nx.maximum_flow_value(
                    graph, node, v, flow_func=nx.algorithms.flow.edmonds_karp
                )
            flows[u] /= flows[u].sum()
        out.append(flows)
    return np.stack(out)


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
def test_rollout_and_flow_equal_the_reference_code(fusion):
    rng = np.random.default_rng(7)
    weights = [_stochastic(rng, 2, 3, 4, 4) for _ in range(3)]
    rollout = visualize.attention_rollout(weights, head_fusion=fusion)
    np.testing.assert_allclose(
        rollout, _reference_rollout(weights, fusion), atol=1e-12
    )
    flow = visualize.attention_flow(weights, head_fusion=fusion)
    want = _reference_flow(weights, fusion)
    np.testing.assert_allclose(flow, want, atol=1e-9)
    assert rollout.shape == flow.shape == (2, 4, 4)
    # Flow is not rollout: the parity above is not one number twice.
    assert np.abs(rollout - flow).max() > 1e-3


def test_hand_checked_two_layers_without_residual():
    first = np.array([[[[1.0, 0.0], [0.5, 0.5]]]])
    second = np.array([[[[0.5, 0.5], [0.0, 1.0]]]])
    rollout = visualize.attention_rollout([first, second], residual=0.0)
    # second @ first: row 0 = 0.5 [1, 0] + 0.5 [0.5, 0.5].
    np.testing.assert_allclose(rollout[0], [[0.75, 0.25], [0.5, 0.5]])
    flow = visualize.attention_flow([first, second], residual=0.0)
    # Top token 0 reaches input 0 through both middle tokens (0.5 + 0.5)
    # and input 1 only through middle token 1 (0.5): [1, 0.5] / 1.5.
    # Top token 1 has one edge, of 1, to middle token 1: [0.5, 0.5].
    np.testing.assert_allclose(flow[0], [[2 / 3, 1 / 3], [0.5, 0.5]])


def test_hand_checked_residual_and_head_fusions():
    heads = np.array([[[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]]])
    half = np.full((2, 2), 0.5)
    mean = visualize.attention_rollout([heads], residual=0.0)
    np.testing.assert_allclose(mean[0], half)
    maximum = visualize.attention_rollout([heads], 0.0, head_fusion="max")
    np.testing.assert_allclose(maximum[0], half)
    # The minimum over heads is 0: with the residual only I is left.
    minimum = visualize.attention_rollout([heads], 0.5, head_fusion="min")
    np.testing.assert_allclose(minimum[0], np.eye(2))
    # (A + I) / 2 of the swap matrix.
    swap = heads[:, 1:]
    np.testing.assert_allclose(visualize.attention_rollout([swap])[0], half)


def test_last_layer_may_have_other_queries():
    rng = np.random.default_rng(1)
    square = _stochastic(rng, 2, 2, 5, 5)
    hops = _stochastic(rng, 2, 3, 1, 5)
    rollout = visualize.attention_rollout([square, hops])
    fused = (0.5 * np.eye(5) + 0.5 * square.mean(axis=1))[:, None]
    want = hops.mean(axis=1)[:, :, None, :] @ fused
    np.testing.assert_allclose(rollout, want[:, 0], atol=1e-12)
    flow = visualize.attention_flow([square, hops])
    assert flow.shape == (2, 1, 5)
    np.testing.assert_allclose(flow.sum(-1), 1.0)


def test_a_dict_from_collect_attention_is_taken_in_order():
    rng = np.random.default_rng(2)
    first, second = _stochastic(rng, 1, 2, 3, 3), _stochastic(rng, 1, 2, 3, 3)
    by_dict = visualize.attention_rollout({"b": first, "a": second})
    np.testing.assert_allclose(
        by_dict, visualize.attention_rollout([first, second])
    )
    stacked = visualize.attention_rollout(np.stack([first, second]))
    np.testing.assert_allclose(stacked, by_dict)


def test_fully_masked_query_keeps_a_zero_row_without_residual():
    weights = np.array([[[[0.5, 0.5], [0.0, 0.0]]]])
    rollout = visualize.attention_rollout([weights], residual=0.0)
    np.testing.assert_array_equal(rollout[0], [[0.5, 0.5], [0.0, 0.0]])
    assert np.all(np.isfinite(visualize.attention_flow([weights], 0.0)))


@examples(15)
@given(
    seed=st.integers(0, 2**16),
    layers=st.integers(1, 3),
    length=st.integers(1, 4),
    residual=st.floats(0.05, 1.0),
    fusion=st.sampled_from(["mean", "max", "min"]),
)
def test_rows_sum_to_one(seed, layers, length, residual, fusion):
    rng = np.random.default_rng(seed)
    weights = [_stochastic(rng, 2, 2, length, length) for _ in range(layers)]
    for method in (visualize.attention_rollout, visualize.attention_flow):
        result = method(weights, residual=residual, head_fusion=fusion)
        assert result.shape == (2, length, length)
        assert np.all(result >= 0)
        np.testing.assert_allclose(result.sum(-1), 1.0, atol=1e-9)


@examples(15)
@given(seed=st.integers(0, 2**16), length=st.integers(1, 5))
def test_one_layer_without_residual_gives_the_weights_back(seed, length):
    rng = np.random.default_rng(seed)
    weights = _stochastic(rng, 2, 1, length, length)
    for method in (visualize.attention_rollout, visualize.attention_flow):
        result = method([weights], residual=0.0)
        np.testing.assert_allclose(result, weights[:, 0], atol=1e-9)
