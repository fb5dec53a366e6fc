"""Every docstring example runs, and every public class documents itself."""

import doctest
import importlib
import inspect
import pkgutil

import keras
import numpy as np
import pytest

import keras_attention

# Checks the docstrings, not a backend: the TensorFlow lane runs it.
pytestmark = pytest.mark.backend_independent

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(
        keras_attention.__path__, prefix="keras_attention."
    )
)

# An abstract interface (`AttentionCache`) is not constructed: its kinds
# document their arguments.
PUBLIC_CLASSES = sorted(
    name
    for name, obj in vars(keras_attention).items()
    if inspect.isclass(obj)
    and not name.startswith("_")
    and not inspect.isabstract(obj)
)


# Modules whose examples need TensorFlow itself: models that take raw
# strings (TextVectorization inside the model) run only there.
TENSORFLOW_ONLY_MODULES = {"keras_attention.models.sentiment"}
# Their examples train a model.
HEAVY_MODULES = {"keras_attention.models.sentiment.model"}


def _marks(module_name):
    marks = []
    if module_name in TENSORFLOW_ONLY_MODULES:
        marks.append(pytest.mark.tensorflow_only)
    if module_name in HEAVY_MODULES:
        marks.append(pytest.mark.heavy)
    return marks


@pytest.mark.parametrize(
    "module_name", [pytest.param(m, marks=_marks(m)) for m in MODULES]
)
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    globs = {"np": np, "keras": keras, "keras_attention": keras_attention}
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, module_name, globs=globs):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} failing examples"


@pytest.mark.parametrize("name", PUBLIC_CLASSES)
def test_public_class_docstring_has_every_section(name):
    doc = inspect.getdoc(getattr(keras_attention, name))
    for section in ("Args:", "Returns:", "Example:", ">>>", "References:"):
        assert section in doc, f"{name} docstring lacks {section!r}"
