"""The HTML views, in a real browser (headless Chromium) and as text.

Each view is written to disk and opened from there with `#selftest`: the
page then clicks its first head toggle, hovers its first query token and
clicks its first model-view cell, and reports what it saw in the DOM; the
numbers are checked against the weights here. No console message may
appear, every token must be in the rendered DOM, there must be one line
per weight above the threshold, and the screenshot must not be blank.
Without Chromium these tests skip, naming the install command; with
`CI=true` they fail instead (tests/visualize/browser.py).
"""

import html
import io
import json
import re

import numpy as np
import pytest

from keras_attention import visualize
from tests.visualize import browser

# The pages hold NumPy data; no backend is involved: TensorFlow lane.
pytestmark = pytest.mark.backend_independent

TOKENS = ["the", "<cat>", "sat", "on", "&", "mat"]
SOURCE = ["ein", "kleiner", "hund", "läuft", "."]
TARGET = ["a", "small", "dog", "runs", "."]


def _stochastic(rng, *shape):
    weights = rng.random(shape) ** 3
    weights = weights / weights.sum(axis=-1, keepdims=True)
    # No weight within rounding of the threshold: the count is exact.
    near = np.abs(np.round(weights, 4) - visualize.views.THRESHOLD) < 1e-3
    weights[near] = 0.0
    return weights


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(3)
    return [_stochastic(rng, 2, 3, 6, 6) for _ in range(2)]


@pytest.fixture(scope="module")
def chromium():
    return browser.find_chromium()


def _lines(array):
    return int((np.round(array, 4) > visualize.views.THRESHOLD).sum())


def _selftest(rendered):
    found = re.search(r'<pre id="selftest">(.*?)</pre>', rendered.dom, re.S)
    assert found, rendered.dom[-2000:]
    return json.loads(html.unescape(found.group(1)))


def _check_page(rendered, tokens):
    assert rendered.console == [], rendered.console
    for token in tokens:
        assert html.escape(token, quote=False) in rendered.dom, token
    _check_not_blank(rendered.png)


def _check_not_blank(png):
    import matplotlib.image

    image = matplotlib.image.imread(io.BytesIO(png))[..., :3]
    assert image.shape[0] > 200 and image.shape[1] > 200
    # Ink on a white page: at least 1% of the pixels, in several colours.
    ink = (image < 0.9).any(axis=-1).mean()
    assert ink > 0.01, ink
    colours = np.unique((image * 255).astype("uint8").reshape(-1, 3), axis=0)
    assert len(colours) > 20


@pytest.mark.heavy
def test_head_view_in_the_browser(tmp_path, weights, chromium):
    path = visualize.head_view(
        weights, TOKENS, tmp_path / "head.html", title="label: positive"
    )
    rendered = browser.render(chromium, path, "#selftest")
    _check_page(rendered, TOKENS + ["label: positive"])
    report = _selftest(rendered)
    first = weights[0][0]
    assert report["lines"] == _lines(first)
    assert report["tokens"] == TOKENS + TOKENS
    # The first head's toggle hides exactly its lines, and shows them again.
    assert report["hidden_after_toggle"] == _lines(first[0])
    assert report["hidden_after_second_toggle"] == 0
    # Hovering the first query keeps its lines, from every head.
    assert report["focused"] == _lines(first[:, 0])
    assert report["focused_after_leave"] == 0


@pytest.mark.heavy
def test_model_view_in_the_browser(tmp_path, weights, chromium):
    path = visualize.model_view(weights, TOKENS, tmp_path / "model.html")
    rendered = browser.render(chromium, path, "#selftest")
    report = _selftest(rendered)
    _check_page(rendered, TOKENS)
    # Every layer and head drawn; clicking the first cell enlarges it
    # with its tokens.
    assert report["lines"] == sum(_lines(w[0]) for w in weights)
    assert report["enlarged_lines"] == _lines(weights[0][0, 0])
    assert report["enlarged_tokens"] == 2 * len(TOKENS)


