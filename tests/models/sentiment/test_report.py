"""Evaluation and attention report (`models/sentiment/report.py`).

Moved from `tests/models/test_sentiment.py` with the module split.
"""

import os

import numpy as np
import pytest

from keras_attention.models import sentiment
from tests.models.sentiment._models import SENTENCES
from tests.models.sentiment._models import _model


def test_balanced_indices_take_the_classes_in_turn():
    labels = [1, 1, 1, 1, 0, 1, 2, 0]
    assert sentiment.balanced_indices(labels, 6) == [4, 0, 6, 7, 1, 2]
    assert sentiment.balanced_indices([1, 1], 6) == [0, 1]


@pytest.mark.backend_independent
def test_attention_report_names_the_classes_and_balances_them(tmp_path):
    from keras_attention.data.splits import SentimentSplit

    names = ("negative", "neutral", "positive")
    model = _model(label_names=names)
    labels = np.array([2, 2, 2, 2, 0, 1, 1, 0])
    sentences = [SENTENCES[i % 4] for i in range(8)]
    split = SentimentSplit(sentences, labels, label_names=names)
    probabilities, attention = sentiment.predict_sentiment(model, sentences)
    sentiment.save_attention_report(
        model, split, probabilities, attention, str(tmp_path)
    )
    with open(os.path.join(tmp_path, "attention.html"), encoding="utf-8") as f:
        page = f.read()
    # Two sentences of each class, titled by name; the hops are averaged.
    for name in names:
        assert page.count(f"true: {name}, predicted: ") == 2
    assert "averaged over the model&#x27;s 3 attention hops" in page
    assert os.path.getsize(os.path.join(tmp_path, "attention.png")) > 0


def test_attention_report_without_a_token_to_show_warns(tmp_path):
    # A test set of punctuation-only sentences: plot_attention_grid's
    # "weights_list is empty" traceback came after the model was written.
    from keras_attention.data.splits import SentimentSplit

    model = _model()
    sentences = ["!!!", "  "]
    split = SentimentSplit(sentences, np.array([0, 1]))
    # `predict_sentiment` refuses such text (docs/errors.md); the report
    # still guards against it, given what the model gives an all-padding
    # row: uniform classes, no attention (tests/models/sentiment/
    # test_model.py).
    probabilities = np.full((2, 2), 0.5, "float32")
    attention = np.zeros((2, 3, 1), "float32")
    with pytest.warns(UserWarning, match="none of the 2 test sentences"):
        written = sentiment.save_attention_report(
            model, split, probabilities, attention, str(tmp_path)
        )
    assert written == [] and os.listdir(tmp_path) == []
