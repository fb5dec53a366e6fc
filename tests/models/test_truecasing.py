"""Decoded words back to cased text, and BLEU on it."""

import numpy as np
import pytest

from keras_attention.models import translation
from keras_attention.models import truecasing


def test_postprocess_replaces_unknowns_recases_and_joins_hyphens():
    table = truecasing.build_truecaser(
        ["A man in a T-shirt sees Paris.", "Paris is big.", "A dog."]
    )
    assert table["paris"] == "Paris" and table["a"] == "a"
    words = ["a", "man", "[UNK]", "a", "t", "-", "shirt", "in", "paris", "."]
    source = "Ein Mann namens Jörg im T-Shirt in Paris."
    weights = np.zeros((len(words), 12))
    weights[2, 2] = 1.0  # [UNK] attends to "namens"
    weights[2, 3] = 2.0  # ... and most to "Jörg"
    text = truecasing.postprocess(words, source, weights, table)
    assert text == "A man Jörg a T-shirt in Paris."
    assert truecasing.postprocess(words[:2], "", [], None) == "a man"
    hypotheses, references = ["a man in paris."], ["A man in Paris."]
    assert translation.corpus_bleu(hypotheses, references) == pytest.approx(
        100.0
    )
    cased = translation.corpus_bleu(hypotheses, references, lowercase=False)
    assert cased < 100.0
