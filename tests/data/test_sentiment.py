import pathlib
import re

import numpy as np
import pytest

from keras_attention.data import sentiment
from keras_attention.data.sentiment import FILLER_WORDS
from keras_attention.data.sentiment import NEGATIVE_WORDS
from keras_attention.data.sentiment import NEGATORS
from keras_attention.data.sentiment import POSITIVE_WORDS
from keras_attention.data.sentiment import make_synthetic_sentiment
from keras_attention.data.sentiment import make_text_vectorizer
from keras_attention.data.sentiment import read_sentiment_tsv
from keras_attention.data.sentiment import tokens_for

# Checks the sentiment data readers, not a backend: the TensorFlow lane runs it.
pytestmark = pytest.mark.backend_independent

SST2 = pathlib.Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
SST2 = SST2.resolve() / "sst2"


def _label_by_rule(tokens):
    """The documented rule, re-derived from the tokens alone."""
    votes = []
    for i, token in enumerate(tokens):
        if token in POSITIVE_WORDS or token in NEGATIVE_WORDS:
            polarity = int(token in POSITIVE_WORDS)
            if i > 0 and tokens[i - 1] in NEGATORS:
                polarity = 1 - polarity
            votes.append(polarity)
    assert len(votes) % 2 == 1, tokens
    return int(2 * sum(votes) > len(votes))


# Synthetic task.


def test_same_seed_gives_same_data():
    a = make_synthetic_sentiment(50, seed=3)
    b = make_synthetic_sentiment(50, seed=3)
    assert a.sentences == b.sentences
    np.testing.assert_array_equal(a.labels, b.labels)
    for mask_a, mask_b in zip(a.cue_masks, b.cue_masks, strict=True):
        np.testing.assert_array_equal(mask_a, mask_b)
    assert make_synthetic_sentiment(50, seed=4).sentences != a.sentences


@pytest.mark.parametrize("num_examples", [1, 2, 101, 400])
def test_labels_are_balanced_int32(num_examples):
    data = make_synthetic_sentiment(num_examples, seed=1)
    assert len(data) == num_examples
    assert data.labels.dtype == np.int32
    assert set(np.unique(data.labels)) <= {0, 1}
    positives = int(data.labels.sum())
    assert abs(2 * positives - num_examples) <= 1


def test_sentences_respect_lengths_and_vocabulary():
    data = make_synthetic_sentiment(300, seed=2, min_length=10, max_length=14)
    vocabulary = (
        set(FILLER_WORDS)
        | set(POSITIVE_WORDS)
        | set(NEGATIVE_WORDS)
        | set(NEGATORS)
    )
    lengths = set()
    for sentence in data.sentences:
        tokens = sentence.split(" ")
        assert sentence == sentence.lower()
        assert set(tokens) <= vocabulary
        lengths.add(len(tokens))
    assert lengths == set(range(10, 15))


def test_filler_words_are_invented_and_distinct_from_cues():
    assert len(FILLER_WORDS) == len(set(FILLER_WORDS)) >= 200
    cues = set(POSITIVE_WORDS) | set(NEGATIVE_WORDS) | set(NEGATORS)
    assert not cues & set(FILLER_WORDS)
    assert all(re.fullmatch("[a-z]+", word) for word in FILLER_WORDS)


def test_cue_masks_align_with_tokens():
    data = make_synthetic_sentiment(300, seed=5)
    for sentence, mask in zip(data.sentences, data.cue_masks, strict=True):
        tokens = sentence.split(" ")
        assert mask.dtype == bool
        assert mask.shape == (len(tokens),)
        for i, token in enumerate(tokens):
            is_sentiment = token in POSITIVE_WORDS or token in NEGATIVE_WORDS
            is_negator = token in NEGATORS
            assert mask[i] == (is_sentiment or is_negator), (sentence, i)
            if is_negator:
                # A negator only ever opens a cue phrase.
                assert i + 1 < len(tokens)
                next_token = tokens[i + 1]
                assert next_token in POSITIVE_WORDS + NEGATIVE_WORDS


def test_labels_follow_the_majority_of_negated_polarities():
    data = make_synthetic_sentiment(1000, seed=6)
    for sentence, label in zip(data.sentences, data.labels, strict=True):
        assert _label_by_rule(sentence.split(" ")) == label, sentence


def test_cue_counts_and_negation_cover_every_case():
    data = make_synthetic_sentiment(1000, seed=7, min_length=10, max_cues=5)
    counts = set()
    negated_phrases = 0
    for sentence in data.sentences:
        tokens = sentence.split(" ")
        counts.add(sum(t in POSITIVE_WORDS + NEGATIVE_WORDS for t in tokens))
        negated_phrases += sum(t in NEGATORS for t in tokens)
    phrases = sum(
        sum(t in POSITIVE_WORDS + NEGATIVE_WORDS for t in s.split(" "))
        for s in data.sentences
    )
    assert counts == {1, 3, 5}
    assert 0.45 < negated_phrases / phrases < 0.55


