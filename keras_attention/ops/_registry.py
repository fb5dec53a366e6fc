"""The table of the engine's kernels, one per path of the planner
(private module).

Each kernel is `(AttentionCall, Plan) -> Result`; the modules that hold
kernels register them here (`ops/_kernels.py` this package's,
`ops/_native.py` the backends' own), and `engine.run` reads the table.
Nothing here imports a kernel, so a kernel's module and the engine both
stand above it.
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


KERNELS = {}


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
