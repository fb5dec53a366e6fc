"""The translation example's pictures of where a translator attends: the
decoder's alignments over the source, and each encoder block's
self-attention per head, as PNG grids with interactive pages beside them
(`keras_attention.visualize`).
"""

import numpy as np
from keras import ops

from keras_attention.text import tokenize


def save_alignment_plot(sources, words, alignments, path, count=4):
    """Target × source heatmaps of the first `count` decoded sentences.

    One colour scale for all panels, with a labelled colour bar; the same
    sentences go to an interactive `alignment_view` page beside `path`
    (`alignment.png` → `alignment.html`).
    """
    import os

    from keras_attention.visualize import alignment_view
    from keras_attention.visualize import plot_attention_grid

    weights_list, x_labels, y_labels, titles = [], [], [], []
    for i in range(min(count, len(sources))):
        source_words = tokenize(sources[i]).split()
        target_words = list(words[i]) or ["(empty)"]
        weights = np.asarray(alignments[i], dtype="float32")
        if weights.shape[0] == 0:
            weights = np.zeros((1, len(source_words)), dtype="float32")
        weights_list.append(weights)
        x_labels.append(source_words)
        y_labels.append(target_words)
        titles.append(f"sentence {i}")
    plot_attention_grid(
        weights_list,
        x_labels,
        y_labels,
        titles,
        path=path,
        colorbar_label="attention weight (each target word's row sums to 1)",
    )
    # The same sentences as an interactive page beside the PNG.
    alignment_view(
        weights_list,
        x_labels,
        y_labels,
        os.path.splitext(path)[0] + ".html",
        titles=[
            f"{t}: {' '.join(w)}" for t, w in zip(titles, y_labels, strict=True)
        ],
    )


def save_encoder_attention(model, source, path):
    """Each encoder block's self-attention per head, for one sentence.

    `path` (PNG) gets a grid, blocks as rows and heads as columns, on one
    colour scale from 0 to 1; beside it (`.png` → `.html`) the same
    weights go to an interactive `model_view` page. A translator whose
    encoder has no attention (the RNN `Translator`) gets neither.

    Returns:
        The paths written: `[png, html]`, or `[]`.
    """
    import os

    from matplotlib.figure import Figure

    from keras_attention.visualize import model_view
    from keras_attention.visualize import plot_attention

    ids = model.vectorize_sources([source])
    maps = model.encoder_attention(ids)
    if not maps:
        return []
    length = int(np.count_nonzero(ops.convert_to_numpy(ids)[0]))
    words = tokenize(source).split()[:length]
    maps = {
        name: ops.convert_to_numpy(w)[:, :, :length, :length]
        for name, w in maps.items()
    }
    heads = next(iter(maps.values())).shape[1]
    side = 1.0 + 0.3 * length
    fig = Figure(
        figsize=(side * heads + 1.0, side * len(maps)), layout="constrained"
    )
    axes = fig.subplots(len(maps), heads, squeeze=False)
    for row, (name, weights) in enumerate(maps.items()):
        block = name.split("/")[-2]
        for head in range(heads):
            plot_attention(
                weights[0, head],
                words,
                y_labels=words,
                title=f"{block}, head {head + 1}",
                ax=axes[row, head],
                vmin=0.0,
                vmax=1.0,
                colorbar=False,
            )
    fig.colorbar(
        axes[0, 0].images[0],
        ax=axes.ravel().tolist(),
        label="self-attention weight (each query word's row sums to 1)",
    )
    fig.savefig(path)
    html = os.path.splitext(path)[0] + ".html"
    model_view(maps, words, html, title=f"encoder self-attention: {source}")
    return [path, html]
