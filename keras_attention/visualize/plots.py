"""Heatmaps of attention weights with token labels (matplotlib).

matplotlib is imported inside the plotting functions, so importing
`keras_attention` (or this module) never imports it. Figures are built as
`matplotlib.figure.Figure` objects without `pyplot`: no GUI backend and no
global figure state are involved, so the functions are safe on headless
machines (Agg) and in threads. Show a figure in a notebook by evaluating
it, or save it with `fig.savefig(path)`.

Example:

>>> fig = keras_attention.visualize.plot_attention(
...     [[0.1, 0.7, 0.2]], x_labels=["not", "bad", "film"], title="hop 1"
... )
>>> len(fig.axes)
2
"""

import os
from collections.abc import Sequence

import numpy as np


def _as_2d(weights, name: str) -> np.ndarray:
    array = np.asarray(weights, dtype="float32")
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.size == 0:
        raise ValueError(
            f"`{name}` must be a non-empty 1-D or 2-D array (rows x "
            f"columns). Received: {name}.shape={array.shape}"
        )
    return array


def _check_labels(labels, expected: int, name: str, shape) -> list[str]:
    labels = [str(label) for label in labels]
    if len(labels) != expected:
        raise ValueError(
            f"`{name}` has shape ({len(labels)},) but the weights have shape "
            f"{tuple(shape)}: expected {expected} labels."
        )
    return labels


def plot_attention(
    weights,
    x_labels: Sequence[str],
    y_labels: Sequence[str] | None = None,
    title: str | None = None,
    ax=None,
    vmin: float | None = None,
    vmax: float | None = None,
    colorbar: bool = True,
    colorbar_label: str = "attention weight",
):
    """Draws attention weights as a heatmap with token labels.

    Rows are the attending side (hops, target words, heads) and columns the
    attended tokens. A 1-D array is drawn as one row. The colour scale runs
    from `vmin` (default: 0, or the smallest weight if negative) to `vmax`
    (default: the largest weight); the colour bar is labelled
    `colorbar_label`.

    Args:
        weights: Array `(rows, columns)` (or `(columns,)`), e.g.
            `(num_hops, time)` from `StructuredSelfAttention` or
            `(target_time, source_time)` from a decoder.
        x_labels: One label per column, e.g. the tokens of the sentence.
        y_labels: One label per row. Defaults to `0, 1, ...`.
        title: Optional title of the plot.
        ax: Optional `matplotlib.axes.Axes` to draw into; a new figure is
            made when not given.
        vmin: Weight drawn in the lowest colour. Defaults to `None`.
        vmax: Weight drawn in the highest colour. Defaults to `None`.
        colorbar: Whether to draw a colour bar. Defaults to `True`.
        colorbar_label: Label of the colour bar. Defaults to
            `"attention weight"`.

    Returns:
        The `matplotlib.figure.Figure` holding the plot.

    Raises:
        ValueError: If `weights` is not 1-D or 2-D, or the labels do not
            match its shape (the message names both shapes).

    Example:

    >>> fig = keras_attention.visualize.plot_attention(
    ...     [[0.1, 0.7, 0.2], [0.3, 0.3, 0.4]],
    ...     x_labels=["not", "bad", "film"],
    ...     y_labels=["hop 1", "hop 2"],
    ... )
    >>> len(fig.axes)  # the heatmap and its colour bar
    2
    """
    array = _as_2d(weights, "weights")
    rows, columns = array.shape
    x_labels = _check_labels(x_labels, columns, "x_labels", array.shape)
    if y_labels is None:
        y_labels = [str(i) for i in range(rows)]
    y_labels = _check_labels(y_labels, rows, "y_labels", array.shape)
    if ax is None:
        from matplotlib.figure import Figure

        fig = Figure(
            figsize=(min(2.0 + 0.45 * columns, 40.0), 1.6 + 0.4 * rows),
            layout="constrained",
        )
        ax = fig.add_subplot()
    fig = ax.figure
    low, high = _scale([array], vmin, vmax)
    image = ax.imshow(array, cmap="viridis", aspect="auto", vmin=low, vmax=high)
    ax.set_xticks(
        range(columns),
        labels=x_labels,
        rotation=60,
        ha="right",
        rotation_mode="anchor",
    )
    ax.set_yticks(range(rows), labels=y_labels)
    if title is not None:
        ax.set_title(title)
    if colorbar:
        fig.colorbar(image, ax=ax, label=colorbar_label)
    return fig


