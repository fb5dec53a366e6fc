"""data/files.py: the lines of a text file, and a clear error for one that
is not UTF-8."""

import pytest

from keras_attention.data import files

pytestmark = pytest.mark.backend_independent


def test_universal_newlines_and_nothing_else(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes("one\r\ntwo\rthree\nfour\u2028still four\x0c\n".encode())
    assert files.read_lines(path) == [
        "one",
        "two",
        "three",
        "four\u2028still four\x0c",
    ]
    path.write_bytes(b"no end")
    assert files.read_lines(path) == ["no end"]
    path.write_bytes(b"")
    assert files.read_lines(path) == []


def test_byte_order_mark_and_bad_bytes(tmp_path):
    path = tmp_path / "b.txt"
    path.write_bytes("\ufeffmarked\n".encode())
    assert files.read_lines(path, encoding="utf-8-sig") == ["marked"]
    path.write_bytes(b"fine\nbad \xff here\n")
    with pytest.raises(ValueError, match=r"b.txt, line 2: .*byte 0xff"):
        files.read_lines(path)
