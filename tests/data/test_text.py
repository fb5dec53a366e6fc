"""keras_attention.text: the text handling the core owns."""

import keras
import numpy as np
import pytest

from keras_attention import text
from tests import subprocesses


def test_core_imports_neither_data_nor_models():
    code = (
        "import sys, keras_attention\n"
        "print([m for m in sys.modules if m.startswith("
        "('keras_attention.data', 'keras_attention.models'))])\n"
    )
    done = subprocesses.run_python(["-c", code])
    assert done.stdout.strip().splitlines()[-1] == "[]"


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
