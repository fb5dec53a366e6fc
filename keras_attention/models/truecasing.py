"""Decoded words back to text: `[UNK]` replacement, recasing, hyphens.

The translator decodes lower-cased words; `postprocess` turns them into a
cased, detokenized sentence with a recasing table from `build_truecaser`.
"""

import re

import numpy as np

from keras_attention.text import detokenize

_CASED_PUNCTUATION = re.compile(r"([^\w\s'])")


def cased_tokens(text):
    """`tokenize(text).split()` without lower-casing."""
    return _CASED_PUNCTUATION.sub(r" \1 ", text).split()


def build_truecaser(texts):
    """The most frequent written form of each lower-cased word of `texts`.

    Words that open a sentence are counted only where nothing else is
    known of them, since their capital letter says nothing about the
    word. `truecase` restores case with the result, a recaser in the
    manner of Moses' `train-truecaser.perl` (Koehn et al., 2007).

    Args:
        texts: Training targets (raw, cased text).

    Returns:
        A dict from lower-cased word to written form.
    """
    inside, opening = {}, {}
    for text in texts:
        for position, word in enumerate(cased_tokens(text)):
            counts = (opening if position == 0 else inside).setdefault(
                word.lower(), {}
            )
            counts[word] = counts.get(word, 0) + 1
    table = {}
    for counts_by_word in (opening, inside):
        for key, counts in counts_by_word.items():
            table[key] = max(sorted(counts), key=counts.get)
    return table


def truecase(words, table):
    """`words` in their usual case (`table` from `build_truecaser`).

    Each word takes its most frequent written form; the first word starts
    with a capital letter.
    """
    words = [table.get(word.lower(), word) for word in words]
    if words:
        words[0] = words[0][:1].upper() + words[0][1:]
    return words


def postprocess(words, source, weights, truecaser=None):
    """Decoded words → text: `[UNK]` replaced, recased, detokenized.

    Each `[UNK]` becomes the source word its decoder step attends to most
    (Luong et al., 2015, "unk replacement", with the attention weights
    as the alignment), in its written case; `truecaser` (a table from
    `build_truecaser`) restores case; hyphens split off by `tokenize` are
    joined again (`"t - shirt"` → `"t-shirt"`).

    Args:
        words: Decoded target words (lower-cased).
        source: The source sentence (raw text).
        weights: `(len(words), source_words)` attention weights.
        truecaser: Optional recasing table; `None` keeps the words as
            decoded.

    Returns:
        The translation as a string.
    """
    source_words = cased_tokens(source)
    words = list(words)
    for j, word in enumerate(words):
        if word == "[UNK]" and source_words and j < len(weights):
            row = np.asarray(weights[j])[: len(source_words)]
            if row.size:
                words[j] = source_words[int(np.argmax(row))]
    if truecaser is not None:
        words = truecase(words, truecaser)
    return re.sub(r"(\w) - (?=\w)", r"\1-", detokenize(words))
