"""Translation data: synthetic task, parallel-text reader, TFDS loader."""

import os

import numpy as np
import pytest

from keras_attention.data import translation

# Checks the parallel-text readers, not a backend: the TensorFlow lane runs it.
pytestmark = pytest.mark.backend_independent

SOURCE_CLASS = {
    word: word_class
    for word_class, words in translation.SOURCE_WORDS.items()
    for word in words
}


def _write(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def test_synthetic_is_deterministic_for_a_seed():
    a = translation.make_synthetic_translation(50, seed=3)
    b = translation.make_synthetic_translation(50, seed=3)
    c = translation.make_synthetic_translation(50, seed=4)
    assert a == b
    assert a.sources != c.sources


def test_synthetic_targets_translate_their_aligned_source_words():
    data = translation.make_synthetic_translation(300, seed=0)
    for source, target, alignment in zip(
        data.sources, data.targets, data.alignments, strict=True
    ):
        source, target = source.split(), target.split()
        assert len(target) == len(source) == len(alignment)
        assert sorted(alignment) == list(range(len(source)))
        for word, position in zip(target, alignment, strict=True):
            assert translation.SYNTHETIC_LEXICON[source[position]] == word


def test_synthetic_moves_adjectives_after_their_noun():
    data = translation.make_synthetic_translation(300, seed=1)
    swapped = 0
    for source, alignment in zip(data.sources, data.alignments, strict=True):
        classes = [SOURCE_CLASS[w] for w in source.split()]
        ordered = [classes[p] for p in alignment]
        for i, word_class in enumerate(ordered):
            if word_class == "adjective":
                # In the target an adjective follows a noun or an adjective.
                assert ordered[i - 1] in ("noun", "adjective")
                swapped += 1
        for i, word_class in enumerate(classes):
            if word_class == "adjective":
                assert classes[i + 1] in ("noun", "adjective")
    assert swapped > 100


def test_synthetic_lengths_vary_between_3_and_15():
    data = translation.make_synthetic_translation(2000, seed=0)
    lengths = {len(s.split()) for s in data.sources}
    assert min(lengths) == 3
    assert max(lengths) <= 15
    assert len(lengths) >= 10


def test_lexicon_is_a_bijection_between_disjoint_vocabularies():
    lexicon = translation.SYNTHETIC_LEXICON
    assert len(set(lexicon.values())) == len(lexicon)
    assert not set(lexicon) & set(lexicon.values())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_examples": 0}, "num_examples=0"),
        ({"max_adjectives": -1}, "max_adjectives=-1"),
    ],
)
def test_synthetic_invalid_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        translation.make_synthetic_translation(**kwargs)


def test_read_parallel_reads_pairs_and_ignores_trailing_blank_lines(tmp_path):
    _write(tmp_path, "train.de", "Ein Hund.\n  Zwei Katzen  \n\n\n")
    _write(tmp_path, "train.en", "A dog.\nTwo cats\n")
    data = translation.read_parallel(tmp_path / "train")
    assert data.sources == ["Ein Hund.", "Zwei Katzen"]
    assert data.targets == ["A dog.", "Two cats"]
    assert data.alignments is None


def test_read_parallel_other_suffixes(tmp_path):
    _write(tmp_path, "x.fr", "un chat\n")
    _write(tmp_path, "x.en", "a cat\n")
    data = translation.read_parallel(tmp_path / "x", source="fr")
    assert data.sources == ["un chat"]


def test_read_parallel_mismatched_line_counts_name_file_and_line(tmp_path):
    _write(tmp_path, "val.de", "a\nb\nc\n")
    _write(tmp_path, "val.en", "a\nb\n")
    with pytest.raises(ValueError, match=r"line 3 of .*val\.de has no"):
        translation.read_parallel(tmp_path / "val")


def test_read_parallel_empty_line_names_file_and_line(tmp_path):
    _write(tmp_path, "val.de", "a\nb\nc\n")
    _write(tmp_path, "val.en", "a\n   \nc\n")
    with pytest.raises(ValueError, match=r"Empty line 2 in .*val\.en"):
        translation.read_parallel(tmp_path / "val")


