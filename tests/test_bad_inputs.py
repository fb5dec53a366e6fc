"""The defects a new user's trial found (issue #30), one test each.

Each test failed before its fix (a backend error, an invented result or
a silent acceptance) and checks the error a user now gets: a
`ValueError` or `TypeError` naming the argument and the value received.
The systematic sweep of every public entry point is `tests/test_sweep.py`.
"""

import re

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention import seq2seq


def _cell():
    return seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(4), seq2seq.BahdanauAttention(4)
    )


def _decode(function, **arguments):
    defaults = {
        "cell": _cell(),
        "memory": np.zeros((2, 5, 4), "float32"),
        "embedding": keras.layers.Embedding(6, 3),
        "output_layer": keras.layers.Dense(6),
        "start_token": 1,
        "end_token": 2,
        "max_length": 3,
    }
    return function(**{**defaults, **arguments})


# Item 4: decoder shapes and token ids.


def test_decoder_batch_mismatch_names_both_shapes(rand):
    with pytest.raises(ValueError, match=r"inputs.shape=\(2, 3, 4\), memory"):
        seq2seq.AttentionDecoder(_cell())(rand(2, 3, 4), rand(3, 5, 4))


@pytest.mark.parametrize(
    "function, extra",
    [
        (seq2seq.greedy_decode, {}),
        (seq2seq.sample_decode, {"seed": 0}),
        (seq2seq.beam_search_decode, {"beam_width": 2}),
    ],
)
@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("start_token", 99, r"\[0, 6\).*Received: start_token=99"),
        ("end_token", -1, r"Received: end_token=-1"),
        ("pad_token", 6, r"Received: pad_token=6"),
        ("start_token", 1.0, r"an integer token id. Received: start_token"),
        ("end_token", True, r"Received: end_token=True"),
    ],
)
def test_decoding_refuses_token_ids_outside_the_vocabulary(
    function, extra, name, value, expected
):
    with pytest.raises(ValueError, match=expected):
        _decode(function, **{name: value}, **extra)


def test_decoding_accepts_numpy_integer_tokens():
    result = _decode(seq2seq.greedy_decode, start_token=np.int64(5))
    assert tuple(result.tokens.shape) == (2, 3)


# Item 6: keras_attention.ops on its own.


def test_masked_softmax_mask_that_does_not_broadcast(rand):
    with pytest.raises(ValueError, match=r"mask.shape=\(2, 3, 4\), logits"):
        keras_attention.ops.masked_softmax(
            rand(2, 3, 5), mask=np.ones((2, 3, 4), bool)
        )


