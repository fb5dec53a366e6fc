"""Attention rollout and attention flow (Abnar & Zuidema, 2020).

Raw weights of a deep layer mix tokens that earlier layers already mixed.
Both methods follow the attention through the layers down to the input
tokens. Each layer's heads are fused (mean, max or min), the residual
connection is added as `residual * I + (1 - residual) * A` (the paper's
`(A + I) / 2` at `residual=0.5`) and rows are renormalized. Rollout
multiplies the layers, `Ã_L ... Ã_1`; flow treats them as a graph with a
node per token and layer, an edge of capacity `Ã_l[i, j]` from token `i`
of layer `l` to token `j` of layer `l - 1`, and takes the maximum flow
from each last-layer token to each input token (networkx), each row
normalized to sum to 1.

Example:

>>> weights = [np.full((1, 2, 3, 3), 1 / 3)] * 2
>>> rollout = keras_attention.visualize.attention_rollout(weights)
>>> rollout.shape
(1, 3, 3)
>>> np.round(rollout[0, 0], 3).tolist()
[0.5, 0.25, 0.25]
"""

from collections.abc import Sequence

import numpy as np

HEAD_FUSIONS = ("mean", "max", "min")


def _fused_layers(weights, residual, head_fusion) -> list[np.ndarray]:
    """Each layer's `(batch, Tq, Tk)` matrix: heads fused, residual added,
    rows renormalized (an all-zero row stays zero)."""
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(
            "Received an invalid value for argument `head_fusion`, "
            f"expected one of {list(HEAD_FUSIONS)}. "
            f"Received: head_fusion={head_fusion!r}"
        )
    if isinstance(residual, bool) or not 0.0 <= float(residual) <= 1.0:
        raise ValueError(
            "Received an invalid value for argument `residual`, expected a "
            f"number in [0, 1]. Received: residual={residual!r}"
        )
    if isinstance(weights, np.ndarray) or not isinstance(weights, Sequence):
        weights = _layer_list(weights)
    arrays = [np.asarray(w, dtype="float64") for w in weights]
    _check_shapes(arrays)
    fused = []
    for array in arrays:
        matrix = getattr(np, head_fusion)(array, axis=1)
        if matrix.shape[1] == matrix.shape[2]:
            eye = np.eye(matrix.shape[1])[None]
            matrix = residual * eye + (1.0 - residual) * matrix
        total = matrix.sum(axis=-1, keepdims=True)
        fused.append(np.divide(matrix, total, where=total > 0, out=matrix))
    return fused


def _layer_list(weights):
    """A `(layers, batch, heads, T, T)` array (or a dict of layers, as
    `collect_attention` returns) as a list of layers."""
    if isinstance(weights, dict):
        return list(weights.values())
    array = np.asarray(weights)
    if array.ndim != 5:
        raise ValueError(
            "`weights` must be a list of per-layer `(batch, heads, T, T)` "
            "arrays, first layer first. Received: weights with shape "
            f"{array.shape}"
        )
    return list(array)


def _check_shapes(arrays):
    """One batch and one key length `T`; every layer but the last square."""
    if not arrays:
        raise ValueError(
            "`weights` is empty: give at least one layer's `(batch, heads, "
            "T, T)` weights. Received: weights=[]"
        )
    first = arrays[0].shape
    for i, array in enumerate(arrays):
        shape = array.shape
        square = array.ndim == 4 and shape[2] == shape[3]
        fits = (
            array.ndim == 4
            and len(first) == 4
            and shape[0] == first[0]
            and shape[3] == first[3]
            and (square or i == len(arrays) - 1)
        )
        if not fits:
            raise ValueError(
                "Every layer's weights must be `(batch, heads, T, T)` with "
                "one batch size and one T; only the last layer may have "
                "other queries (hops, a pooling query). Received: "
                f"weights[0].shape={first}, weights[{i}].shape={shape}"
            )