def test_negation_rate_zero_gives_no_negators():
    data = make_synthetic_sentiment(200, seed=8, negation_rate=0.0)
    assert not any(t in NEGATORS for s in data.sentences for t in s.split(" "))


def _counts(sentences, vocabulary):
    x = np.zeros((len(sentences), len(vocabulary) + 1))
    for row, sentence in enumerate(sentences):
        for token in sentence.split(" "):
            if token in vocabulary:
                x[row, vocabulary[token]] += 1
    x[:, -1] = 1.0  # bias
    return x


def _fit_logistic_regression(x, y, l2=1e-2, steps=25, tolerance=1e-10):
    """L2-regularised logistic regression by Newton's method.

    Stops once a step moves no weight by more than `tolerance`: Newton's
    method converges quadratically, on the test's data in 4 steps of the
    25 (each a 4000-row Hessian, about 0.2 s), and the further steps
    change nothing.
    """
    w = np.zeros(x.shape[1])
    eye = np.eye(x.shape[1]) * l2 * len(y)
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        gradient = x.T @ (p - y) + eye @ w
        hessian = (x * (p * (1 - p))[:, None]).T @ x + eye
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.max(np.abs(step)) < tolerance:
            break
    return w


def test_bag_of_words_baseline_does_not_solve_the_task():
    train = make_synthetic_sentiment(4000, seed=10)
    test = make_synthetic_sentiment(2000, seed=11)
    words = sorted({t for s in train.sentences for t in s.split(" ")})
    vocabulary = {word: i for i, word in enumerate(words)}
    w = _fit_logistic_regression(
        _counts(train.sentences, vocabulary), train.labels
    )
    predictions = _counts(test.sentences, vocabulary) @ w > 0
    accuracy = float(np.mean(predictions == test.labels))
    # Held-out accuracy is at chance (about 0.50); the bar leaves room for
    # noise but fails if, say, filler words started to depend on the label.
    assert accuracy < 0.65, accuracy


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"num_examples": 0}, "num_examples"),
        ({"num_examples": 2.5}, "num_examples"),
        ({"num_examples": 4, "max_cues": 2}, "max_cues"),
        ({"num_examples": 4, "max_cues": 0}, "max_cues"),
        ({"num_examples": 4, "min_length": 5}, "min_length"),
        ({"num_examples": 4, "min_length": 9, "max_length": 8}, "max_length"),
        ({"num_examples": 4, "negation_rate": 1.5}, "negation_rate"),
    ],
)
def test_invalid_arguments_raise(kwargs, argument):
    with pytest.raises(ValueError, match=f"argument `{argument}`"):
        make_synthetic_sentiment(**kwargs)


# TSV reader.


def _write(tmp_path, text, name="data.tsv"):
    # A lone surrogate (\udcXX) writes the byte 0xXX: not UTF-8.
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    return path


def test_read_tsv_reads_rows_and_ignores_trailing_blank_lines(tmp_path):
    path = _write(
        tmp_path,
        'sentence\tlabel\r\nthe film , good \t1\r\nnot "great"\t0\n\n \n',
    )
    sentences, labels = read_sentiment_tsv(path)
    assert sentences == ["the film , good", 'not "great"']
    assert labels.dtype == np.int32
    np.testing.assert_array_equal(labels, [1, 0])


def test_read_tsv_keeps_line_separators_inside_sentences(tmp_path):
    # str.splitlines broke this row in two at U+2028 ("found 1" column).
    path = _write(tmp_path, "sentence\tlabel\ngood\u2028film\x85!\t1\n")
    assert read_sentiment_tsv(path)[0] == ["good\u2028film\x85!"]


def test_read_tsv_accepts_non_negative_multiclass_labels(tmp_path):
    path = _write(tmp_path, "sentence\tlabel\na\t4\nb\t0\nc\t2\n")
    _, labels = read_sentiment_tsv(str(path))
    np.testing.assert_array_equal(labels, [4, 0, 2])


