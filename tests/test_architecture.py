"""The rules of docs/architecture.md: floors, public Keras API, short code.

The import rules are read from the source with `ast`, so a new module is
checked as soon as it exists.
"""

import ast
import json
import os

import pytest

from tests.subprocesses import ROOT
from tests.subprocesses import run_python

pytestmark = pytest.mark.backend_independent

PACKAGE = os.path.join(ROOT, "keras_attention")
CORE = (
    "ops",
    "scores",
    "layers",
    "seq2seq",
    "saving",
    "text",
    "_validation",
    "distribution",
    "hub",
)
ABOVE_CORE = ("data", "models", "visualize")
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 600


def _modules():
    """`{dotted name: parsed tree}` of every module of the package."""
    modules = {}
    for folder, _, files in os.walk(PACKAGE):
        for file in files:
            if not file.endswith(".py"):
                continue
            path = os.path.join(folder, file)
            relative = os.path.relpath(path, ROOT)[: -len(".py")]
            name = relative.replace(os.sep, ".").removesuffix(".__init__")
            with open(path, encoding="utf-8") as f:
                modules[name] = ast.parse(f.read(), path)
    return modules


MODULES = _modules()


def _floor(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(tree):
    """`(imported module, imported name or None)` of every import."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                yield node.module, alias.name


def _targets(module, name):
    """The package modules an import can load (`from a import b`: a.b)."""
    targets = [module]
    if name is not None:
        targets.append(f"{module}.{name}")
    return [t for t in targets if t.startswith("keras_attention")]


def test_the_rules_see_every_floor():
    floors = {_floor(m) for m in MODULES}
    assert set(CORE) | set(ABOVE_CORE) <= floors


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_floors(module):
    floor = _floor(module)
    forbidden = ()
    if floor in CORE:
        forbidden = ABOVE_CORE
    if floor == "ops":
        forbidden += ("scores", "layers", "seq2seq", "saving")
    if floor == "scores":
        forbidden += ("layers", "seq2seq", "saving")
    if floor not in ("", "hub"):
        # keras-hub models on our layers: the top of the core, imported
        # by the package only.
        forbidden += ("hub",)
    bad = [
        target
        for imported, name in _imports(MODULES[module])
        for target in _targets(imported, name)
        if _floor(target) in forbidden
    ]
    assert not bad, f"{module} (floor {floor!r}) imports {bad}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_public_keras_api(module):
    source = ast.unparse(MODULES[module])
    assert "keras.src" not in source, module
    assert "importlib" not in source, module


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_names_of_other_modules(module):
    tree = MODULES[module]
    aliases = {}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if alias.name.startswith("_") and not _is_module(
                    f"{node.module}.{alias.name}"
                ):
                    bad.append(f"from {node.module} import {alias.name}")
                if _is_module(f"{node.module}.{alias.name}"):
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name.startswith("keras_attention"):
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            bad.append(f"{node.value.id}.{node.attr}")
    assert not bad, f"{module} uses private names: {bad}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_keras_hub_is_imported_only_lazily_in_hub(module):
    # keras-hub is a test extra, not a dependency: `import keras_attention`
    # must work without it.
    tree = MODULES[module]
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        for imported, _ in _imports(ast.Module(body=[node], type_ignores=[])):
            if imported.split(".")[0] != "keras_hub":
                continue
            assert module == "keras_attention.hub", module
            assert id(node) not in top_level, f"{module}: at import"


def _is_module(dotted):
    return dotted in MODULES


def _loads(module):
    """The package modules `module` imports, at any level of its code
    (function-level imports included): `from a import b` loads `a.b`
    where that is a module, else `a` itself."""
    loaded = set()
    for imported, name in _imports(MODULES[module]):
        if not imported.startswith("keras_attention"):
            continue
        dotted = f"{imported}.{name}" if name else imported
        loaded.add(dotted if _is_module(dotted) else imported)
    return loaded - {module}


def _cycles(graph):
    """The strongly connected sets of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on.add(node)
        for after in sorted(graph[node]):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in on:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            component = set()
            while node not in component:
                component.add(stack.pop())
            on.difference_update(component)
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles():
    """Each step of a call goes one way: no set of modules imports itself
    round, however deep in a function the import sits."""
    graph = {m: {t for t in _loads(m) if t in MODULES} for m in MODULES}
    assert not _cycles(graph)


def test_the_cycle_finder_sees_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize(
    "module", sorted(m for m in MODULES if m.startswith("keras_attention.ops."))
)
def test_no_ops_module_imports_the_ops_package(module):
    """The ops read each other's modules, never the package's namespace
    (which imports them all: the engine's steps would climb back up)."""
    assert "keras_attention.ops" not in _loads(module)


def _code_lines(node):
    """Lines of a function from its first statement after the docstring."""
    body = node.body
    first = body[0]
    is_docstring = (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )
    start = body[1].lineno if is_docstring and len(body) > 1 else first.lineno
    return node.end_lineno - start + 1


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_function_over_60_lines(module):
    long = [
        f"{node.name}: {_code_lines(node)} lines"
        for node in ast.walk(MODULES[module])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and _code_lines(node) > MAX_FUNCTION_LINES
    ]
    assert not long, f"{module}: {long}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_over_600_lines(module):
    path = os.path.join(ROOT, *module.split(".")) + ".py"
    if not os.path.exists(path):
        path = os.path.join(ROOT, *module.split("."), "__init__.py")
    with open(path, encoding="utf-8") as f:
        lines = f.read().count("\n")
    assert lines <= MAX_MODULE_LINES, f"{module}: {lines} lines"


# Every module of every package has a test file at the mirrored path,
# `keras_attention/a/b.py` <-> `tests/a/test_b.py` (a private module
# `_b.py` <-> `test_b.py`); the modules tested by a file of another name:
TESTED_ELSEWHERE = {
    "keras_attention._hub_adapters": "tests/test_hub.py",
    "keras_attention._hub_families": "tests/test_hub.py",
    "keras_attention.layers._cache_call": "tests/layers/test_cache.py",
    "keras_attention.layers._explain": "tests/ops/test_explain.py",
    "keras_attention.layers._holders": "tests/layers/test_multi_head_base.py",
    "keras_attention.layers._latent_projections": "tests/layers/test_latent.py",
    "keras_attention.layers._latent_rope": "tests/layers/test_latent.py",
    "keras_attention.ops._native": "tests/ops/test_native_torch.py",
    "keras_attention.ops._refusals": "tests/ops/test_plan.py",
    "keras_attention.ops.grids": "tests/ops/test_masks.py",
    "keras_attention.ops._registry": "tests/ops/test_kernels.py",
    "keras_attention.ops._thresholds": "tests/ops/test_plan.py",
}


def _mirrored_modules():
    for module in sorted(MODULES):
        if not os.path.isdir(os.path.join(ROOT, *module.split("."))):
            yield module


def _mirror(module):
    parts = module.split(".")[1:]
    name = parts[-1].removeprefix("_")
    mirror = os.path.join("tests", *parts[:-1], f"test_{name}.py")
    return TESTED_ELSEWHERE.get(module, mirror)


def test_every_package_is_mirrored():
    packages = {m.rsplit(".", 1)[0] for m in _mirrored_modules()}
    assert {
        "keras_attention",
        "keras_attention.ops",
        "keras_attention.layers",
        "keras_attention.models.sentiment",
        "keras_attention.visualize",
    } <= packages


@pytest.mark.parametrize("module", list(_mirrored_modules()))
def test_tests_mirror_the_modules(module):
    mirror = _mirror(module)
    assert os.path.exists(os.path.join(ROOT, mirror)), (
        f"{module} has no test file {mirror}"
    )


# One child for the two tests below: it records which example modules the
# bare import loaded, then reaches each subpackage through the package.
FIRST_USE = (
    "import json, sys, keras_attention; "
    "loaded = sorted(m for m in sys.modules "
    "if m.split('.')[:2] in (['keras_attention', 'data'], "
    "['keras_attention', 'models'], ['keras_attention', 'visualize'])); "
    "used = [callable(keras_attention.models.build_sentiment_classifier), "
    "callable(keras_attention.data.read_parallel), "
    "callable(keras_attention.visualize.plot_attention)]; "
    "print(json.dumps([loaded, used, hasattr(keras_attention, 'nope')]))"
)


@pytest.fixture(scope="module")
def first_use():
    done = run_python(["-c", FIRST_USE])
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.heavy
def test_importing_the_package_loads_no_example_code(first_use):
    loaded, _, _ = first_use
    assert loaded == []


@pytest.mark.heavy
def test_example_subpackages_load_on_first_use(first_use):
    _, used, has_nope = first_use
    assert used == [True, True, True]
    assert has_nope is False
