"""Every `python` block of the README and the documentation runs, on
every backend: each page's blocks in order, in one namespace, in a scratch
folder (tests/test_docs.py finds them). A block that needs one backend by
design is fenced `python title="TensorFlow only"` (JAX, PyTorch): the site
shows the title, it runs in that lane only, and its text says why."""

import keras
import pytest

from tests import test_docs

BACKEND = keras.backend.backend()
INFOS = ("python", test_docs.only_on(BACKEND))
# The README's blocks stand alone (each imports what it uses): one that a
# page of the documentation repeats word for word runs there only.
REPEATED = {
    code
    for page in test_docs.RUNNABLE
    if page != "README.md"
    for _, code in test_docs._blocks(page, INFOS)
}


@pytest.mark.parametrize("page", test_docs.RUNNABLE)
def test_python_blocks_of_the_page_run_in_order(page, tmp_path, monkeypatch):
    for name, target in test_docs.FILES.get(page, {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).symlink_to(test_docs.ROOT / target)
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "docs"}
    for line, code in test_docs._blocks(page, INFOS):
        if page == "README.md" and code in REPEATED:
            continue
        exec(compile(code, f"{page}:{line}", "exec"), namespace)
