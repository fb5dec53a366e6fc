"""The documentation site: every public name has a reference entry, every
`python` block of every page runs, and no block hides from the tests.

The reference (`docs/reference/<module>.md`, built by mkdocstrings) has a
page per public module: every package of `keras_attention`, the modules
a package re-exports by name (`ops.mods`, `text`, `saving`) and the
install check. A page documents each public name of its module with a
`::: module.Name` entry, or links to the one entry of that object on
another page (`[Name][other.module.Name]`), or, for a module, to its page.
`mkdocs build --strict` (in `.ci/run`) checks that the entries render and
the links resolve; this test checks that none is missing.
"""

import ast
import importlib
import os
import pathlib
import re
import types

import pytest

from tests import test_migration_docs

# Checks the documentation, not a backend: the TensorFlow lane runs it.
pytestmark = pytest.mark.backend_independent

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "keras_attention"
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"
# Modules that are public without a package re-exporting them by name.
ENTRY_POINTS = ("keras_attention.check",)

_DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", flags=re.M)
_AUTOREF = re.compile(r"\]\[([\w.]+)\]")
_PAGE_LINK = re.compile(r"\]\(([\w.]+)\.md\)")


def _source(module):
    path = ROOT.joinpath(*module.split("."))
    if path.is_dir():
        return path / "__init__.py"
    return path.with_suffix(".py")


def _is_module(dotted):
    return _source(dotted).exists()


def _packages():
    return sorted(
        ".".join(folder.relative_to(ROOT).parts)
        for folder in [PACKAGE, *PACKAGE.rglob("*")]
        if (folder / "__init__.py").exists()
        and "__pycache__" not in folder.parts
    )


def public_names(module):
    """What `module` makes public: its `__all__`; else, in a package, the
    names it re-exports (`from x import Name as Name`) and, in any module,
    its public functions, classes and constants."""
    tree = ast.parse(_source(module).read_text(encoding="utf-8"))
    names = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if targets == ["__all__"]:
                return [ast.literal_eval(e) for e in node.value.elts]
            names += targets
        elif isinstance(node, ast.ImportFrom):
            names += [a.asname for a in node.names if a.asname == a.name]
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
    return [name for name in names if not name.startswith("_")]


def _reexported_modules(package):
    """The modules a package re-exports (`from a import mods as mods`)."""
    tree = ast.parse(_source(package).read_text(encoding="utf-8"))
    return [
        f"{node.module}.{alias.name}"
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
        if alias.asname == alias.name
        and _is_module(f"{node.module}.{alias.name}")
    ]


def public_modules():
    modules = set(_packages()) | set(ENTRY_POINTS)
    for package in _packages():
        modules.update(_reexported_modules(package))
    return sorted(modules)


MODULES = public_modules()


def _page(module):
    return REFERENCE / f"{module}.md"


def _resolve(path):
    """The object a dotted path names, as mkdocstrings reads it: a module
    where the path names one (`ops.attend` is a module, its function is
    `ops.attend.attend`), else an attribute of the module before it."""
    parts = path.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=2):
        if _is_module(".".join(parts[:i])):
            obj = importlib.import_module(".".join(parts[:i]))
        else:
            obj = getattr(obj, part)
    return obj


def _entries():
    """`{path: page}` of every `:::` entry of the reference."""
    entries = {}
    for page in sorted(REFERENCE.glob("*.md")):
        for path in _DIRECTIVE.findall(page.read_text(encoding="utf-8")):
            assert path not in entries, f"{path} twice: {page.name}"
            entries[path] = page.name
    return entries


ENTRIES = _entries()


def test_the_reference_sees_every_public_module():
    assert {
        "keras_attention",
        "keras_attention.layers",
        "keras_attention.scores",
        "keras_attention.ops",
        "keras_attention.ops.mods",
        "keras_attention.seq2seq",
        "keras_attention.text",
        "keras_attention.saving",
        "keras_attention.models",
        "keras_attention.data",
        "keras_attention.visualize",
    } <= set(MODULES)
    assert "auto_dtype_policy" in public_names("keras_attention.models")


