"""Word-level text handling shared by the text models and their data.

The library core owns this module: `keras_attention.seq2seq.Translator`
tokenizes and vectorizes its input with it, `keras_attention.saving` puts
its TensorFlow form in exported SavedModels, and `keras_attention.data`
re-exports it for the examples. It imports only NumPy and Keras
(TensorFlow inside the `tf_*` functions and `make_vectorizer`).

- `tokenize` / `detokenize`: lower-case and split punctuation off words,
  and the way back; `tf_tokenize` / `tf_detokenize` do the same with
  TensorFlow string ops, inside a graph.
- `vectorize`: tokenized texts to padded ids over a fixed vocabulary, in
  plain Python; `make_vectorizer` builds the equivalent
  `keras.layers.TextVectorization`.
- `check_words`: the package's one rule for empty text: a text to
  predict on or translate, and a training set, must hold at least one
  word (a letter or a digit); `""`, spaces or punctuation alone get a
  `ValueError` naming the input, in the Python API and the examples'
  command lines alike.
- `as_text_list`: one string, a list of strings or a NumPy string array
  as a list of sentences; `TextModel`, a functional `keras.Model` with a
  string input whose `predict` takes all of those.
- `STRIP_PUNCTUATION_REGEX`: what
  `TextVectorization(standardize="lower_and_strip_punctuation")` strips.
"""

import re

import keras
import numpy as np

from keras_attention import _validation

#: The characters that `keras.layers.TextVectorization` strips for
#: `standardize="lower_and_strip_punctuation"` (or `"strip_punctuation"`),
#: as a regular expression valid in Python and in RE2 (TensorFlow). Our
#: own copy of Keras's pattern: tests check that it still agrees with the
#: layer.
STRIP_PUNCTUATION_REGEX = r'[!"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~\']'

#: Ids below this are `""` (padding, id 0) and `"[UNK]"` (id 1) in a
#: `TextVectorization` vocabulary.
SPECIAL_IDS = 2
OOV_ID = 1

_PUNCTUATION = re.compile(r"([^\w\s'])")
#: A word character: a text needs one to hold a word (`check_words`).
_WORD = re.compile(r"[^\W_]")
_SPACE_BEFORE = r" ([.,!?;:%)\]}])"
_SPACE_AFTER = r"([(\[{]) "
# `_PUNCTUATION` in RE2 syntax: RE2's `\w` and `\s` are ASCII only, so
# Python's Unicode word characters are spelled out.
_PUNCTUATION_RE2 = r"([^\pL\pN_\pZ\s'])"


def tokenize(text: str) -> str:
    """Lower-cases and splits punctuation off words: `"A dog."` → `"a dog ."`.

    The translator's vocabularies split on whitespace only, so this is the
    whole tokenizer; it keeps `'` inside words.

    Example:

    >>> from keras_attention.text import tokenize
    >>> tokenize("Zwei Männer, die lachen.")
    'zwei männer , die lachen .'
    """
    _validation.string("text", text)
    return " ".join(_PUNCTUATION.sub(r" \1 ", text.lower()).split())


def detokenize(tokens) -> str:
    """Joins tokens and re-attaches punctuation: `"a dog ."` → `"a dog."`.

    Args:
        tokens: A list of tokens or a space-separated string.

    Example:

    >>> from keras_attention.text import detokenize
    >>> detokenize(["two", "men", ",", "laughing", "."])
    'two men, laughing.'
    """
    if not isinstance(tokens, str):
        tokens = " ".join(_validation.strings("tokens", tokens))
    text = tokens
    text = re.sub(_SPACE_BEFORE, r"\1", text)
    return re.sub(_SPACE_AFTER, r"\1", text)


def tf_tokenize(texts):
    """`tokenize` in TensorFlow ops, for a string tensor (graph-safe).

    Unlike `tokenize`, runs of spaces are not collapsed; a vectorizer that
    splits on whitespace does not see the difference.

    Example:

    >>> tokens = keras_attention.text.tf_tokenize(["A dog, running."])
    >>> tokens.numpy()[0].decode().split()  # what a vectorizer sees
    ['a', 'dog', ',', 'running', '.']
    """
    import tensorflow as tf

    texts = tf.strings.lower(texts, encoding="utf-8")
    return tf.strings.regex_replace(texts, _PUNCTUATION_RE2, r" \1 ")


def tf_detokenize(sentences):
    """`detokenize` in TensorFlow ops, for a string tensor (graph-safe).

    Example:

    >>> texts = keras_attention.text.tf_detokenize(["a dog , running ."])
    >>> [t.decode() for t in texts.numpy()]
    ['a dog, running.']
    """
    import tensorflow as tf

    sentences = tf.strings.regex_replace(sentences, _SPACE_BEFORE, r"\1")
    return tf.strings.regex_replace(sentences, _SPACE_AFTER, r"\1")


