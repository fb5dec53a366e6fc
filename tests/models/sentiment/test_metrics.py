"""Attention scores of the sentiment model (`models/sentiment/metrics.py`).

Moved from `tests/models/test_sentiment.py` with the module split.
"""

import numpy as np
import pytest

import keras_attention
from keras_attention.data import make_synthetic_sentiment
from keras_attention.data import make_text_vectorizer
from keras_attention.models import sentiment
from tests.models.sentiment._models import SENTENCES


def test_cue_positions_skip_punctuation_only_tokens():
    sentence = "Not -- bad , really !"
    mask = [True, False, True, False, False, False]
    np.testing.assert_array_equal(
        sentiment.cue_positions(sentence, mask), [True, True, False]
    )
    np.testing.assert_array_equal(
        sentiment.cue_positions(sentence, mask, num_positions=1), [True]
    )


def test_cue_positions_agree_with_tokens_for():
    vectorizer = make_text_vectorizer(SENTENCES)
    sentence = "it's, -- NOT bad... (really) !!"
    tokens = keras_attention.data.tokens_for(vectorizer, sentence)
    mask = np.ones(len(sentence.split()), bool)
    assert len(sentiment.cue_positions(sentence, mask)) == len(tokens)


def test_cue_positions_length_mismatch_raises():
    with pytest.raises(ValueError, match="cue mask has 1 entries"):
        sentiment.cue_positions("not bad", [True])


def test_attention_on_cues_hand_computed():
    attention = [
        np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]),  # hop mean .75/.25/0
        np.array([[0.2, 0.8]]),
        np.zeros((1, 2)),  # an empty sentence is skipped
    ]
    sentences = ["not bad film", "good stuff", "a b"]
    cues = [
        np.array([True, False, False]),
        np.array([False, True]),
        np.array([True, True]),
    ]
    share = sentiment.attention_on_cues(attention, sentences, cues)
    assert share == pytest.approx((0.75 + 0.8) / 2)


def test_attention_on_cues_matches_synthetic_positions():
    data = make_synthetic_sentiment(20, seed=3)
    vectorizer = make_text_vectorizer(data.sentences)
    uniform_on_cues = []
    for sentence, mask in zip(data.sentences, data.cue_masks, strict=True):
        n = len(keras_attention.data.tokens_for(vectorizer, sentence))
        assert n == len(mask)
        uniform_on_cues.append(mask[None, :] / mask.sum())
    share = sentiment.attention_on_cues(
        uniform_on_cues, data.sentences, data.cue_masks
    )
    assert share == pytest.approx(1.0)


def test_attention_redundancy_hand_computed():
    same = [np.array([[0.0, 1.0], [0.0, 1.0]])]
    disjoint = [np.array([[1.0, 0.0], [0.0, 1.0]])]
    half = [np.array([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]])]
    assert sentiment.attention_redundancy(same) == pytest.approx(1.0)
    assert sentiment.attention_redundancy(disjoint) == pytest.approx(0.0)
    assert sentiment.attention_redundancy(half) == pytest.approx(0.5)
    assert sentiment.attention_redundancy([np.ones((1, 3)) / 3]) == 0.0