def test_every_reference_page_is_a_public_module():
    pages = {page.stem for page in REFERENCE.glob("*.md")}
    assert pages == set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_has_a_reference_entry(module):
    page = _page(module)
    text = page.read_text(encoding="utf-8")
    assert f"::: {module}\n" in text, f"{module}'s page lacks its docstring"
    documented = {}
    for path, entry_page in ENTRIES.items():
        documented.setdefault(id(_resolve(path)), (path, entry_page))
    linked = set(_AUTOREF.findall(text))
    missing = []
    for name in public_names(module):
        obj = getattr(importlib.import_module(module), name)
        if isinstance(obj, types.ModuleType):
            if obj.__name__ not in _PAGE_LINK.findall(text):
                missing.append(f"{name} (a link to {obj.__name__}.md)")
            continue
        path, entry_page = documented.get(id(obj), (None, None))
        if entry_page != page.name and path not in linked:
            missing.append(f"{name} (entry: {path})")
    assert not missing, f"{module}: no reference entry for {missing}"


def test_every_object_is_documented_once():
    seen = {}
    for path in ENTRIES:
        obj = _resolve(path)
        if isinstance(obj, types.ModuleType) or isinstance(obj, (int, str)):
            continue
        assert id(obj) not in seen, f"{path} and {seen[id(obj)]}"
        seen[id(obj)] = path


# The code blocks of the pages.

FENCE = re.compile(
    r"^[ \t]*```(?P<info>[^\n`]*)\n(?P<code>.*?)^[ \t]*```[ \t]*$",
    flags=re.M | re.S,
)
# A block in another language is shown, not run: shell commands, output,
# the retired packages' code in the migration guides. A block titled
# `python title="TensorFlow only"` (JAX, PyTorch) runs on that backend
# only (tests/test_doc_blocks.py); the site shows the title above it.
BACKENDS = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}


def only_on(backend):
    """The label of a block that runs on `backend` only."""
    return f'python title="{BACKENDS[backend]} only"'


PYTHON = ("python", *(only_on(backend) for backend in BACKENDS))
LANGUAGES = {*PYTHON, "python old", "bash", "text"}
# Pages whose blocks another test runs, with the state they need.
RUN_ELSEWHERE = {
    "docs/errors.md": "tests/test_errors_doc.py",
    "docs/serving.md": "tests/test_export.py",
    **{
        f"docs/migration/{guide}": "tests/test_migration_docs.py"
        for guide in test_migration_docs.GUIDES
    },
}
# Files a page's blocks read, made in the scratch folder they run in.
FILES = {
    "docs/distributed.md": {
        "runs/sentiment/model.keras": (
            "saved_models/sentiment_synthetic_text.keras"
        ),
    },
}
PAGES = sorted(
    str(path.relative_to(ROOT))
    for path in [
        *DOCS.rglob("*.md"),
        ROOT / "README.md",
        ROOT / "BENCHMARKS.md",
        ROOT / "CHANGELOG.md",
        ROOT / "saved_models" / "README.md",
    ]
)


def _blocks(page, infos=PYTHON):
    """`[(line, code)]` of the page's blocks labelled one of `infos`."""
    text = (ROOT / page).read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start("code")) + 1, m.group("code"))
        for m in FENCE.finditer(text)
        if m.group("info").strip() in infos
    ]


RUNNABLE = [
    page for page in PAGES if _blocks(page) and page not in RUN_ELSEWHERE
]


@pytest.mark.parametrize("page", PAGES)
def test_every_block_has_a_known_language(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    infos = [m.group("info").strip() for m in FENCE.finditer(text)]
    assert set(infos) <= LANGUAGES, f"{page}: {sorted(set(infos) - LANGUAGES)}"


def test_pages_run_elsewhere_are_run_there():
    for page, test in RUN_ELSEWHERE.items():
        source = (ROOT / test).read_text(encoding="utf-8")
        assert os.path.basename(page) in source, page
        assert (ROOT / page).exists(), page


def test_the_pages_have_blocks_to_run():
    assert {
        "docs/layers.md",
        "docs/flex.md",
        "docs/visualize.md",
        "docs/examples.md",
        "docs/saving.md",
        "README.md",
    } <= set(RUNNABLE)


def test_a_block_for_one_backend_says_why_in_its_text():
    """A block for one backend is read by users of every backend: the
    text before it names the backend it needs."""
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            for backend, name in BACKENDS.items():
                if m.group("info").strip() == only_on(backend):
                    before = text[max(0, m.start() - 400) : m.start()]
                    assert f"{name} only" in before, (page, m.start())
