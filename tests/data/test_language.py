"""The language model's text: synthetic lines, vocabulary, ids, windows."""

import numpy as np
import pytest

from keras_attention.data import language
from keras_attention.data.translation import make_synthetic_translation

pytestmark = pytest.mark.backend_independent


def test_a_synthetic_line_is_a_sentence_then_its_translation():
    corpus = make_synthetic_translation(5, seed=4)
    lines = language.synthetic_lines(5, seed=4)
    for line, source, target in zip(
        lines, corpus.sources, corpus.targets, strict=True
    ):
        assert line == f"{source} = {target}"


def test_ids_round_trip_and_end_each_line():
    lines = ["a b a", "c, b."]
    vocabulary = language.build_vocabulary(lines)
    # Padding, unknown, end, then by frequency (ties alphabetical).
    assert vocabulary == ["", "[UNK]", "[end]", "a", "b", ",", ".", "c"]
    stream = language.encode(lines, vocabulary)
    assert stream.tolist() == [3, 4, 3, 2, 7, 5, 4, 6, 2]
    assert language.decode(stream, vocabulary) == "a b a"
    assert language.decode(stream[4:], vocabulary) == "c, b."
    assert language.to_ids("a z", vocabulary) == [3, language.UNK_ID]
    assert language.build_vocabulary(lines, max_tokens=4)[-1] == "a"


def test_windows_are_the_stream_and_its_next_ids():
    inputs, targets = language.windows(np.arange(10), 3)
    assert inputs.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert targets.tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    with pytest.raises(ValueError, match="no window of 12.*length=12"):
        language.windows(np.arange(10), 12)


def test_load_lines_reads_multi30k_and_names_bad_choices(tmp_path):
    for split in ("train", "val"):
        (tmp_path / f"{split}.en").write_text(f"A {split} line.\n")
    train, validation = language.load_lines("multi30k", str(tmp_path))
    assert (train, validation) == (["A train line."], ["A val line."])
    train, validation = language.load_lines("synthetic", num_examples=7)
    assert (len(train), len(validation)) == (7, 500)
    with pytest.raises(ValueError, match="Received: data='wiki'"):
        language.load_lines("wiki")
    with pytest.raises(ValueError, match="Received: data_dir=None"):
        language.load_lines("multi30k")
