"""docs/errors.md is executed: every row raises what it says.

The page holds a setup block and tables with the columns `Bad input`,
`Code`, `Error`, `Message contains`, `Raised in` and `Runs on`. Each row's
code must raise exactly the error named, with the message fragment, and
the error's traceback must pass through the function named in `Raised in`
(`path/under/keras_attention.py:Qualified.name`).

Coverage, the other direction: every `raise` statement with an exception
in `keras_attention/` and every call of a shared argument check (the
functions of `keras_attention/_validation.py` that raise, under any alias)
is a site. Every site must appear in the traceback of some row that ran,
so a new error without a row in the doc fails here. A site is excused only
on a backend where a row that names its function is skipped (e.g. a
TensorFlow-only row on the JAX lane).
"""

import ast
import dataclasses
import os
import re
import shutil
import tempfile

import keras
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "keras_attention")
DOC = os.path.join(ROOT, "docs", "errors.md")
HEADER = [
    "Bad input",
    "Code",
    "Error",
    "Message contains",
    "Raised in",
    "Runs on",
]
BACKEND = keras.backend.backend()
RUNS_ON = {
    "all": True,
    "tensorflow": BACKEND == "tensorflow",
    "jax": BACKEND == "jax",
    "torch": BACKEND == "torch",
    "not tensorflow": BACKEND != "tensorflow",
}


@dataclasses.dataclass(frozen=True)
class Row:
    line: int
    what: str
    code: str
    error: str
    fragment: str
    raised_in: str
    runs_on: str

    @property
    def runs_here(self):
        return RUNS_ON[self.runs_on]


def _cells(line):
    cells = re.split(r"(?<!\\)\|", line.strip())
    assert cells[0] == "" and cells[-1] == "", f"not a table row: {line!r}"
    return [c.strip().replace("\\|", "|") for c in cells[1:-1]]


def _code(cell):
    if cell == "-":
        return None
    assert cell.startswith("`") and cell.endswith("`"), cell
    return cell[1:-1]


def _read_doc():
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def _rows(text):
    rows = []
    lines = text.splitlines()
    in_table = False
    for number, line in enumerate(lines, start=1):
        if not line.startswith("|"):
            in_table = False
            continue
        cells = _cells(line)
        if cells == HEADER:
            in_table = True
            continue
        if not in_table or set("".join(cells)) <= set("-:"):
            continue
        assert len(cells) == len(HEADER), f"line {number}: {cells}"
        what, code, error, fragment, raised_in, runs_on = cells
        assert runs_on in RUNS_ON, f"line {number}: Runs on {runs_on!r}"
        rows.append(
            Row(
                number,
                what,
                _code(code),
                _code(error),
                _code(fragment),
                _code(raised_in),
                runs_on,
            )
        )
    return rows


def _setup(text):
    match = re.search(r"^## Setup\n.*?^```python\n(.*?)^```", text, re.M | re.S)
    assert match, "docs/errors.md has no ## Setup python block"
    return match.group(1)


TEXT = _read_doc()
ROWS = _rows(TEXT)


# Sites: where errors are raised, found in the source.


def _validators():
    """Names of the functions in `_validation.py` that raise, and
    `ops/checks.py`'s `floating` (the check of the tensors a call is
    given): a call of one is a check site of its caller."""
    with open(os.path.join(PACKAGE, "_validation.py")) as f:
        tree = ast.parse(f.read())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any(isinstance(n, ast.Raise) for n in ast.walk(node))
    } | {"floating"}


def _source_files():
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, PACKAGE).replace(os.sep, "/"), path


def _aliases(trees, validators):
    """Every name a validator is called by: its own, `as` imports, assigns."""
    names = set(validators)
    for tree in trees:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == "keras_attention._validation"
            ):
                names |= {a.asname or a.name for a in node.names}
            elif (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr in validators
            ):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _called_name(call):
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _sites():
    """`{(file, line): qualified name}` of every raise and check call."""
    parsed = {}
    for relative, path in _source_files():
        with open(path, encoding="utf-8") as f:
            parsed[relative] = ast.parse(f.read())
    validators = _validators()
    checks = _aliases(parsed.values(), validators)
    sites = {}

    def visit(node, qualname, relative):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{qualname}{child.name}"
                visit(child, f"{name}.<locals>.", relative)
                continue
            if isinstance(child, ast.ClassDef):
                visit(child, f"{qualname}{child.name}.", relative)
                continue
            is_raise = isinstance(child, ast.Raise) and child.exc is not None
            is_check = (
                isinstance(child, ast.Call)
                and relative != "_validation.py"
                and _called_name(child) in checks
            )
            if is_raise or is_check:
                where = qualname.removesuffix(".<locals>.").rstrip(".")
                sites[(relative, child.lineno)] = where or "<module>"
            visit(child, qualname, relative)

    for relative, tree in parsed.items():
        visit(tree, "", relative)
    return sites