def attention_rollout(
    weights, residual: float = 0.5, head_fusion: str = "mean"
) -> np.ndarray:
    """Each last-layer token's attention over the input tokens, rolled out.

    `R = Ã_L ... Ã_2 Ã_1` with `Ã_l = residual * I + (1 - residual) *
    fuse(A_l)` renormalized by rows, as in Abnar & Zuidema (2020) and
    their code (samiraabnar/attention_flow, `compute_joint_attention`).
    Rows of the result sum to 1 (a query whose weights are all zero, as
    for padding, keeps a zero row when `residual=0`). With one layer and
    `residual=0`, the result is the fused weights.

    Args:
        weights: A list of per-layer weights `(batch, heads, T, T)`, first
            layer first (a dict from `collect_attention` is taken in its
            order, or a `(layers, batch, heads, T, T)` array). The last
            layer may have `Tq != T` queries (structured-attention hops, a
            pooling query), which take no residual.
        residual: Weight of the identity (the skip connection), in `[0,
            1]`. Defaults to `0.5`, the paper's `(A + I) / 2`.
        head_fusion: How heads are combined: `"mean"`, `"max"` or
            `"min"`. Defaults to `"mean"`.

    Returns:
        `(batch, Tq, T)` float64: row `i` is last-layer token `i`'s share
        of each input token.

    Raises:
        ValueError: For an empty list, shapes that do not chain, an
            unknown `head_fusion` or `residual` outside `[0, 1]`.

    Example:

    >>> uniform = np.full((1, 1, 2, 2), 0.5)  # (batch, heads, T, T)
    >>> rollout = keras_attention.visualize.attention_rollout([uniform])
    >>> rollout.tolist()  # (I + A) / 2
    [[[0.75, 0.25], [0.25, 0.75]]]
    """
    layers = _fused_layers(weights, residual, head_fusion)
    joint = layers[0]
    for layer in layers[1:]:
        joint = layer @ joint
    return joint


def attention_flow(
    weights, residual: float = 0.5, head_fusion: str = "mean"
) -> np.ndarray:
    """Each last-layer token's maximum flow to the input tokens.

    The layers (heads fused, residual added, as in `attention_rollout`)
    form a graph: a node per token and layer (the input tokens are layer
    0), an edge from token `i` of layer `l` to token `j` of layer `l - 1`
    with capacity `Ã_l[i, j]`. Row `i` of the result is the maximum flow
    from token `i` of the last layer to each input token, normalized to
    sum to 1, as samiraabnar/attention_flow's `compute_flows` does
    (networkx, Edmonds-Karp). It costs `T²` max-flow problems per
    example: meant for sentences, not long documents.

    Args:
        weights: As for `attention_rollout`.
        residual: As for `attention_rollout`. Defaults to `0.5`.
        head_fusion: `"mean"`, `"max"` or `"min"`. Defaults to `"mean"`.

    Returns:
        `(batch, Tq, T)` float64, rows summing to 1 (zero where a token
        reaches no input).

    Raises:
        ValueError: As for `attention_rollout`.
        ImportError: If networkx is not installed (`pip install
            networkx`, or the `examples` extra).

    Example:

    >>> identity = np.eye(2)[None, None]  # each token attends to itself
    >>> flow = keras_attention.visualize.attention_flow([identity, identity])
    >>> flow.tolist()
    [[[1.0, 0.0], [0.0, 1.0]]]
    """
    import networkx as nx

    layers = _fused_layers(weights, residual, head_fusion)
    flows = np.zeros(layers[-1].shape)
    for b in range(flows.shape[0]):
        graph = nx.DiGraph()
        for depth, layer in enumerate(layers, start=1):
            rows, columns = np.nonzero(layer[b] > 0)
            graph.add_edges_from(
                ((depth, i), (depth - 1, j), {"capacity": layer[b, i, j]})
                for i, j in zip(rows.tolist(), columns.tolist(), strict=True)
            )
        top = len(layers)
        for i in range(flows.shape[1]):
            for j in range(flows.shape[2]):
                if (top, i) in graph and (0, j) in graph:
                    flows[b, i, j] = nx.maximum_flow_value(
                        graph,
                        (top, i),
                        (0, j),
                        flow_func=nx.algorithms.flow.edmonds_karp,
                    )
    total = flows.sum(axis=-1, keepdims=True)
    return np.divide(flows, total, where=total > 0, out=flows)
