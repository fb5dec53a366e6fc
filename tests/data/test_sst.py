"""data/sst.py: sentence-level SST splits on a tiny fixture."""

import pytest

from tests.data._tsv import write_tsv as _write_tsv

# Sentence-level SST splits (keras_attention.data.sst) on a tiny fixture
# laid out as ../shared/data: SST-5 sentences (cased, five classes) and
# SST-2 phrases of the same sentences (lower-cased, binary).
_SST5 = [
    (f"Film {i} is {word} , Really .", label)
    for i, (word, label) in enumerate(
        [("awful", 0), ("dull", 1), ("plain", 2), ("fine", 3), ("great", 4)] * 4
    )
] + [("Really .", 3)]  # a part of every other sentence


def _sst_root(tmp_path):
    from keras_attention.data import sst

    (tmp_path / "sst5").mkdir()
    (tmp_path / "sst2").mkdir()
    _write_tsv(tmp_path / "sst5" / "train.tsv", _SST5)
    phrases = []
    for sentence, label in _SST5[:-1]:
        if label != 2:
            tokens = sentence.lower().split()
            binary = int(label > 2)
            # The whole sentence, a sub-phrase and a single word of it.
            phrases += [
                (" ".join(tokens), binary),
                (" ".join(tokens[:3]), binary),
                (tokens[2], binary),
            ]
    phrases.append(("a phrase of no sentence", 1))
    _write_tsv(tmp_path / "sst2" / "train.tsv", phrases[::2])
    _write_tsv(tmp_path / "sst2" / "dev.tsv", phrases[1::2])
    assert sorted(sst.DATA_FILES) == sorted(
        str(p.relative_to(tmp_path)) for p in tmp_path.glob("*/*.tsv")
    )
    return str(tmp_path)


def _inside_a_held_out_sentence(splits, phrase):
    """Whether `phrase` occurs, as whole tokens, in a held-out sentence."""
    held_out = splits["validation"].sentences + splits["test"].sentences
    return any(
        f" {' '.join(phrase.lower().split())} " in f" {s.lower()} "
        for s in held_out
    )


@pytest.mark.backend_independent
def test_sst_splits_hold_out_whole_sentences_and_their_phrases(tmp_path):
    from keras_attention.data import sst

    root = _sst_root(tmp_path)
    # Seed 0 leaves "Really ." in training, inside every held-out sentence.
    sst2 = sst.load_sst_splits("sst2", root, 0.2, 0.2, seed=0)
    sst5 = sst.load_sst_splits("sst5", root, 0.2, 0.2, seed=0)
    # One permutation for both tasks: 4 test and 4 validation sentences
    # of the 20, the neutral ones dropped for SST-2.
    for name in ("validation", "test"):
        assert len(sst5[name]) == 4
        assert sst2[name].sentences == [
            s.lower()
            for s, y in zip(
                sst5[name].sentences, sst5[name].labels, strict=True
            )
            if y != 2
        ]
        assert sst2[name].labels.tolist() == [
            int(y > 2) for y in sst5[name].labels if y != 2
        ]
    assert set(sst5["test"].sentences).isdisjoint(sst5["validation"].sentences)
    assert len(sst5["train"]) == 21 - 8 - 1
    # No part of a held-out sentence is trained on, in either task...
    for split in (sst2["train"], sst5["train"]):
        for phrase in split.sentences:
            assert not _inside_a_held_out_sentence(sst5, phrase), phrase
    # ...and everything else is: the other phrases, each once.
    kept = {sst.normalise_tokens(s) for s in sst2["train"].sentences}
    assert ("a", "phrase", "of", "no", "sentence") in kept
    assert len(kept) == len(sst2["train"])
    expected_sentences = [
        tuple(s.lower().split())
        for s, y in zip(
            sst5["train"].sentences, sst5["train"].labels, strict=True
        )
        if y != 2
    ]
    assert set(expected_sentences) <= kept
    assert {tokens[:3] for tokens in expected_sentences} <= kept
    assert sst2["train"].label_names == sst.SST2_NAMES
    assert sst5["test"].label_names == sst.SST5_NAMES
    without = sst.load_sst_splits("sst2", root, 0.2, 0.2, 0, phrases=False)
    assert sorted(without["train"].sentences) == sorted(
        " ".join(t) for t in expected_sentences
    )


@pytest.mark.backend_independent
def test_sst_splits_are_seeded(tmp_path):
    from keras_attention.data import sst

    root = _sst_root(tmp_path)
    first = sst.load_sst_splits("sst2", root, seed=3)
    again = sst.load_sst_splits("sst2", root, seed=3)
    other = sst.load_sst_splits("sst2", root, seed=4)
    for name in ("train", "validation", "test"):
        assert first[name].sentences == again[name].sentences
        assert first[name].labels.tolist() == again[name].labels.tolist()
    assert first["test"].sentences != other["test"].sentences


@pytest.mark.backend_independent
def test_sst_splits_refuse_missing_files_and_bad_tasks(tmp_path):
    from keras_attention.data import sst

    with pytest.raises(FileNotFoundError, match="sst5/train.tsv"):
        sst.load_sst_splits("sst2", str(tmp_path))
    with pytest.raises(ValueError, match="task='sst3'"):
        sst.load_sst_splits("sst3", str(tmp_path))
