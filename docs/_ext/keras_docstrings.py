"""griffe extension: Keras's docstring sections, read as sections.

The package's docstrings follow Keras (STYLE.md): `Call arguments:` lists
a layer's call arguments, `Keyword arguments:` those that reach
`__init__` through `**kwargs`, and `Example:` holds doctest examples
written at the title's indentation after a blank line. griffe's Google
parser reads none of them: it shows the first two as one run of text,
and the doctest lines as nested quotes. Before the docstrings are
parsed, the first two become "Other parameters" sections with their own
titles, and an example becomes an "Examples" section, its lines indented
under the title (up to the next section title), so that its code is
shown as code. The source files are not changed.
"""

import re

import griffe

_TITLES = (
    (
        re.compile(r"^Call arguments:\s*$"),
        "Other parameters: Call arguments",
    ),
    (
        re.compile(r"^Keyword arguments:\s*$"),
        "Other parameters: Keyword arguments",
    ),
)
_EXAMPLE = re.compile(r"^Examples?:\s*$")
# A section title at the docstring's own indentation: `References:`.
_TITLE = re.compile(r"^[A-Z][\w ]*:\s*$")


def keras_sections(text):
    """The docstring `text` (dedented) with Keras's sections rewritten."""
    lines = text.split("\n")
    out = []
    in_example = False
    for line in lines:
        if in_example:
            if _TITLE.match(line):
                in_example = False
            else:
                if line.strip() or out[-1] != "Examples:":
                    out.append(f"    {line}" if line.strip() else "")
                continue
        if _EXAMPLE.match(line):
            in_example = True
            out.append("Examples:")
            continue
        for pattern, title in _TITLES:
            if pattern.match(line):
                line = title
        out.append(line)
    return "\n".join(out)


class KerasDocstrings(griffe.Extension):
    def on_object(self, *, obj, loader, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = keras_sections(obj.docstring.value)