SITES = _sites()


def _frames(error):
    """`(file, line, qualname)` of the package frames `error` went through."""
    frames = []
    traceback = error.__traceback__
    while traceback is not None:
        path = os.path.abspath(traceback.tb_frame.f_code.co_filename)
        if path.startswith(PACKAGE + os.sep):
            relative = os.path.relpath(path, PACKAGE).replace(os.sep, "/")
            frames.append(
                (
                    relative,
                    traceback.tb_lineno,
                    traceback.tb_frame.f_code.co_qualname,
                )
            )
        traceback = traceback.tb_next
    return frames


@pytest.fixture(scope="module")
def outcomes():
    """Runs the setup block once, then every row that runs here.

    Returns `{row: exception or None}`.
    """
    namespace = {"__name__": "errors_doc"}
    exec(compile(_setup(TEXT), DOC, "exec"), namespace)
    results = {}
    # Rows that build a TFDS dataset leave a temporary directory behind
    # (TFDS's `initialize_from_bucket` never removes its mkdtemp): in
    # FOLDER, which goes at the end, not in /tmp.
    saved_tempdir, tempfile.tempdir = tempfile.tempdir, namespace["FOLDER"]
    try:
        for row in ROWS:
            if not row.runs_here:
                continue
            keras.utils.set_random_seed(0)
            try:
                exec(
                    compile(row.code, f"{DOC}:{row.line}", "exec"),
                    dict(namespace),
                )
            except KeyboardInterrupt:
                raise
            except BaseException as error:  # SystemExit rows included.
                results[row] = error
            else:
                results[row] = None
    finally:
        tempfile.tempdir = saved_tempdir
        shutil.rmtree(namespace["FOLDER"], ignore_errors=True)
    return results


def test_doc_has_rows():
    assert len(ROWS) > 100, f"only {len(ROWS)} rows parsed from {DOC}"


@pytest.mark.parametrize(
    "row", ROWS, ids=[f"line{r.line}-{r.error}" for r in ROWS]
)
def test_row_raises_what_the_doc_says(row, outcomes):
    if not row.runs_here:
        pytest.skip(f"runs on {row.runs_on}; this lane runs {BACKEND}")
    error = outcomes[row]
    assert error is not None, f"line {row.line}: {row.code} did not raise"
    assert type(error).__name__ == row.error, (
        f"line {row.line}: {type(error).__name__}: {error}"
    )
    if row.fragment is not None:
        assert row.fragment in str(error), (
            f"line {row.line}: {row.fragment!r} not in {str(error)!r}"
        )
    if row.raised_in is not None:
        passed = {f"{file}:{name}" for file, _, name in _frames(error)}
        assert row.raised_in in passed, (
            f"line {row.line}: not raised in {row.raised_in}; its "
            f"traceback went through {sorted(passed)}"
        )


def test_every_raised_in_names_a_function_with_a_site():
    """Checked on every lane, so skipped rows cannot name stale places."""
    known = {f"{file}:{name}" for (file, _), name in SITES.items()}
    stale = sorted(
        {r.raised_in for r in ROWS if r.raised_in is not None} - known
    )
    assert not stale, f"Raised in names without a raise or check: {stale}"


def test_every_raise_in_the_package_has_a_row(outcomes):
    hit = set()
    for error in outcomes.values():
        if error is not None:
            hit |= {(file, line) for file, line, _ in _frames(error)}
    excused = {r.raised_in for r in ROWS if not r.runs_here}
    missing = [
        f"keras_attention/{file}:{line} ({name})"
        for (file, line), name in sorted(SITES.items())
        if (file, line) not in hit and f"{file}:{name}" not in excused
    ]
    assert not missing, (
        f"{len(missing)} of {len(SITES)} raise sites have no row in "
        "docs/errors.md that reaches them:\n" + "\n".join(missing)
    )


def test_site_finder_sees_the_checks():
    """The coverage test only means something if it finds the sites."""
    files = {file for file, _ in SITES}
    assert {"scores/base.py", "layers/multi_head.py", "saving.py"} <= files
    checks = [
        (f, n) for (f, _), n in SITES.items() if f == "layers/structured.py"
    ]
    # units, num_hops, penalty_coefficient and the input shape.
    assert len(checks) >= 4, checks