def vectorize(vocabulary, texts) -> np.ndarray:
    """Tokenized texts → ids `(batch_size, longest)`, padded with 0.

    What `make_vectorizer(vocabulary)` returns, in plain Python, so that
    backends without TensorFlow can run it. Words outside the vocabulary
    get `OOV_ID`.

    Args:
        vocabulary: Tokens by id; id 0 is padding, id 1 `[UNK]`.
        texts: Space-separated tokens, e.g. from `tokenize`.

    Returns:
        An `int32` array.

    Example:

    >>> from keras_attention.text import vectorize
    >>> vectorize(["", "[UNK]", "a", "dog"], ["a dog", "a cat", ""]).tolist()
    [[2, 3], [2, 1], [0, 0]]
    """
    _validation.strings("vocabulary", vocabulary)
    _validation.strings("texts", texts)
    index = {}
    for i, word in enumerate(vocabulary[SPECIAL_IDS:], SPECIAL_IDS):
        index.setdefault(word, i)
    rows = [[index.get(w, OOV_ID) for w in text.split()] for text in texts]
    ids = np.zeros((len(rows), max(map(len, rows), default=0)), "int32")
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    return ids


def make_vectorizer(vocabulary):
    """The `TextVectorization` layer equivalent to `vectorize(vocabulary)`.

    Whitespace split, no standardization (give it tokenized text), the
    vocabulary fixed. Needs TensorFlow to run; `keras_attention.saving`
    puts it in exported SavedModels, where the words must be mapped inside
    the graph.

    Args:
        vocabulary: Tokens by id, starting with `""` and `"[UNK]"`.

    Returns:
        A `keras.layers.TextVectorization`.

    Example:

    >>> vocabulary = ["", "[UNK]", "a", "dog"]
    >>> vectorizer = keras_attention.text.make_vectorizer(vocabulary)
    >>> np.asarray(vectorizer(["a dog barks"])).tolist()
    [[2, 3, 1]]
    """
    _validation.strings("vocabulary", vocabulary)
    import keras

    return keras.layers.TextVectorization(
        standardize=None, split="whitespace", vocabulary=list(vocabulary)
    )


def as_text_list(texts, name: str = "texts") -> list:
    """Sentences as a list of `str`: one string is one sentence.

    Args:
        texts: A string, a list or tuple of strings (or UTF-8 `bytes`), or a
            NumPy array of them (any shape; read in row-major order).
        name: The caller's name for the argument, used in errors. Defaults
            to `"texts"`.

    Returns:
        A list of `str`.

    Raises:
        ValueError: naming the argument and what it received, for anything
            else.

    Example:

    >>> from keras_attention.text import as_text_list
    >>> as_text_list("one sentence"), as_text_list(np.array(["a", "b"]))
    (['one sentence'], ['a', 'b'])
    """
    if isinstance(texts, (str, bytes)):
        texts = [texts]
    elif isinstance(texts, np.ndarray):
        texts = texts.reshape(-1).tolist()
    if not isinstance(texts, (list, tuple)):
        raise ValueError(
            f"`{name}` must be a string or a list of strings. Received: "
            f"{name}={texts!r}"
        )
    texts = [t.decode("utf-8") if isinstance(t, bytes) else t for t in texts]
    bad = [t for t in texts if not isinstance(t, str)]
    if bad:
        raise ValueError(
            f"`{name}` must be a string or a list of strings. Received: "
            f"{name} with an element of type {type(bad[0]).__name__}: "
            f"{bad[0]!r}"
        )
    return texts


def has_words(text: str) -> bool:
    """Whether `text` holds a word: a letter or a digit, in any script.

    Example:

    >>> from keras_attention.text import has_words
    >>> has_words("Grüße!"), has_words("... !"), has_words("42")
    (True, False, True)
    """
    return _WORD.search(_validation.string("text", text)) is not None


def check_words(texts, name: str = "texts") -> None:
    """A `ValueError` for a text without a word (`""`, spaces, `"!?"`).

    The package's one rule for empty text: a model attends over the words
    of a text, so a text without any has nothing to attend to and would
    get an invented answer (a translation of nothing, a class from the
    bias alone). Every `predict` and `translate` of the package refuses
    it: `Translator.translate` and the examples' `--translate`,
    `TextModel.predict` (every saved sentiment model, the older plain
    functional ones too when loaded with `keras_attention.load_model`)
    and `models.sentiment.predict_sentiment`. No texts at all (`[]`):
    `translate` returns `[]`, `TextModel.predict` raises.

    Args:
        texts: A string or a list of strings.
        name: The caller's name for the argument. Defaults to `"texts"`.

    Example:

    >>> from keras_attention.text import check_words
    >>> check_words(["a dog", "  ?"])
    Traceback (most recent call last):
    ...
    ValueError: `texts` must hold at least one word (a letter or a digit) \
in every text: a text without one has nothing to attend to. \
Received: texts[1]='  ?'
    """
    single = isinstance(texts, str)
    if not single:
        _validation.strings(name, texts)
    for index, text in enumerate([texts] if single else texts):
        if not has_words(text):
            where = name if single else f"{name}[{index}]"
            raise ValueError(
                f"`{name}` must hold at least one word (a letter or a "
                "digit) in every text: a text without one has nothing to "
                f"attend to. Received: {where}={text!r}"
            )


