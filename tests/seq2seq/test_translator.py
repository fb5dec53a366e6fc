"""keras_attention.seq2seq.Translator: decoding, teacher forcing, saving."""

import os

import keras
import numpy as np
import pytest

from keras_attention import seq2seq
from keras_attention.data.translation import make_synthetic_translation
from keras_attention.seq2seq.translator import target_text
from keras_attention.text import make_vectorizer
from keras_attention.text import tokenize
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import to_numpy

DATA = make_synthetic_translation(40, seed=5)


def _vocabulary(texts):
    # Built here, not with `models.translation.build_vocabularies`, whose
    # `TextVectorization.adapt` needs TensorFlow: these tests run on every
    # backend.
    return ["", "[UNK]", *sorted({w for t in texts for w in t.split()})]


SOURCE_VOCABULARY = _vocabulary(tokenize(t) for t in DATA.sources)
TARGET_VOCABULARY = _vocabulary(target_text(t) for t in DATA.targets)


def _model(**kwargs):
    defaults = {"embedding_dim": 8, "units": 8, "max_output_length": 6}
    return seq2seq.Translator(
        SOURCE_VOCABULARY, TARGET_VOCABULARY, **{**defaults, **kwargs}
    )


def test_vectorize_pads_and_maps_unknown_words_to_one():
    model = seq2seq.Translator(
        ["", "[UNK]", "ein", "hund", "."],
        ["", "[UNK]", "[start]", "[end]", "a", "dog"],
    )
    ids = model.vectorize_sources(["Ein Hund.", "ein Katze", ""])
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(ids, [[2, 3, 4], [2, 1, 0], [0, 0, 0]])
    targets = model.vectorize_targets(["A dog", "a cat"])
    np.testing.assert_array_equal(targets, [[2, 4, 5, 3], [2, 4, 1, 3]])


@pytest.mark.tensorflow_only
def test_vectorize_matches_text_vectorization():
    model = _model()
    texts = [*DATA.sources[:5], "völlig unbekannte wörter .", ""]
    # The layer that `keras_attention.saving` exports for serving.
    layer = make_vectorizer(SOURCE_VOCABULARY)
    want = to_numpy(layer([tokenize(t) for t in texts]))
    np.testing.assert_array_equal(model.vectorize_sources(texts), want)


