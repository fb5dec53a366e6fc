"""Tokens highlighted by their attention weight, as a standalone page.

Example:

>>> page = keras_attention.visualize.attention_html(
...     [["not", "bad"]], [[0.4, 0.6]]
... )
>>> page.count("<span")
2
"""

import html
import os
from collections.abc import Sequence

import numpy as np

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Attention</title>
<style>
body {{ font-family: sans-serif; line-height: 2; margin: 2em; }}
.sentence {{ margin: 0.4em 0; }}
.title {{ font-weight: bold; margin-right: 0.6em; }}
.token {{ padding: 0.15em 0.2em; border-radius: 0.2em; }}
.note {{ color: #444; line-height: 1.4; }}
</style>
</head>
<body>
<p class="note">{note}</p>
{body}
</body>
</html>
"""


def _as_1d(weights, index: int) -> np.ndarray:
    array = np.asarray(weights, dtype="float32")
    if array.ndim != 1:
        raise ValueError(
            f"Sentence {index}: weights must be 1-D, one weight per token. "
            f"Received: shape {array.shape}. For multi-hop or multi-head "
            "weights, average over the hops (`weights.mean(axis=0)`) or "
            "pick one hop first."
        )
    return array


#: What the colours of `attention_html` mean, said at the top of the page.
HTML_NOTE = (
    "The orange behind each token is its attention weight as a share of "
    "the largest weight in its sentence (the strongest token is fully "
    "coloured); hover over a token to read its weight."
)


def attention_html(
    tokens_list: Sequence[Sequence[str]],
    weights_list: Sequence,
    titles: Sequence[str] | None = None,
    note: str | None = None,
) -> str:
    """A standalone HTML page that highlights each token by its weight.

    One line per sentence; every token is a `<span>` whose background
    opacity is its weight divided by the largest weight of that sentence
    (so the strongest token is fully coloured and opacity is proportional
    to the weight); the weight itself is in the `title` attribute (shown
    on hover). Tokens and titles are HTML-escaped. The page opens with a
    sentence that says so (`HTML_NOTE`) followed by `note`, where the
    caller says what the weights are (e.g. averaged over the hops).

    The weights must be 1-D, one per token. Multi-hop weights
    (`(num_hops, time)` from `StructuredSelfAttention`) or multi-head ones
    should first be averaged over the hops (`weights.mean(axis=0)`) or one
    hop picked (`weights[h]`). Padding positions may be dropped before
    calling (pass `weights[:len(tokens)]`).

    Args:
        tokens_list: One list of tokens per sentence.
        weights_list: One 1-D weights array per sentence, as long as its
            tokens.
        titles: Optional label per sentence (e.g. "label 1, predicted 0").
        note: Optional text after `HTML_NOTE`, e.g. "Weights averaged over
            the 4 hops." Defaults to `None`.

    Returns:
        The HTML page as a string.

    Raises:
        ValueError: If the lists differ in length, a weights array is not
            1-D, or it does not match its sentence's number of tokens.

    Example:

    >>> page = keras_attention.visualize.attention_html(
    ...     [["not", "bad"], ["a", "dull", "film"]],
    ...     [[0.4, 0.6], [0.2, 0.7, 0.1]],
    ... )
    >>> page.count("<span")  # one per token
    5
    """
    if len(tokens_list) != len(weights_list):
        raise ValueError(
            f"`tokens_list` has {len(tokens_list)} sentences but "
            f"`weights_list` has {len(weights_list)}."
        )
    if titles is not None and len(titles) != len(tokens_list):
        raise ValueError(
            f"`titles` has {len(titles)} entries but there are "
            f"{len(tokens_list)} sentences."
        )
    lines = []
    for i, (tokens, weights) in enumerate(
        zip(tokens_list, weights_list, strict=True)
    ):
        weights = _as_1d(weights, i)
        if len(tokens) != weights.shape[0]:
            raise ValueError(
                f"Sentence {i}: {len(tokens)} tokens but weights of shape "
                f"{weights.shape}; give one weight per token."
            )
        peak = float(weights.max()) if weights.size else 0.0
        spans = []
        for token, weight in zip(tokens, weights, strict=True):
            opacity = float(weight) / peak if peak > 0 else 0.0
            opacity = min(max(opacity, 0.0), 1.0)
            spans.append(
                f'<span class="token" title="{float(weight):.4f}" '
                f'style="background-color: rgba(255, 120, 0, '
                f'{opacity:.3f})">{html.escape(str(token))}</span>'
            )
        title = ""
        if titles is not None:
            title = f'<span class="title">{html.escape(str(titles[i]))}</span>'
        lines.append(f'<div class="sentence">{title}{" ".join(spans)}</div>')
    text = HTML_NOTE if note is None else f"{HTML_NOTE} {note}"
    return _PAGE.format(note=html.escape(text), body="\n".join(lines))


def save_attention_html(
    path: str | os.PathLike,
    tokens_list: Sequence[Sequence[str]],
    weights_list: Sequence,
    titles: Sequence[str] | None = None,
    note: str | None = None,
) -> None:
    """Writes `attention_html(tokens_list, weights_list, titles, note)`.

    Args:
        path: Where to write the UTF-8 HTML file.
        tokens_list: One list of tokens per sentence.
        weights_list: One 1-D weights array per sentence.
        titles: Optional label per sentence.
        note: Optional text on what the weights are (see
            `attention_html`).

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "attention.html")
    >>> keras_attention.visualize.save_attention_html(
    ...     path, [["not", "bad"]], [[0.4, 0.6]]
    ... )
    >>> os.path.exists(path)
    True
    """
    page = attention_html(tokens_list, weights_list, titles=titles, note=note)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