@keras.saving.register_keras_serializable(package="keras_attention")
class TextModel(keras.Model):
    """A functional model on raw text whose `predict` takes plain strings.

    Keras's `predict` refuses a Python list of strings ("Unrecognized data
    type") and a NumPy unicode array ("Invalid dtype"); this model turns one
    string, a list of strings or a NumPy string array into the object
    array its string input takes. Build it like `keras.Model(inputs,
    outputs)`. It saves and loads like any model after `import
    keras_attention`.

    Example:

    >>> vectorizer = keras.layers.TextVectorization(output_sequence_length=4)
    >>> vectorizer.adapt(["a good film", "a bad film"])
    >>> sentences = keras.Input(shape=(1,), dtype="string")
    >>> ids = vectorizer(sentences)
    >>> model = keras_attention.text.TextModel(sentences, ids)
    >>> model.predict(["a good film", "bad"], verbose=0).shape
    (2, 4)
    >>> model.predict("a good film", verbose=0).shape
    (1, 4)

    A classifier can name its classes: `label_names` (a list of strings,
    one per class, or `None`) is kept in the model's config, so it
    survives saving and loading; `model.label_names` reads it back.
    """

    def __init__(self, *args, label_names=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.label_names = _names(label_names)

    def get_config(self):
        config = super().get_config()
        if self.label_names is not None:
            config["label_names"] = list(self.label_names)
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        label_names = config.pop("label_names", None)
        model = super().from_config(config, custom_objects=custom_objects)
        model.label_names = _names(label_names)
        return model

    def predict(self, x, *args, **kwargs):
        """Keras's `predict`, on text too; every output a NumPy array.

        Outputs whose length follows the texts' (attention weights over
        tokens) differ in length between batches, which Keras's `predict`
        returns as a `tf.RaggedTensor`; here they are padded with zeros to
        the longest batch, as in a batch of their own.
        """
        outputs = super().predict(_text_batch(x), *args, **kwargs)
        return keras.tree.map_structure(_padded, outputs)

    def predict_on_batch(self, x):
        return super().predict_on_batch(_text_batch(x))

    def predict_step(self, data):
        """Predicts a batch, with one extra one-word text appended.

        `predict` refuses a text without a word (`check_words`), but a
        dataset of strings reaches this step as it is: a batch whose texts
        have no token at all (`""`, or only punctuation) vectorizes to ids
        of length 0, and an RNN after the vectorizer fails on zero time
        steps. The extra text makes every batch at least one token long;
        its row is dropped, and the other rows are what they would be in
        any padded batch (masked padding changes nothing).
        """
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        if keras.backend.standardize_dtype(x.dtype) != "string":
            return super().predict_step(data)
        import tensorflow as tf

        extra = tf.fill(tf.concat([[1], tf.shape(x)[1:]], 0), _ONE_WORD)
        outputs = self(tf.concat([x, extra], 0), training=False)
        size = tf.shape(x)[0]
        return keras.tree.map_structure(lambda y: y[:size], outputs)


def _padded(output):
    """A `tf.RaggedTensor` as a zero-padded NumPy array; else `output`."""
    if hasattr(output, "to_tensor") and hasattr(output, "row_splits"):
        return output.to_tensor().numpy()
    return output


def _names(label_names):
    if label_names is None:
        return None
    if isinstance(label_names, (str, bytes)) or not all(
        isinstance(name, str) for name in label_names
    ):
        raise ValueError(
            "`label_names` must be a list of strings, one per class. "
            f"Received: label_names={label_names!r}"
        )
    return tuple(label_names)


#: The text `TextModel.predict_step` appends to each batch.
_ONE_WORD = "a"


def _text_batch(x):
    """Text in any form `as_text_list` takes → a `(n,)` object array."""
    if x is None:
        raise ValueError(
            "`x` must be a string, a list of strings or a NumPy string "
            "array. Received: x=None"
        )
    is_text = isinstance(x, (str, bytes, list, tuple)) or (
        isinstance(x, np.ndarray) and x.dtype.kind in "USO"
    )
    if not is_text:
        return x
    texts = as_text_list(x, name="x")
    if not texts:
        raise ValueError(
            f"`x` holds no text: nothing to predict. Received: x={x!r}"
        )
    # The package's one rule for empty text (as `Translator.translate`):
    # a text without a word has nothing to attend to, so it is refused
    # rather than answered from padding alone.
    check_words(x if isinstance(x, str) else texts, "x")
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            "A model with a string input predicts on the TensorFlow "
            "backend only (string tensors exist there only); this is "
            f"{keras.backend.backend()!r}. Vectorize the texts first (for "
            "the sentiment classifier: keras_attention.models.sentiment."
            "predict_sentiment). Received: x of "
            f"{len(texts)} text(s)"
        )
    return np.asarray(texts, dtype=object)