@pytest.mark.heavy
@pytest.mark.parametrize("attention", ["bahdanau", "general", "concat"])
def test_saved_translator_loads_in_safe_mode_with_same_outputs(
    attention, tmp_path
):
    model = _model(attention=attention, beam_width=2)
    path = os.path.join(tmp_path, "translator.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, seq2seq.Translator)
    assert loaded.get_config() == model.get_config()
    for got, want in zip(loaded.weights, model.weights, strict=True):
        assert_allclose(got, want)
    if attention != "bahdanau":
        # Same config and weights; the outputs once (JAX compiles each).
        return
    ids = model.vectorize_sources(DATA.sources[:4])
    expected = model.predict(ids, verbose=0)
    for got, want in zip(loaded.predict(ids, verbose=0), expected, strict=True):
        assert_allclose(got, want, atol=1e-6)
    assert loaded.translate(DATA.sources[:2]) == model.translate(
        DATA.sources[:2]
    )


def test_call_on_source_ids_decodes_and_on_a_pair_teacher_forces():
    model = _model()
    source = model.vectorize_sources(DATA.sources[:3])
    target = model.vectorize_targets(DATA.targets[:3])
    tokens, scores, alignments = model(source)
    assert tuple(tokens.shape) == (3, 6)
    assert tuple(scores.shape) == (3,)
    assert tuple(alignments.shape) == (3, 6, source.shape[1])
    logits = model((source, target[:, :-1]))
    vocab = len(model.target_vocabulary)
    assert tuple(logits.shape) == (3, target.shape[1] - 1, vocab)
    _, forced = model.teacher_forcing(source, target[:, :-1])
    forced = to_numpy(forced)
    # No attention on source padding, none from target padding.
    assert np.all(
        forced[source[:, None, :].repeat(forced.shape[1], 1) == 0] == 0
    )
    assert np.all(forced[target[:, :-1] == 0] == 0)


def test_translate_returns_text_and_alignments():
    model = _model()
    texts, alignments = model.translate(
        DATA.sources[:2], return_alignments=True
    )
    assert all(isinstance(t, str) for t in texts)
    words, source_words, weights = alignments[0]
    assert weights.shape == (len(words), len(source_words))


@pytest.mark.tensorflow_lane
def test_translate_takes_one_string_a_list_or_a_numpy_array():
    """The text inputs' forms: Python, the same on every backend.

    Other lanes: `test_translate_returns_text_and_alignments` translates a
    list there (six translations of new batch sizes cost 13 s on JAX).
    """
    model = _model()
    sources = list(DATA.sources[:2])
    from_list = model.translate(sources)
    # One string is one sentence, not a list of characters.
    one = model.translate(sources[0])
    assert isinstance(one, str)
    assert one == from_list[0]
    text, (words, source_words, weights) = model.translate(
        sources[0], return_alignments=True
    )
    assert text == from_list[0]
    assert weights.shape == (len(words), len(source_words))
    assert model.translate(np.array(sources)) == from_list
    assert model.translate(np.array(sources, dtype=object)) == from_list


def test_translate_refuses_texts_without_a_word_and_takes_no_texts():
    model = _model()
    # The package's one rule for empty text (keras_attention.text.
    # check_words); before it, "" got an invented sentence.
    for texts, where in (("", "texts=''"), (["a", " !"], "texts\\[1\\]")):
        with pytest.raises(ValueError, match=f"one word.*Received: {where}"):
            model.translate(texts)
    assert model.translate([]) == []
    assert model.translate([], return_alignments=True) == ([], [])


@pytest.mark.parametrize(
    "texts, match",
    [(3, "texts=3"), ([b"ok", 4], "element of type int: 4")],
)
def test_translate_rejects_what_is_not_text(texts, match):
    with pytest.raises(ValueError, match=match):
        _model().translate(texts)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"embedding_dim": 0}, "embedding_dim=0"),
        ({"units": -2}, "units=-2"),
        ({"max_output_length": 0}, "max_output_length=0"),
        ({"beam_width": 0}, "beam_width=0"),
        ({"attention": "dot"}, "attention='dot'"),
    ],
)
def test_invalid_translator_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _model(**kwargs)


def test_target_vocabulary_without_start_token_raises():
    with pytest.raises(ValueError, match=r"no '\[start\]' token"):
        seq2seq.Translator(["", "[UNK]", "a"], ["", "[UNK]", "[end]", "b"])


@pytest.mark.tensorflow_lane
def test_translate_exposes_the_decoding_choice():
    """The dispatch of `decoding=`: Python, the same on every backend.

    Other lanes: the decoders' own tests (`tests/seq2seq/test_decoding.py`,
    `test_sampling.py`: top-k 1 is greedy, `test_monotonic.py`) check their
    numbers there (three decodings cost 18 s on JAX).
    """
    model = _model(attention="bahdanau_monotonic")
    texts = DATA.sources[:3]
    greedy = model.translate(texts)
    assert model.translate(texts, decoding="sample", top_k=1, seed=0) == greedy
    beam = model.translate(texts, beam_width=2, coverage_penalty=0.5)
    assert len(beam) == 3 and all(isinstance(t, str) for t in beam)
    config = seq2seq.Translator.from_config(model.get_config()).get_config()
    assert config["attention"] == "bahdanau_monotonic"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"decoding": "nucleus"}, "decoding='nucleus'"),
        ({"decoding": "greedy", "top_p": 0.9}, "Received: \\['top_p'\\]"),
    ],
)
def test_invalid_decoding_choice_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _model().translate("x", **kwargs)