def test_read_parallel_keeps_line_separators_inside_sentences(tmp_path):
    # Lines end at \n, \r\n or \r only: str.splitlines would also break at
    # U+2028 or U+0085 and shift every following pair out of alignment.
    _write(tmp_path, "p.de", "ein\u2028hund\r\nzwei\x85katzen\rdrei\n")
    _write(tmp_path, "p.en", "a dog\ntwo cats\nthree\n")
    data = translation.read_parallel(tmp_path / "p")
    assert data.sources == ["ein\u2028hund", "zwei\x85katzen", "drei"]


def test_read_parallel_names_the_file_and_line_that_is_not_utf8(tmp_path):
    (tmp_path / "p.de").write_bytes("ein hund\nkäse\n".encode("latin-1"))
    _write(tmp_path, "p.en", "a dog\ncheese\n")
    with pytest.raises(ValueError, match=r"p\.de, line 2: not UTF-8 text"):
        translation.read_parallel(tmp_path / "p")


def test_read_parallel_missing_file_raises(tmp_path):
    _write(tmp_path, "val.de", "a\n")
    with pytest.raises(FileNotFoundError):
        translation.read_parallel(tmp_path / "val")


@pytest.mark.usefixtures("tfds_temp_in_tmp_path")
def test_tfds_loader_reads_pairs_offline():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6):
        data = translation.load_tfds_translation(
            "wmt14_translate/de-en", split="train"
        )
    assert 0 < len(data) <= 6
    assert len(data.sources) == len(data.targets)
    assert all(isinstance(s, str) and s for s in data.sources + data.targets)


@pytest.mark.usefixtures("tfds_temp_in_tmp_path")
def test_tfds_loader_unknown_language_raises():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=2):
        with pytest.raises(
            ValueError, match=r"features \['de', 'en'\]\. Received: source='fr'"
        ):
            translation.load_tfds_translation(
                "wmt14_translate/de-en", split="train", source="fr"
            )


def test_tokenize_and_detokenize_round_trip_punctuation():
    assert translation.tokenize("Ein Mann, der läuft!") == (
        "ein mann , der läuft !"
    )
    assert translation.detokenize("a man ( old ) runs .") == "a man (old) runs."
    text = "two dogs, playing in the snow."
    assert translation.detokenize(translation.tokenize(text)) == text


def test_parallel_corpus_length():
    data = translation.ParallelCorpus(["a"], ["b"])
    assert len(data) == 1
    assert np.ndim(data.sources) == 1


def test_hold_out_is_seeded_disjoint_and_keeps_order():
    corpus = translation.make_synthetic_translation(30, seed=1)
    rest, held = translation.hold_out(corpus, count=7, seed=3)
    assert (len(rest), len(held)) == (23, 7)
    pairs = list(zip(corpus.sources, corpus.targets, strict=True))
    rest_pairs = list(zip(rest.sources, rest.targets, strict=True))
    held_pairs = list(zip(held.sources, held.targets, strict=True))
    # Disjoint and complete, in corpus order, alignments with their pairs.
    indices = sorted(pairs.index(p) for p in held_pairs)
    assert [pairs.index(p) for p in held_pairs] == indices
    assert sorted(rest_pairs + held_pairs) == sorted(pairs)
    assert not set(rest_pairs) & set(held_pairs)
    assert held.alignments == [corpus.alignments[i] for i in indices]
    assert translation.hold_out(corpus, 7, seed=3) == (rest, held)
    assert translation.hold_out(corpus, 7, seed=4)[1] != held
    # A sentence of a held-out pair is not trained on, even repeated.
    repeated = translation.ParallelCorpus(
        ["a", "b", "a", "c", "d"], ["1", "2", "3", "2", "4"]
    )
    for seed in range(4):
        rest, again = translation.hold_out(repeated, count=1, seed=seed)
        assert not set(rest.sources) & set(again.sources)
        assert not set(rest.targets) & set(again.targets)
        # Every pair but d's shares a sentence with one other pair.
        assert len(rest) == (4 if again.sources == ["d"] else 3)
    with pytest.raises(ValueError, match=r"in \[1, 30\).*Received: count=30"):
        translation.hold_out(corpus, count=30)