@pytest.mark.heavy
def test_alignment_view_in_the_browser(tmp_path, chromium):
    rng = np.random.default_rng(4)
    alignments = [_stochastic(rng, 5, 5), _stochastic(rng, 3, 2)]
    path = visualize.alignment_view(
        alignments,
        [SOURCE, ["guten", "tag"]],
        [TARGET, ["good", "day", "."]],
        tmp_path / "alignment.html",
        titles=["a small dog runs .", "good day ."],
    )
    rendered = browser.render(chromium, path, "#selftest")
    _check_page(rendered, SOURCE + TARGET + ["a small dog runs ."])
    report = _selftest(rendered)
    assert report["lines"] == sum(_lines(a) for a in alignments)
    assert report["cells"] == 25 + 6
    assert report["focused"] == _lines(alignments[0][0])


@pytest.mark.heavy
def test_a_long_sentence_scrolls_in_its_panel(tmp_path, chromium):
    rng = np.random.default_rng(5)
    tokens = [f"word{i}" for i in range(80)]
    path = visualize.head_view(
        [_stochastic(rng, 1, 1, 80, 80)], tokens, tmp_path / "long.html"
    )
    rendered = browser.render(chromium, path, size=(900, 600))
    assert rendered.console == []
    assert "word79" in rendered.dom
    page = open(path, encoding="utf-8").read()
    assert ".scroll { overflow: auto; max-height: 80vh" in page


def test_pages_are_standalone_and_escape_their_text(tmp_path, weights):
    path = visualize.head_view(
        weights,
        ["</script>", "<b>x</b>", "a", "b", "c", "d"],
        tmp_path / "head.html",
        title="<i>title</i>",
    )
    page = open(path, encoding="utf-8").read()
    # Nothing fetched: no external script, style, image or font.
    assert not re.search(r"""(src|href)\s*=|@import|url\(""", page)
    # The one URL is SVG's namespace name, an identifier never fetched.
    bare = page.replace('"http://www.w3.org/2000/svg"', "")
    assert "http://" not in bare and "https://" not in bare
    assert page.count("<script") == 2 and '</script>"' not in page
    assert "&lt;i&gt;title&lt;/i&gt;" in page and "<i>" not in page
    data = re.search(
        r'<script type="application/json" id="attention-data">(.*?)</script>',
        page,
        re.S,
    ).group(1)
    payload = json.loads(data)
    assert payload["tokens"][0] == "</script>"
    assert payload["kind"] == "head" and len(payload["layers"]) == 2
    np.testing.assert_allclose(
        payload["layers"][1]["heads"], np.round(weights[1][0], 4)
    )


def test_views_take_collect_attention_dicts_and_label_other_queries(
    tmp_path,
):
    rng = np.random.default_rng(6)
    maps = {
        "encoder": _stochastic(rng, 1, 2, 3, 3),
        "hops": _stochastic(rng, 1, 4, 1, 3),
    }
    path = visualize.head_view(
        maps, ["a", "b", "c"], tmp_path / "v.html", head_label="Hops"
    )
    page = open(path, encoding="utf-8").read()
    payload = json.loads(
        re.search(r'id="attention-data">(.*?)</script>', page, re.S).group(1)
    )
    assert [layer["name"] for layer in payload["layers"]] == list(maps)
    assert payload["layers"][1]["queries"] == ["query 1"]
    assert payload["head_names"] == ["Hop 1", "Hop 2", "Hop 3", "Hop 4"]


def test_alignment_view_takes_a_translators_collected_weights(tmp_path):
    batch = np.zeros((2, 1, 3, 4))
    batch[0, 0, :2, :3] = [[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]]
    batch[1, 0, :1, :1] = 1.0
    maps = visualize.AttentionMaps(
        {"translator/decoder": batch},
        tokens=[["ein", "hund", "."], ["ja"]],
        query_tokens=[["a", "dog"], ["yes"]],
    )
    path = visualize.alignment_view(
        maps, maps.tokens, maps.query_tokens, tmp_path / "a.html"
    )
    page = open(path, encoding="utf-8").read()
    payload = json.loads(
        re.search(r'id="attention-data">(.*?)</script>', page, re.S).group(1)
    )
    first, second = payload["sentences"]
    np.testing.assert_allclose(first["weights"], batch[0, 0, :2, :3])
    assert second["weights"] == [[1.0]] and second["targets"] == ["yes"]
