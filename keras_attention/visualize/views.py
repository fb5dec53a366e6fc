"""Interactive attention views, each one standalone HTML file.

In the spirit of bertviz's head and model views, for any model whose
weights `collect_attention` returns. Every page holds its CSS, its
JavaScript and its data inline and fetches nothing: it opens from disk,
offline. A line is drawn for every weight above `threshold`, its opacity
the weight on one labelled scale (0 to the largest weight on the page).

- `head_view`: the tokens on two sides (queries left, keys right), a line
  per weight, one colour per head; the heads are toggles, a layer menu
  picks the layer, hovering a token shows only its lines.
- `model_view`: a grid of layers by heads, one small drawing each; click
  one to enlarge it with its tokens.
- `alignment_view`: a decoder's cross-attention, target words against
  source words, as lines and as a heatmap, one block per sentence.

Long sentences scroll inside their panel.

Example:

>>> import os, tempfile
>>> weights = [np.full((1, 2, 3, 3), 1 / 3)]
>>> path = keras_attention.visualize.head_view(
...     weights, ["a", "good", "film"],
...     os.path.join(tempfile.mkdtemp(), "head.html"),
... )
>>> "<script" in open(path, encoding="utf-8").read()
True
"""

import html
import json
import os
from collections.abc import Sequence

import numpy as np

from keras_attention.visualize import _page

#: Weights at or below this are not drawn as lines.
THRESHOLD = 0.05

_HTML = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<h1>{title}</h1>
<p class="note">{note}</p>
<div id="view"></div>
<script type="application/json" id="attention-data">{data}</script>
<script>{script}</script>
</body>
</html>
"""

_NOTES = {
    "head": "Queries on the left, keys on the right: a line per weight, "
    "one colour per head. Click a head to hide or show it; hover over a "
    "token to see only its lines.",
    "model": "Every layer and head of one example. Click a drawing to "
    "enlarge it with its tokens.",
    "alignment": "Each target word (left) and the source words it "
    "attended to (right) when it was decoded; the table shows the same "
    "weights, one row per target word.",
}


def _layers(weights):
    """`[(name, (batch, heads, Tq, Tk) array)]` from a list, a dict from
    `collect_attention` or one 4-D array."""
    if isinstance(weights, dict):
        items = list(weights.items())
    elif isinstance(weights, np.ndarray) and weights.ndim == 4:
        items = [("layer 1", weights)]
    elif isinstance(weights, Sequence) and not isinstance(weights, str):
        items = [(f"layer {i + 1}", w) for i, w in enumerate(weights)]
    else:
        items = [("layer 1", weights)]
    layers = []
    for name, array in items:
        array = np.asarray(array, dtype="float64")
        if array.ndim != 4 or array.size == 0:
            raise ValueError(
                "Each layer's weights must be a non-empty `(batch, heads, "
                "query_time, key_time)` array. Received: weights of layer "
                f"{name!r} with shape {array.shape}"
            )
        layers.append((str(name), array))
    if not layers:
        raise ValueError(
            "`weights` is empty: give at least one layer. Received: weights=[]"
        )
    return layers


def _strings(tokens, name: str) -> list[str]:
    if isinstance(tokens, str) or not isinstance(
        tokens, (Sequence, np.ndarray)
    ):
        raise ValueError(
            f"`{name}` must be a list of strings, one per position. "
            f"Received: {name}={tokens!r}"
        )
    return [str(t) for t in tokens]


def _payload_layers(layers, tokens, query_tokens, example):
    """One example's layers for the page, checked against the tokens."""
    out = []
    for name, array in layers:
        if not 0 <= example < array.shape[0]:
            raise ValueError(
                f"`example` must index the batch of {array.shape[0]}. "
                f"Received: example={example!r}"
            )
        if array.shape[3] != len(tokens):
            raise ValueError(
                f"`tokens` has {len(tokens)} entries but layer {name!r} "
                f"has weights of shape {array.shape} (key_time "
                f"{array.shape[3]}); give one token per key, e.g. slice "
                "padded weights with `w[..., :n, :n]`."
            )
        queries = query_tokens if query_tokens is not None else tokens
        if array.shape[2] != len(queries):
            queries = [f"query {i + 1}" for i in range(array.shape[2])]
        out.append(
            {
                "name": name,
                "queries": queries,
                "heads": np.round(array[example], 4).tolist(),
            }
        )
    return out


