"""Evaluating the sentiment model and writing its attention report."""

import os
import warnings

import numpy as np

from keras_attention.models.sentiment.inference import predict_sentiment
from keras_attention.models.sentiment.inference import vectorizer_of
from keras_attention.models.sentiment.metrics import attention_on_cues
from keras_attention.models.sentiment.metrics import attention_redundancy
from keras_attention.models.sentiment.model import class_names


def evaluate_sentiment_classifier(model, split, batch_size=64):
    """Accuracy and attention scores of `model` on `split`.

    Args:
        model: A model from `build_sentiment_classifier`.
        split: A `SentimentSplit`.
        batch_size: Sentences per call. Defaults to `64`.

    Returns:
        `(metrics, probabilities, attention)`: a dict with `accuracy`,
        `examples`, `attention_redundancy` and, when the split has cue
        masks, `attention_on_cues`; then what `predict_sentiment` returns.
    """
    probabilities, attention = predict_sentiment(
        model, split.sentences, batch_size=batch_size
    )
    predictions = probabilities.argmax(axis=-1)
    metrics = {
        "accuracy": float(np.mean(predictions == np.asarray(split.labels))),
        "examples": len(split),
        "attention_redundancy": attention_redundancy(attention),
    }
    if split.cue_masks is not None:
        metrics["attention_on_cues"] = attention_on_cues(
            attention, split.sentences, split.cue_masks
        )
    return metrics, probabilities, attention


def balanced_indices(labels, count):
    """Up to `count` indices, taking the classes in turn (round robin).

    Each class gives its examples in their order in `labels`, so the
    result has as many examples of each class as possible: with 6 and two
    classes, three of each (if both have three).

    Example:

    >>> from keras_attention.models.sentiment import balanced_indices
    >>> balanced_indices(np.array([0, 0, 0, 1, 1]), 4)
    [0, 3, 1, 4]
    """
    labels = np.asarray(labels)
    queues = [list(np.flatnonzero(labels == c)) for c in np.unique(labels)]
    chosen = []
    while len(chosen) < count and any(queues):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(int(queue.pop(0)))
    return chosen


def save_attention_report(
    model, split, probabilities, attention, output_dir, num_sentences=6
):
    """Writes `attention.png` (hops × tokens), `attention.html` and more.

    `num_sentences` sentences of `split` are shown, as many of each class
    as possible (`balanced_indices`), each titled with its true and its
    predicted class name (`class_names(model)`). The PNG has one heatmap
    per sentence (a row per hop), all on one colour scale; the HTML page
    highlights each token by its weight averaged over the hops (and says
    so); `attention_hops.html` is the interactive head view of the first
    sentence's hops and `rollout.txt` a rollout line per sentence
    (`keras_attention.visualize.save_hop_report`).

    Returns:
        The paths written; none, with a warning, if no sentence of `split`
        has a token to show.
    """
    from keras_attention import visualize
    from keras_attention.data.sentiment import tokens_for

    vectorizer = vectorizer_of(model)
    names = class_names(model)
    tokens_list, weights_list, titles = [], [], []
    for i in balanced_indices(split.labels, num_sentences):
        tokens = tokens_for(vectorizer, split.sentences[i])
        weights = attention[i]
        if not tokens or len(tokens) != weights.shape[1]:
            continue
        tokens_list.append(tokens)
        weights_list.append(weights)
        predicted = int(probabilities[i].argmax())
        titles.append(
            f"true: {names[int(split.labels[i])]}, predicted: "
            f"{names[predicted]} (p={float(probabilities[i, predicted]):.2f})"
        )
    if not weights_list:
        warnings.warn(
            "attention.png and attention.html not written: none of the "
            f"{len(split.sentences)} test sentences has a token to show "
            "(only punctuation or blanks).",
            stacklevel=2,
        )
        return []
    png = os.path.join(output_dir, "attention.png")
    page = os.path.join(output_dir, "attention.html")
    hops = [[f"hop {h + 1}" for h in range(w.shape[0])] for w in weights_list]
    visualize.plot_attention_grid(
        weights_list,
        tokens_list,
        hops,
        titles=titles,
        path=png,
        colorbar_label="attention weight (each hop sums to 1)",
    )
    num_hops = weights_list[0].shape[0] if weights_list else 0
    visualize.save_attention_html(
        page,
        tokens_list,
        [w.mean(axis=0) for w in weights_list],
        titles,
        note=f"The weights are averaged over the model's {num_hops} "
        "attention hops (attention.png shows each hop).",
    )
    # attention_hops.html (interactive, per hop) and rollout.txt.
    views = visualize.save_hop_report(
        output_dir, tokens_list, weights_list, titles
    )
    return [png, page, *views]