def _scale(arrays, vmin=None, vmax=None):
    """The colour range of `arrays`: from 0 (or below) to the top weight.

    Anchoring the scale at 0 keeps "no attention" one colour across plots;
    the top follows the data so small weights stay visible.
    """
    low = vmin
    if low is None:
        low = min(0.0, *(float(np.nanmin(a)) for a in arrays))
    high = vmax
    if high is None:
        high = max(float(np.nanmax(a)) for a in arrays)
    return low, max(high, low + 1e-6)


def plot_attention_grid(
    weights_list: Sequence,
    x_labels_list: Sequence[Sequence[str]],
    y_labels_list: Sequence[Sequence[str] | None] | None = None,
    titles: Sequence[str | None] | None = None,
    path: str | os.PathLike | None = None,
    colorbar_label: str = "attention weight",
):
    """Stacks one attention heatmap per sentence in a single figure.

    All panels share one colour scale (0 to the largest weight of any
    panel), shown by a single colour bar labelled `colorbar_label`, so
    the same colour means the same weight in every panel.

    Args:
        weights_list: One 1-D or 2-D weights array per sentence (see
            `plot_attention`); the arrays may differ in shape.
        x_labels_list: One list of column labels per sentence.
        y_labels_list: Optional list of row labels per sentence (an entry
            may be `None`).
        titles: Optional title per sentence.
        path: If given, the figure is also saved there (PNG by extension).
        colorbar_label: Label of the shared colour bar. Defaults to
            `"attention weight"`.

    Returns:
        The `matplotlib.figure.Figure`.

    Raises:
        ValueError: If the lists differ in length, are empty, or a
            sentence's labels do not match its weights.

    Example:

    >>> fig = keras_attention.visualize.plot_attention_grid(
    ...     [[[0.2, 0.8]], [[0.5, 0.25, 0.25]]],
    ...     [["not", "bad"], ["a", "dull", "film"]],
    ...     titles=["positive", "negative"],
    ... )
    >>> len(fig.axes)  # two panels and one colour bar
    3
    """
    from matplotlib.figure import Figure

    count = len(weights_list)
    if count == 0:
        raise ValueError("`weights_list` is empty: nothing to plot.")
    for name, values in (
        ("x_labels_list", x_labels_list),
        ("y_labels_list", y_labels_list),
        ("titles", titles),
    ):
        if values is not None and len(values) != count:
            raise ValueError(
                f"`{name}` has {len(values)} entries but `weights_list` has "
                f"{count}; give one per sentence."
            )
    arrays = [_as_2d(w, "weights") for w in weights_list]
    widest = max(a.shape[1] for a in arrays)
    heights = [1.2 + 0.4 * a.shape[0] for a in arrays]
    fig = Figure(
        figsize=(min(2.0 + 0.45 * widest, 40.0), sum(heights)),
        layout="constrained",
    )
    axes = fig.subplots(count, 1, squeeze=False, height_ratios=heights)
    low, high = _scale(arrays)
    for i, array in enumerate(arrays):
        plot_attention(
            array,
            x_labels_list[i],
            y_labels=None if y_labels_list is None else y_labels_list[i],
            title=None if titles is None else titles[i],
            ax=axes[i, 0],
            vmin=low,
            vmax=high,
            colorbar=False,
        )
    fig.colorbar(
        axes[0, 0].images[0], ax=axes[:, 0].tolist(), label=colorbar_label
    )
    if path is not None:
        fig.savefig(path)
    return fig
