"""The examples' report hooks write the views (no training here)."""

import json
import os
import re

import numpy as np
import pytest

from keras_attention import visualize

# Files from NumPy weights: the TensorFlow lane.
pytestmark = pytest.mark.backend_independent


def _payload(path):
    page = open(path, encoding="utf-8").read()
    found = re.search(r'id="attention-data">(.*?)</script>', page, re.S)
    return json.loads(found.group(1))


def test_hop_report_writes_the_head_view_and_a_rollout_line_each(tmp_path):
    first = np.array([[0.2, 0.8, 0.0], [0.6, 0.4, 0.0]])
    second = np.array([[1.0, 0.0], [0.5, 0.5]])
    page, text = visualize.save_hop_report(
        tmp_path,
        [["not", "bad", "film"], ["great", "<b>"]],
        [first, second],
        ["true: positive", "true: negative"],
    )
    payload = _payload(page)
    assert payload["tokens"] == ["not", "bad", "film"]
    assert payload["head_names"] == ["Hop 1", "Hop 2"]
    (layer,) = payload["layers"]
    assert layer["queries"] == ["sentence"]
    np.testing.assert_allclose(np.array(layer["heads"])[:, 0], first)
    assert "<title>true: positive</title>" in open(page).read()
    lines = open(text, encoding="utf-8").read().splitlines()
    # The mean over the hops, by hand.
    assert lines == [
        "true: positive\tnot=0.40 bad=0.60 film=0.00",
        "true: negative\tgreat=0.75 <b>=0.25",
    ]


def test_translation_report_writes_the_alignment_view(tmp_path):
    from keras_attention.models import translation

    path = os.path.join(tmp_path, "alignment.png")
    translation.save_alignment_plot(
        ["ein hund", "katze"],
        [["a", "dog"], []],
        [np.array([[0.9, 0.1], [0.2, 0.8]]), np.zeros((0, 1))],
        path,
    )
    assert os.path.getsize(path) > 0
    payload = _payload(os.path.join(tmp_path, "alignment.html"))
    first, empty = payload["sentences"]
    assert first["title"] == "sentence 0: a dog"
    assert first["sources"] == ["ein", "hund"]
    assert first["targets"] == ["a", "dog"]
    np.testing.assert_allclose(first["weights"], [[0.9, 0.1], [0.2, 0.8]])
    assert empty["targets"] == ["(empty)"] and empty["weights"] == [[0.0]]