@pytest.mark.parametrize(
    "text, where, what",
    [
        ("sentence\tlabel\na\t1\nb\t0\textra\n", "line 3", "2 tab-separated"),
        ("sentence\tlabel\na 1\n", "line 2", "found 1"),
        ("sentence\tlabel\na\t1\n\nb\t0\n", "line 3", "found 1"),
        ("sentence\tlabel\na\tpositive\n", "line 2", "must be an integer"),
        ("sentence\tlabel\na\t1\nb\t1.0\n", "line 3", "must be an integer"),
        ("sentence\tlabel\na\t\n", "line 2", "must be an integer"),
        ("sentence\tlabel\na\t0\nb\t-1\n", "line 3", "non-negative"),
        ("a good film\t1\n", "line 1", "expected the header"),
        ("text\tlabel\na\t1\n", "line 1", "expected the header"),
        ("", "is empty", "header"),
        ("\n\n", "is empty", "header"),
        ("sentence\tlabel\n", "no rows", "header"),
        ("sentence\tlabel\na\t1\ncaf\udce9\t0\n", "line 3", "not UTF-8 text"),
    ],
)
def test_read_tsv_rejects_malformed_files(tmp_path, text, where, what):
    path = _write(tmp_path, text, name="bad_file.tsv")
    with pytest.raises(ValueError, match=re.escape(str(path))) as info:
        read_sentiment_tsv(path)
    message = str(info.value)
    assert where in message and what in message, message


@pytest.mark.parametrize(
    "name, rows", [("dev.tsv", 6735), ("train.tsv", 60614)]
)
def test_read_tsv_reads_shared_sst2(name, rows):
    path = SST2 / name
    if not path.exists():
        pytest.skip(f"{path} is absent (shared data not mounted)")
    sentences, labels = read_sentiment_tsv(path)
    assert len(sentences) == len(labels) == rows
    assert set(np.unique(labels)) == {0, 1}
    assert all(sentences)


# Vectorizer.


def test_vectorizer_pads_with_0_and_maps_unknown_words_to_1():
    vectorizer = make_text_vectorizer(
        ["a good film", "a bad film"], output_sequence_length=5
    )
    vocabulary = vectorizer.get_vocabulary()
    assert vocabulary[:2] == ["", "[UNK]"]
    ids = np.asarray(vectorizer(["film unseen"]))
    np.testing.assert_array_equal(ids, [[vocabulary.index("film"), 1, 0, 0, 0]])


def test_vectorizer_is_adapted_on_the_given_sentences_only():
    train = make_synthetic_sentiment(200, seed=0)
    vectorizer = make_text_vectorizer(train.sentences)
    vocabulary = set(vectorizer.get_vocabulary())
    assert {t for s in train.sentences for t in s.split(" ")} <= vocabulary
    assert "zzyzx" not in vocabulary
    assert vectorizer.vocabulary_size() == len(vocabulary)


def test_vectorizer_standardizes_case_and_punctuation():
    vectorizer = make_text_vectorizer(["good film"])
    np.testing.assert_array_equal(
        np.asarray(vectorizer(["Good, FILM!"])),
        np.asarray(vectorizer(["good film"])),
    )


def test_vectorizer_respects_max_tokens():
    vectorizer = make_text_vectorizer(["a b c d e f g h"], max_tokens=5)
    assert vectorizer.vocabulary_size() == 5


def test_vectorizer_rejects_a_bare_string():
    with pytest.raises(ValueError, match="argument `sentences`"):
        make_text_vectorizer("a good film")


def test_tokens_for_aligns_with_vectorizer_positions():
    vectorizer = make_text_vectorizer(["The film, it's good!", "bad film"])
    vocabulary = vectorizer.get_vocabulary()
    sentence = "  THE film (really) isn't bad... "
    tokens = tokens_for(vectorizer, sentence)
    ids = np.asarray(vectorizer([sentence]))[0]
    assert tokens == ["the", "film", "really", "isnt", "bad"]
    assert len(tokens) == int(np.count_nonzero(ids))
    for token, index in zip(tokens, ids, strict=False):
        expected = vocabulary.index(token) if token in vocabulary else 1
        assert index == expected


def test_tokens_for_truncates_to_output_sequence_length():
    vectorizer = make_text_vectorizer(["a b c"], output_sequence_length=2)
    assert tokens_for(vectorizer, "c b a") == ["c", "b"]


def test_tokens_for_rejects_unsupported_vectorizers():
    import keras

    vectorizer = keras.layers.TextVectorization(split="character")
    vectorizer.adapt(np.array(["ab"], dtype=object))
    with pytest.raises(ValueError, match="split='whitespace'"):
        tokens_for(vectorizer, "ab")


def test_public_names_are_re_exported():
    from keras_attention import data

    for name in (
        "SentimentData",
        "make_synthetic_sentiment",
        "read_sentiment_tsv",
        "make_text_vectorizer",
        "tokens_for",
        "load_tfds_sentiment",
    ):
        assert getattr(data, name) is not None
    assert data.make_synthetic_sentiment is sentiment.make_synthetic_sentiment