def test_masked_softmax_mask_that_broadcasts_is_kept(rand):
    logits = rand(2, 3, 5)
    mask = np.array([True, False, True, True, False])
    weights = keras.ops.convert_to_numpy(
        keras_attention.ops.masked_softmax(logits, mask=mask)
    )
    assert np.all(weights[..., ~mask] == 0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize(
    "shapes, expected",
    [
        (((2, 3, 4), (2, 5, 4), (2, 6, 4)), "as many keys as values"),
        (((2, 3, 4), (3, 5, 4), (3, 5, 4)), "the same leading axes"),
        (((2, 3, 4), (2, 5, 6), (2, 5, 4)), "of the same depth"),
        (((3, 4), (2, 5, 4), (2, 5, 4)), "of one rank"),
    ],
)
def test_attention_names_the_three_shapes(rand, shapes, expected):
    q, k, v = (rand(*s) for s in shapes)
    with pytest.raises(ValueError, match=expected) as error:
        keras_attention.ops.attention(q, k, v)
    assert f"value.shape={shapes[2]}" in str(error.value)


def test_attention_with_a_score_fn_allows_other_depths(rand):
    score = keras_attention.scores.AdditiveScore(3)
    context, _ = keras_attention.ops.attention(
        rand(2, 3, 4), rand(2, 5, 6), rand(2, 5, 2), score_fn=score
    )
    assert tuple(context.shape) == (2, 3, 2)


def test_attend_needs_one_logit_per_value(rand):
    with pytest.raises(ValueError, match=r"logits.shape=\(2, 3, 5\)"):
        keras_attention.ops.attend(rand(2, 3, 5), rand(2, 6, 4))


# Item 7: Luong units.


@pytest.mark.parametrize("units", [0, -3, 2.5, "4", True])
@pytest.mark.parametrize(
    "mechanism", [seq2seq.LuongAttention, seq2seq.LuongMonotonicAttention]
)
def test_luong_units_must_be_a_positive_integer(mechanism, units):
    with pytest.raises(ValueError, match=f"Received: units={units!r}"):
        mechanism("concat", units=units)


# Item 8: integer memory.


def test_decoder_refuses_integer_memory(rand):
    memory = np.ones((2, 5, 4), "int32")
    with pytest.raises(TypeError, match="memory.dtype=int32"):
        seq2seq.AttentionDecoder(_cell())(rand(2, 3, 4), memory)
    with pytest.raises(TypeError, match="memory.dtype=int32"):
        _decode(seq2seq.greedy_decode, memory=memory)


# Items 1, 2 and 11: one rule for empty text (keras_attention.text.
# check_words), in the Python API and on the command line. Translator and
# TextModel: tests/seq2seq/test_translator.py, tests/test_text.py.


@pytest.mark.parametrize(
    "text, word", [("", False), ("  !?", False), ("_", False), ("é", True)]
)
def test_a_word_is_a_letter_or_a_digit(text, word):
    assert keras_attention.text.has_words(text) is word
    if not word:
        with pytest.raises(
            ValueError, match=re.escape(f"Received: texts={text!r}")
        ):
            keras_attention.text.check_words(text)


@pytest.mark.backend_independent
def test_vectorizer_and_training_data_need_a_word(tmp_path):
    from keras_attention import data

    with pytest.raises(ValueError, match="vocabulary would be empty"):
        data.make_text_vectorizer(["", "  ", "!"])
    tsv = tmp_path / "nowords.tsv"
    tsv.write_text("sentence\tlabel\n" + "\t0\n!!\t1\n" * 6)
    with pytest.raises(ValueError, match="holds no word .* of its 12"):
        data.splits.load_sentiment_splits(str(tsv))


@pytest.mark.backend_independent
@pytest.mark.parametrize("sentence", ["", "   ", "?!"])
def test_cli_refuses_a_sentence_without_a_word_as_received(sentence):
    import argparse

    from keras_attention.models import cli

    with pytest.raises(
        argparse.ArgumentTypeError, match=re.escape(f"got {sentence!r}") + "$"
    ):
        cli.sentence(sentence)
    assert cli.sentence("ein hund") == "ein hund"


# Item 3: multi-worker TensorFlow without a cluster.


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("tf_config", [None, "{}", '{"cluster": {}}'])
def test_multi_worker_without_a_cluster_is_refused(monkeypatch, tf_config):
    from keras_attention.models import distribute

    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(ValueError, match="needs the cluster: set TF_CONFIG"):
        distribute.get_strategy("multi-worker")


# Item 11: smaller defects.


def test_structured_self_attention_defaults_its_penalty(rand):
    # Was a bare "missing 1 required positional argument" TypeError.
    layer = keras_attention.StructuredSelfAttention(4, 2)
    assert layer.penalty_coefficient == 0.0
    layer(rand(2, 5, 3))
    assert layer.losses == []


@pytest.mark.backend_independent
def test_bleu_of_a_perfect_match_is_exactly_100():
    pytest.importorskip("sacrebleu")
    from keras_attention.models import translation

    sentences = ["a dog runs in the park today", "two men are laughing"]
    assert translation.corpus_bleu(sentences, sentences) == 100.0