def _write(path, kind, title, payload, threshold) -> str:
    """Writes the page; returns `path` as a string."""
    if isinstance(threshold, bool) or not 0.0 <= float(threshold) < 1.0:
        raise ValueError(
            "Received an invalid value for argument `threshold`, expected "
            f"a number in [0, 1). Received: threshold={threshold!r}"
        )
    weights = [
        w
        for layer in payload.get("layers", payload.get("sentences", []))
        for w in np.ravel(layer.get("heads", layer.get("weights")))
    ]
    payload = {
        "kind": kind,
        "threshold": float(threshold),
        "peak": max([*weights, 1e-6]),
        **payload,
    }
    data = json.dumps(payload).replace("</", "<\\/").replace("<!--", "<\\!--")
    title = (
        title
        or {
            "head": "Attention by head",
            "model": "Attention: every layer and head",
            "alignment": "Alignment: target words over source words",
        }[kind]
    )
    page = _HTML.format(
        title=html.escape(str(title)),
        note=html.escape(_NOTES[kind]),
        style=_page.STYLE,
        data=data,
        script=_page.SCRIPT,
    )
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return path


def _head_names(layers, head_label):
    count = max(array.shape[1] for _, array in layers)
    return [f"{head_label[:-1]} {h + 1}" for h in range(count)]


def head_view(
    weights,
    tokens: Sequence[str],
    path: str | os.PathLike,
    query_tokens: Sequence[str] | None = None,
    example: int = 0,
    title: str | None = None,
    threshold: float = THRESHOLD,
    head_label: str = "Heads",
) -> str:
    """Writes an interactive head view of one example to `path`.

    Queries on the left, keys on the right and a line for every weight
    above `threshold`, one colour per head (each head a toggle), its
    opacity the weight. A menu picks the layer; hovering a token keeps
    only its lines. Standalone HTML (inline CSS, JavaScript and data).

    Args:
        weights: Per-layer weights `(batch, heads, query_time, key_time)`,
            first layer first: a list, the dict `collect_attention`
            returns (its keys name the layers), or one 4-D array.
        tokens: The example's key tokens, one per key position.
        path: Where to write the page.
        query_tokens: The query tokens when they are not `tokens` (a
            decoder's words). A layer whose query count matches neither
            (hops, a pooling query) labels its queries `query 1`, ...
        example: Which example of the batch. Defaults to `0`.
        title: The page's title, e.g. the class or the translation.
        threshold: Weights at or below it get no line, in `[0, 1)`.
            Defaults to `0.05`.
        head_label: What the heads are called, plural (`"Hops"` for
            structured self-attention). Defaults to `"Heads"`.

    Returns:
        `path`, as a string.

    Raises:
        ValueError: If a layer is not 4-D, its key axis does not match
            `tokens`, `example` is out of range or `threshold` is not in
            `[0, 1)`.

    Example:

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> weights = [np.full((1, 2, 3, 3), 1 / 3)]  # one layer, two heads

    >>> path = keras_attention.visualize.head_view(
    ...     weights, ["not", "a", "film"], os.path.join(folder, "head.html")
    ... )
    >>> os.path.basename(path)
    'head.html'
    """
    layers = _layers(weights)
    tokens = _strings(tokens, "tokens")
    if query_tokens is not None:
        query_tokens = _strings(query_tokens, "query_tokens")
    payload = {
        "tokens": tokens,
        "layers": _payload_layers(layers, tokens, query_tokens, example),
        "head_label": head_label,
        "head_names": _head_names(layers, head_label),
    }
    return _write(path, "head", title, payload, threshold)


def model_view(
    weights,
    tokens: Sequence[str],
    path: str | os.PathLike,
    query_tokens: Sequence[str] | None = None,
    example: int = 0,
    title: str | None = None,
    threshold: float = THRESHOLD,
    head_label: str = "Heads",
) -> str:
    """Writes a grid of every layer (rows) by head (columns) to `path`.

    Each cell is a small drawing of that head's lines (weights above
    `threshold`); clicking one enlarges it with its tokens and hover
    focus. Arguments as for `head_view`.

    Args:
        weights: Per-layer weights `(batch, heads, query_time, key_time)`.
        tokens: The example's key tokens.
        path: Where to write the page.
        query_tokens: The query tokens when they are not `tokens`.
        example: Which example of the batch. Defaults to `0`.
        title: The page's title.
        threshold: Weights at or below it get no line. Defaults to
            `0.05`.
        head_label: What the heads are called, plural. Defaults to
            `"Heads"`.

    Returns:
        `path`, as a string.

    Raises:
        ValueError: As for `head_view`.

    Example:

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> weights = [np.full((1, 2, 3, 3), 1 / 3)]  # one layer, two heads

    >>> path = keras_attention.visualize.model_view(
    ...     weights, ["not", "a", "film"], os.path.join(folder, "model.html")
    ... )
    >>> os.path.basename(path)
    'model.html'
    """
    layers = _layers(weights)
    tokens = _strings(tokens, "tokens")
    if query_tokens is not None:
        query_tokens = _strings(query_tokens, "query_tokens")
    payload = {
        "tokens": tokens,
        "layers": _payload_layers(layers, tokens, query_tokens, example),
        "head_label": head_label,
        "head_names": _head_names(layers, head_label),
    }
    return _write(path, "model", title, payload, threshold)


