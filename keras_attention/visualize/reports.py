"""Ready-made views for the examples' reports.

Example:

>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> paths = keras_attention.visualize.save_hop_report(
...     folder, [["not", "bad"]], [np.array([[0.3, 0.7], [0.9, 0.1]])],
...     ["true: positive, predicted: positive"],
... )
>>> [os.path.basename(p) for p in paths]
['attention_hops.html', 'rollout.txt']
>>> print(open(paths[1], encoding="utf-8").read().strip())
true: positive, predicted: positive	not=0.60 bad=0.40
"""

import os
from collections.abc import Sequence

import numpy as np

from keras_attention.visualize.rollout import attention_rollout
from keras_attention.visualize.views import head_view


def save_hop_report(
    output_dir: str | os.PathLike,
    tokens_list: Sequence[Sequence[str]],
    weights_list: Sequence,
    titles: Sequence[str],
) -> list[str]:
    """Writes a head view of the hops and a rollout line per sentence.

    For `StructuredSelfAttention`'s hop weights: `attention_hops.html` is
    the head view of the first sentence, each hop a head (one query, the
    sentence, over its tokens), titled `titles[0]`; `rollout.txt` has one
    line per sentence, its title, a tab, then every token with its
    rolled-out share (`attention_rollout` of the hops: their mean, the
    share of the sentence embedding each token gets), summing to 1.

    Args:
        output_dir: The folder to write into.
        tokens_list: One list of tokens per sentence.
        weights_list: One `(hops, time)` array per sentence.
        titles: One title per sentence (true and predicted class).

    Returns:
        The two paths written.

    Example:

    >>> import os, tempfile
    >>> paths = keras_attention.visualize.save_hop_report(
    ...     tempfile.mkdtemp(),
    ...     [["not", "bad"]],
    ...     [np.array([[0.2, 0.8], [0.6, 0.4]])],
    ...     ["label 1, predicted 1"],
    ... )
    >>> [os.path.basename(path) for path in paths]
    ['attention_hops.html', 'rollout.txt']
    """
    lines = []
    for tokens, weights, title in zip(
        tokens_list, weights_list, titles, strict=True
    ):
        stack = np.asarray(weights, dtype="float64")[None, :, None, :]
        shares = attention_rollout([stack])[0, 0]
        pairs = " ".join(
            f"{token}={share:.2f}"
            for token, share in zip(tokens, shares, strict=True)
        )
        lines.append(f"{title}\t{pairs}\n")
    page = head_view(
        [np.asarray(weights_list[0])[None, :, None, :]],
        tokens_list[0],
        os.path.join(output_dir, "attention_hops.html"),
        query_tokens=["sentence"],
        title=titles[0],
        head_label="Hops",
    )
    text = os.path.join(output_dir, "rollout.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return [page, text]
