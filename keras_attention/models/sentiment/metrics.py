"""Scores of the sentiment model's attention, per sentence.

How much of it lands on the tokens that decide the label
(`attention_on_cues`, with `cue_positions`) and how much the hops repeat
each other (`attention_redundancy`).
"""

import re

import numpy as np

from keras_attention import text

# A whitespace token made only of what the vectorizer strips yields no
# position.
_PUNCTUATION = re.compile(text.STRIP_PUNCTUATION_REGEX)


def cue_positions(sentence, cue_mask, num_positions=None):
    """Maps a per-whitespace-token cue mask onto the model's positions.

    `TextVectorization` strips punctuation before splitting on whitespace,
    so a token made only of punctuation (`"--"`, `","`) has no position and
    the tokens after it move left. This follows that rule.

    Args:
        sentence: The sentence, as given to the model.
        cue_mask: Booleans, one per whitespace token of `sentence`.
        num_positions: The model's number of positions for the sentence
            (e.g. from `predict_sentiment`); the mask is truncated to it.

    Returns:
        A boolean array with one entry per model position.

    Example:

    >>> from keras_attention.models.sentiment import cue_positions
    >>> mask = np.array([False, False, True])  # "not -- good"
    >>> cue_positions("not -- good", mask).tolist()  # "--" has no position
    [False, True]
    """
    words = sentence.split()
    cue_mask = np.asarray(cue_mask, dtype=bool)
    if len(words) != len(cue_mask):
        raise ValueError(
            f"The cue mask has {len(cue_mask)} entries but the sentence has "
            f"{len(words)} whitespace tokens: {sentence!r}"
        )
    kept = [bool(_PUNCTUATION.sub("", word)) for word in words]
    positions = cue_mask[np.array(kept, dtype=bool)]
    if num_positions is not None:
        positions = positions[:num_positions]
    return positions


def attention_on_cues(attention, sentences, cue_masks):
    """Mean share of the attention (averaged over hops) on cue tokens.

    For each sentence the weights `(num_hops, length)` are averaged over
    the hops into one distribution over its positions; its mass on the cue
    positions is the sentence's share. Sentences with no attention at all
    (empty after vectorization) are skipped.

    Args:
        attention: One `(num_hops, length)` array per sentence, as from
            `predict_sentiment`.
        sentences: The sentences.
        cue_masks: One boolean array per sentence, one entry per
            whitespace token, `True` on the tokens that decide the label.

    Returns:
        The mean share, a float in `[0, 1]`.

    Example:

    >>> from keras_attention.models.sentiment import attention_on_cues
    >>> attention = [np.array([[0.1, 0.9], [0.3, 0.7]])]  # 2 hops, 2 tokens
    >>> cue_masks = [np.array([False, True])]  # "not good": good decides
    >>> round(attention_on_cues(attention, ["not good"], cue_masks), 3)
    0.8
    """
    shares = []
    for weights, sentence, mask in zip(
        attention, sentences, cue_masks, strict=True
    ):
        weights = np.asarray(weights, dtype="float64").mean(axis=0)
        cues = cue_positions(sentence, mask, num_positions=weights.shape[0])
        if cues.shape[0] != weights.shape[0]:
            raise ValueError(
                f"{weights.shape[0]} attention positions but "
                f"{cues.shape[0]} tokens after vectorization: {sentence!r}"
            )
        total = weights.sum()
        if total > 0:
            shares.append(weights[cues].sum() / total)
    return float(np.mean(shares)) if shares else float("nan")


def attention_redundancy(attention):
    """Mean off-diagonal entry of `AAᵀ`: how much the hops overlap.

    0 when the hops attend to disjoint positions, 1 when every hop puts all
    its weight on the same single token. This is the redundancy that the
    penalty `‖AAᵀ − I‖²_F` discourages.

    Args:
        attention: One `(num_hops, length)` array per sentence.

    Returns:
        The mean over sentences of the mean off-diagonal of `AAᵀ` (`0.0`
        for a single hop).

    Example:

    >>> from keras_attention.models.sentiment import attention_redundancy
    >>> disjoint = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> same = np.array([[1.0, 0.0], [1.0, 0.0]])
    >>> attention_redundancy([disjoint]), attention_redundancy([same])
    (0.0, 1.0)
    """
    values = []
    for weights in attention:
        weights = np.asarray(weights, dtype="float64")
        hops = weights.shape[0]
        if hops < 2:
            return 0.0
        gram = weights @ weights.T
        values.append((gram.sum() - np.trace(gram)) / (hops * (hops - 1)))
    return float(np.mean(values)) if values else float("nan")
