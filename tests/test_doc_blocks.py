"""Every `python` block of the README and the documentation runs, on
every backend: each page's blocks in order, in one namespace, in a scratch
folder (tests/test_docs.py finds them). A block that needs one backend by
design is fenced `python title="TensorFlow only"` (JAX, PyTorch): the site
shows the title, it runs in that lane only, and its text says why."""

import keras
import pytest

from tests import test_docs

BACKEND = keras.backend.backend()


@pytest.mark.parametrize("page", test_docs.RUNNABLE)
def test_python_blocks_of_the_page_run_in_order(page, tmp_path, monkeypatch):
    for name, target in test_docs.FILES.get(page, {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).symlink_to(test_docs.ROOT / target)
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "docs"}
    infos = ("python", test_docs.only_on(BACKEND))
    for line, code in test_docs._blocks(page, infos):
        exec(compile(code, f"{page}:{line}", "exec"), namespace)
