"""The table of the engine's kernels, one per path of the planner
(private module).

Each kernel is `(AttentionCall, Plan) -> Result`; the modules that hold
kernels register them here (`ops/_kernels.py` this package's,
`ops/_native_torch.py` and `ops/_native_jax.py` the backends' own), and
`engine.run` reads the table. A backend's module is imported on the first
look-up of one of its paths (`load_with`, declared by `ops/_native.py`),
so that no backend imports another's framework; from then on the table
holds its kernels themselves. Nothing here imports a kernel, so a
kernel's module and the engine both stand above it.
"""

from typing import Any
from typing import NamedTuple


class Result(NamedTuple):
    """What a kernel gives: the output `(batch, Tq, heads, Dv)`, the
    weights `(batch, heads, Tq, Tk)` or `None`, the log-sum-exp `(batch,
    heads, Tq)` or `None` (`-inf` for a row with no kept key)."""

    output: Any
    weights: Any = None
    lse: Any = None


class _Table(dict):
    """The kernels by path; a path whose module is not imported yet is
    loaded on its first look-up."""

    def __missing__(self, path):
        # A path no module declares is a `KeyError`, as in a dict.
        _LOADERS[path]()
        return dict.__getitem__(self, path)


KERNELS = _Table()
# The function that imports the module of a path's kernel, by path.
_LOADERS = {}


def load_with(paths, load):
    """Declares that `load()` imports the module that registers the
    kernels of `paths` (imported on the first look-up of one of them)."""
    for path in paths:
        _LOADERS[path] = load


def register(path):
    """Registers the decorated kernel as the one of the planner's `path`."""

    def decorate(kernel):
        if path in KERNELS:
            raise ValueError(
                "Each path has one kernel, and one is registered already. "
                f"Received: path={path!r}"
            )
        KERNELS[path] = kernel
        return kernel

    return decorate
