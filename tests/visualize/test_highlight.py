"""visualize/highlight.py: token highlighting in HTML."""

import numpy as np
import pytest

pytest.importorskip("matplotlib")
from keras_attention import visualize  # noqa: E402

pytestmark = pytest.mark.backend_independent


def test_attention_html_escapes_tokens_and_scales_opacity():
    page = visualize.attention_html(
        [["<script>", "a&b", '"q"'], ["fine"]],
        [np.array([0.25, 0.5, 0.25]), [1.0]],
        titles=["<b>label</b>", "second"],
    )
    assert page.startswith("<!DOCTYPE html>")
    assert "<script>" not in page and "<b>" not in page
    assert "&lt;script&gt;" in page
    assert "a&amp;b" in page
    assert "&quot;q&quot;" in page
    assert "&lt;b&gt;label&lt;/b&gt;" in page
    assert page.count('<span class="token"') == 4
    assert page.count('<div class="sentence">') == 2
    assert 'title="0.2500"' in page and 'title="0.5000"' in page
    # Opacity is the weight over the sentence's largest weight.
    assert 'rgba(255, 120, 0, 0.500)">&lt;script&gt;' in page
    assert 'rgba(255, 120, 0, 1.000)">a&amp;b' in page


def test_attention_html_handles_all_zero_weights():
    page = visualize.attention_html([["a", "b"]], [[0.0, 0.0]])
    assert page.count("rgba(255, 120, 0, 0.000)") == 2


def test_attention_html_rejects_multi_hop_weights_with_advice():
    with pytest.raises(ValueError, match="average over the hops"):
        visualize.attention_html([["a", "b"]], [np.ones((2, 2))])


@pytest.mark.parametrize(
    "tokens, weights, titles, match",
    [
        ([["a", "b"]], [[1.0]], None, "2 tokens"),
        ([["a"]], [[1.0], [1.0]], None, "weights_list"),
        ([["a"]], [[1.0]], ["x", "y"], "titles"),
    ],
)
def test_attention_html_rejects_mismatches(tokens, weights, titles, match):
    with pytest.raises(ValueError, match=match):
        visualize.attention_html(tokens, weights, titles=titles)


def test_save_attention_html_writes_the_page(tmp_path):
    path = tmp_path / "attention.html"
    visualize.save_attention_html(path, [["ünïcode"]], [[1.0]])
    text = path.read_text(encoding="utf-8")
    assert text == visualize.attention_html([["ünïcode"]], [[1.0]])


def test_attention_html_says_what_the_colours_mean():
    page = visualize.attention_html(
        [["a"]], [[1.0]], note="Averaged over the 3 hops & more."
    )
    assert visualize.HTML_NOTE in page
    assert "Averaged over the 3 hops &amp; more." in page
