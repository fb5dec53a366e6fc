"""Reading the example data's text files."""

import os


def read_lines(path: str | os.PathLike, encoding: str = "utf-8") -> list[str]:
    """The lines of a text file, without their line ends.

    Args:
        path: The file.
        encoding: `"utf-8"`, or `"utf-8-sig"` to allow a byte-order mark.
            Defaults to `"utf-8"`.

    Returns:
        A list of strings: `\\n`, `\\r\\n` and `\\r` end a line (Python's
        universal newlines), nothing else does.

    Raises:
        ValueError: If the file is not text in `encoding`, naming the file,
            the 1-based line and the byte (Python's `UnicodeDecodeError`
            names neither the file nor the line).
    """
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise ValueError(
            f"{path}, line {line}: not UTF-8 text (byte "
            f"0x{raw[error.start]:02x} at offset {error.start}). Save the "
            "file as UTF-8."
        ) from None
    # Python's universal newlines, not `str.splitlines`, which also breaks
    # at U+2028, U+0085, form feeds, ... inside a sentence.
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines
