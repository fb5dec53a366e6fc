"""griffe extension: Keras's docstring sections, read as sections.

The package's docstrings follow Keras (STYLE.md): `Call arguments:` lists
a layer's call arguments and `Example:` holds doctest examples. griffe's
Google parser knows neither title, so it would show the first as one run
of text and the second without its code blocks. Before the docstrings
are parsed, `Call arguments:` becomes an "Other parameters" section titled
"Call arguments" (and `Keyword arguments:`, the arguments that reach
`__init__` through `**kwargs`, one titled "Keyword arguments"), and
`Example:` an "Examples" section. The source files are not changed.
"""

import re

import griffe

_SECTIONS = (
    (
        re.compile(r"^(\s*)Call arguments:\s*$", flags=re.M),
        r"\1Other parameters: Call arguments",
    ),
    (
        re.compile(r"^(\s*)Keyword arguments:\s*$", flags=re.M),
        r"\1Other parameters: Keyword arguments",
    ),
    (re.compile(r"^(\s*)Example:\s*$", flags=re.M), r"\1Examples:"),
)


class KerasDocstrings(griffe.Extension):
    def on_object(self, *, obj, loader, **kwargs):
        if obj.docstring is None:
            return
        value = obj.docstring.value
        for pattern, replacement in _SECTIONS:
            value = pattern.sub(replacement, value)
        obj.docstring.value = value
