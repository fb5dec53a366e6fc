"""keras_attention.text: the text handling the core owns.

That the core imports neither `keras_attention.data` nor `.models` (nor
`.visualize`) is checked in a fresh process by `tests/test_architecture.py`
(`test_importing_the_package_loads_no_example_code`).
"""

import re

import keras
import numpy as np
import pytest

from keras_attention import text


@pytest.mark.tensorflow_only
def test_strip_regex_strips_what_text_vectorization_strips():
    import tensorflow as tf

    sentence = 'It\'s -- (really) good!? a_b #1 ~x~ "q" ünï'
    layer = keras.layers.TextVectorization(
        standardize="strip_punctuation", split=None, output_mode="int"
    )
    # The layer's own standardization, without a vocabulary lookup.
    want = tf.strings.regex_replace(sentence, text.STRIP_PUNCTUATION_REGEX, "")
    layer.adapt([sentence])
    assert layer.get_vocabulary()[2] == want.numpy().decode()


def test_tokenize_and_detokenize_round_trip():
    assert text.tokenize("Two men, (laughing).") == "two men , ( laughing ) ."
    assert text.detokenize(text.tokenize("Two men, (laughing).")) == (
        "two men, (laughing)."
    )


def test_vectorize_pads_and_maps_unknown_words():
    ids = text.vectorize(["", "[UNK]", "a", "dog"], ["a dog", "cat", ""])
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(ids, [[2, 3], [1, 0], [0, 0]])


@pytest.mark.tensorflow_only
def test_tf_tokenize_matches_tokenize():
    texts = ["Zwei Männer, die lachen.", "(A) dog's ball!"]
    got = [
        " ".join(t.decode().split())
        for t in text.tf_tokenize(np.array(texts, dtype=object)).numpy()
    ]
    assert got == [text.tokenize(t) for t in texts]


@pytest.mark.parametrize(
    "texts, expected",
    [
        ("a good film", ["a good film"]),
        (["a", "b"], ["a", "b"]),
        (("a", b"b"), ["a", "b"]),
        (np.array(["a", "b"]), ["a", "b"]),
        (np.array([["a"], ["b"]], dtype=object), ["a", "b"]),
    ],
)
def test_as_text_list_takes_every_form_of_text(texts, expected):
    assert text.as_text_list(texts) == expected


@pytest.mark.parametrize(
    "texts, match",
    [(3, "texts=3"), (["ok", None], "element of type NoneType: None")],
)
def test_as_text_list_rejects_what_is_not_text(texts, match):
    with pytest.raises(ValueError, match=match):
        text.as_text_list(texts)


def _text_model():
    vectorizer = keras.layers.TextVectorization(output_sequence_length=4)
    vectorizer.adapt(["a good film", "a bad film"])
    sentences = keras.Input(shape=(1,), dtype="string")
    return text.TextModel(sentences, vectorizer(sentences))


@pytest.mark.tensorflow_only
def test_text_model_refuses_a_text_without_a_word():
    import tensorflow as tf

    vectorizer = keras.layers.TextVectorization()
    vectorizer.adapt(["a good film", "a bad film"])
    sentences = keras.Input(shape=(1,), dtype="string")
    embedded = keras.layers.Embedding(6, 2, mask_zero=True)(
        vectorizer(sentences)
    )
    model = text.TextModel(sentences, keras.layers.LSTM(2)(embedded))
    # The package's one rule for empty text (#30 item 1), as
    # Translator.translate: a ValueError naming the text, not an answer.
    for x, where in [
        ("", "x"),
        (["a bad film", "  "], "x[1]"),
        (np.array(["good", "!"]), "x[1]"),
    ]:
        with pytest.raises(ValueError, match=re.escape(f"Received: {where}=")):
            model.predict(x, verbose=0)
    with pytest.raises(ValueError, match=re.escape("Received: x[0]=''")):
        model.predict_on_batch(["", "!"])
    with pytest.raises(ValueError, match="holds no text"):
        model.predict([], verbose=0)
    with pytest.raises(ValueError, match="Received: x=None"):
        model.predict(None, verbose=0)

    # A dataset of strings reaches predict_step unchecked: a batch without
    # a token is all padding, as next to a longer text.
    def dataset(texts):
        rows = np.array([[t] for t in texts], dtype=object)
        return tf.data.Dataset.from_tensor_slices(rows).batch(8)

    want = model.predict(dataset(["a bad film", "", "!"]), verbose=0)[1:]
    got = model.predict(dataset(["", "!"]), verbose=0)
    np.testing.assert_allclose(got, want)


@pytest.mark.tensorflow_only
def test_text_model_pads_outputs_whose_length_differs_between_batches():
    # Token ids, as long as each batch's longest text: Keras's predict
    # returned the two batches as one tf.RaggedTensor.
    vectorizer = keras.layers.TextVectorization()
    vectorizer.adapt(["a good film", "a bad film that goes on"])
    sentences = keras.Input(shape=(1,), dtype="string")
    model = text.TextModel(sentences, {"ids": vectorizer(sentences)})
    texts = ["a good film", "bad", "a bad film that goes on"]
    got = model.predict(texts, batch_size=2, verbose=0)["ids"]
    assert isinstance(got, np.ndarray) and got.shape == (3, 6)
    first = model.predict(texts[:2], verbose=0)["ids"]
    np.testing.assert_array_equal(got[:2, :3], first)
    np.testing.assert_array_equal(got[:2, 3:], 0)
    np.testing.assert_array_equal(
        got[2], model.predict(texts[2:], verbose=0)["ids"][0]
    )


@pytest.mark.tensorflow_only
def test_text_model_predicts_from_lists_strings_and_numpy_arrays(tmp_path):
    model = _text_model()
    want = model.predict(
        np.array(["a good film", "bad"], dtype=object), verbose=0
    )
    np.testing.assert_array_equal(
        model.predict(["a good film", "bad"], verbose=0), want
    )
    np.testing.assert_array_equal(
        model.predict(np.array(["a good film", "bad"]), verbose=0), want
    )
    np.testing.assert_array_equal(
        model.predict("a good film", verbose=0), want[:1]
    )
    np.testing.assert_array_equal(
        model.predict_on_batch(["a good film", "bad"]), want
    )
    path = str(tmp_path / "text_model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, text.TextModel)
    np.testing.assert_array_equal(
        loaded.predict(["a good film", "bad"], verbose=0), want
    )
