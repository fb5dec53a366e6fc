"""The examples' report hooks write the views (no training here)."""

import json
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