def _sentence(weights, sources, targets, index):
    array = np.asarray(weights, dtype="float64")
    if array.ndim == 3:
        array = array.mean(axis=0)
    if array.ndim != 2 or array.shape != (len(targets), len(sources)):
        raise ValueError(
            f"Sentence {index}: weights must be `(target_time, "
            f"source_time)` = ({len(targets)}, {len(sources)}) for "
            f"{len(targets)} target and {len(sources)} source tokens. "
            f"Received: weights with shape {array.shape}"
        )
    return np.round(array, 4).tolist()


def _per_sentence(weights, source_tokens, target_tokens):
    """A batch `(batch, heads, target_time, source_time)` (or the dict
    `collect_attention` returns for a `Translator`) as one array per
    sentence, averaged over the heads and cut to the sentence's words."""
    if isinstance(weights, dict):
        weights = list(weights.values())[-1]
    if not (isinstance(weights, np.ndarray) and weights.ndim == 4):
        return weights
    return [
        weights[i].mean(axis=0)[: len(targets), : len(sources)]
        for i, (sources, targets) in enumerate(
            zip(source_tokens, target_tokens, strict=False)
        )
    ]


def alignment_view(
    weights,
    source_tokens,
    target_tokens,
    path: str | os.PathLike,
    titles: Sequence[str] | None = None,
    title: str | None = None,
    threshold: float = THRESHOLD,
) -> str:
    """Writes a seq2seq decoder's alignments over the decoded words.

    Per sentence: the target words on the left, the source words on the
    right, a line for each weight above `threshold` (hover a word to
    focus it), and the same weights as a heatmap (hover a cell for its
    value). One colour scale for the page.

    Args:
        weights: One sentence's `(target_time, source_time)` weights (or
            `(heads, target_time, source_time)`, averaged over the heads),
            or a list of them, one per sentence. `Translator.translate(...,
            return_alignments=True)` gives them trimmed to the words. A
            padded batch `(batch, heads, target_time, source_time)`, or the
            dict `collect_attention` returns for a `Translator` (with its
            `tokens` and `query_tokens` as the words), is averaged over the
            heads and cut to each sentence's words.
        source_tokens: The source words (a list of strings), or one list
            per sentence.
        target_tokens: The decoded words, or one list per sentence.
        path: Where to write the page.
        titles: Optional heading per sentence (e.g. the translation).
        title: The page's title.
        threshold: Weights at or below it get no line. Defaults to
            `0.05`.

    Returns:
        `path`, as a string.

    Raises:
        ValueError: If the lists differ in length or a sentence's weights
            do not match its words.

    Example:

    >>> import os, tempfile
    >>> weights = np.array([[0.9, 0.1], [0.2, 0.8]])  # (target, source)
    >>> path = keras_attention.visualize.alignment_view(
    ...     weights,
    ...     ["ein", "hund"],
    ...     ["a", "dog"],
    ...     os.path.join(tempfile.mkdtemp(), "alignment.html"),
    ... )
    >>> os.path.basename(path)
    'alignment.html'
    """
    weights = _per_sentence(weights, source_tokens, target_tokens)
    several = len(source_tokens) > 0 and not isinstance(source_tokens[0], str)
    if not several:
        weights, source_tokens = [weights], [source_tokens]
        target_tokens = [target_tokens]
        titles = None if titles is None else [titles]
    counts = {len(weights), len(source_tokens), len(target_tokens)}
    if titles is not None:
        counts.add(len(titles))
    if len(counts) != 1:
        raise ValueError(
            "`weights`, `source_tokens`, `target_tokens` (and `titles`) "
            "need one entry per sentence. Received: "
            f"{len(weights)}, {len(source_tokens)}, {len(target_tokens)}"
            + ("" if titles is None else f" and {len(titles)}")
            + " entries"
        )
    sentences = []
    for i, (w, sources, targets) in enumerate(
        zip(weights, source_tokens, target_tokens, strict=True)
    ):
        sources = _strings(sources, "source_tokens")
        targets = _strings(targets, "target_tokens")
        sentences.append(
            {
                "title": None if titles is None else str(titles[i]),
                "sources": sources,
                "targets": targets,
                "weights": _sentence(w, sources, targets, i),
            }
        )
    return _write(path, "alignment", title, {"sentences": sentences}, threshold)
