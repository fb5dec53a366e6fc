"""visualize/_page.py: the views' CSS and JavaScript, and the page they go
into (what the script reads exists in it). The browser runs the script in
tests/visualize/test_views.py."""

import re

import numpy as np
import pytest

from keras_attention import visualize
from keras_attention.visualize import _page

pytestmark = pytest.mark.backend_independent


def _page_of(tmp_path):
    weights = np.full((1, 2, 3, 3), 1 / 3, "float32")
    path = visualize.head_view(
        weights, ["a", "b", "c"], path=str(tmp_path / "view.html")
    )
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_the_page_holds_the_style_and_the_script(tmp_path):
    page = _page_of(tmp_path)
    assert f"<style>{_page.STYLE}</style>" in page
    assert f"<script>{_page.SCRIPT}</script>" in page


def test_every_element_the_script_reads_by_id_is_on_the_page(tmp_path):
    page = _page_of(tmp_path)
    ids = set(re.findall(r'getElementById\("([^"]+)"\)', _page.SCRIPT))
    assert {"attention-data", "view"} <= ids
    for element_id in ids:
        assert f'id="{element_id}"' in page, element_id
    # The script's own part of the self-test: it writes its report there.
    assert "selftest" in _page.SCRIPT
