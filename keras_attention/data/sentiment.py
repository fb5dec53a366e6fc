"""Sentiment data: a synthetic task with known cues, a TSV reader, vectorizer.

The synthetic task (`make_synthetic_sentiment`) is the embedded default of
the sentiment example: it needs no download, and because the generator knows
which words decide each label it can measure where a model attends.

Generating rule. A sentence is a sequence of space-separated lowercase
tokens built from three word lists:

- filler words (`FILLER_WORDS`): a few hundred invented, neutral
  pseudo-words, drawn uniformly with replacement, independently of the
  label;
- sentiment words: `POSITIVE_WORDS` (polarity 1) and `NEGATIVE_WORDS`
  (polarity 0);
- negators (`NEGATORS`): `"not"` and `"never"`.

Every sentence holds an odd number `k` of cue phrases (`k` uniform over
`1, 3, ..., max_cues`). A cue phrase is a sentiment word, optionally
preceded by a negator (with probability `negation_rate`). The effective
polarity of a sentiment word is its own polarity, flipped when the token
right before it is a negator: "good" and "not bad" are positive, "bad" and
"not good" negative. **The label is the majority of the effective
polarities of the `k` phrases** (never a tie, since `k` is odd). Cue phrases
sit at random positions among the fillers and never overlap, and a negator
appears only as the first token of a cue phrase, so the rule can be read
back from the tokens alone. The cue mask marks every token of every cue
phrase (negators included), since all of them enter the vote.

Labels are balanced (their counts differ by at most one) and everything is
drawn from `numpy.random.default_rng(seed)`, so a seed fixes the data.

Why it is not a bag-of-words task: each sentiment word and each negator
occurs just as often in positive as in negative sentences (with the default
`negation_rate=0.5`), and the fillers carry no signal at all, so word counts
say nothing on average about the label. The label is an XOR of "which
sentiment word" and "is it negated", which no linear model on counts
represents: logistic regression on token counts stays at chance on held-out
sentences (about 0.50; the test suite measures it). A BiLSTM sees each
negator-word pair, and attention pooling can average the phrases'
polarities, which is exactly a majority vote (a small BiLSTM with additive
attention pooling reaches about 0.99 on 6,000 sentences in a few epochs).
"""

import dataclasses
import os

import numpy as np

from keras_attention.data import files
from keras_attention.text import STRIP_PUNCTUATION_REGEX
from keras_attention.text import has_words

POSITIVE_WORDS = (
    "good",
    "great",
    "excellent",
    "wonderful",
    "superb",
    "delightful",
    "charming",
    "brilliant",
)
NEGATIVE_WORDS = (
    "bad",
    "awful",
    "terrible",
    "dull",
    "boring",
    "poor",
    "dreadful",
    "weak",
)
NEGATORS = ("not", "never")

_NUM_FILLER_WORDS = 300
# Fixed so that the filler vocabulary is the same for every `seed`.
_FILLER_SEED = 20170309
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("", "", "", "n", "r", "s")


def _make_filler_words() -> tuple[str, ...]:
    rng = np.random.default_rng(_FILLER_SEED)
    reserved = set(POSITIVE_WORDS) | set(NEGATIVE_WORDS) | set(NEGATORS)
    words = []
    seen = set()
    while len(words) < _NUM_FILLER_WORDS:
        syllables = rng.integers(2, 4)
        word = "".join(
            _ONSETS[rng.integers(len(_ONSETS))]
            + _VOWELS[rng.integers(len(_VOWELS))]
            for _ in range(syllables)
        )
        word += _CODAS[rng.integers(len(_CODAS))]
        if word not in seen and word not in reserved:
            seen.add(word)
            words.append(word)
    return tuple(words)


FILLER_WORDS = _make_filler_words()


@dataclasses.dataclass(frozen=True)
class SentimentData:
    """Sentences with binary labels and the tokens that decide them.

    Attributes:
        sentences: Space-separated lowercase tokens, one string a sentence.
        labels: `int32` array `(num_examples,)`, 0 = negative, 1 = positive.
        cue_masks: One boolean array per sentence with one entry per
            whitespace token, `True` on the tokens that decide the label.

    Example:

    >>> data = keras_attention.data.make_synthetic_sentiment(4, seed=0)
    >>> isinstance(data, keras_attention.data.SentimentData)
    True
    >>> len(data.sentences), data.labels.shape, len(data.cue_masks)
    (4, (4,), 4)
    """

    sentences: list[str]
    labels: np.ndarray
    cue_masks: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.sentences)


def _check_int(name: str, value, minimum: int) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or value < minimum
    ):
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected an "
            f"integer >= {minimum}. Received: {name}={value!r}"
        )
    return int(value)


def make_synthetic_sentiment(
    num_examples: int,
    seed: int = 0,
    min_length: int = 8,
    max_length: int = 20,
    max_cues: int = 3,
    negation_rate: float = 0.5,
) -> SentimentData:
    """Generates the synthetic sentiment task described in the module doc.

    Args:
        num_examples: Number of sentences.
        seed: Seed of the generator; the same seed gives the same data.
            Defaults to `0`.
        min_length: Fewest tokens in a sentence. Must leave room for
            `max_cues` negated phrases, i.e. be at least `2 * max_cues`.
            Defaults to `8`.
        max_length: Most tokens in a sentence. Defaults to `20`.
        max_cues: Largest (odd) number of cue phrases in a sentence; each
            sentence has `1, 3, ..., max_cues` phrases, uniformly. Defaults
            to `3`.
        negation_rate: Probability that a cue phrase is negated. Defaults to
            `0.5`, which makes every word as frequent in positive as in
            negative sentences.

    Returns:
        A `SentimentData` with balanced labels.

    Example:

    >>> data = keras_attention.data.make_synthetic_sentiment(4, seed=1)
    >>> len(data), data.labels.tolist().count(1)
    (4, 2)
    """
    num_examples = _check_int("num_examples", num_examples, 1)
    max_cues = _check_int("max_cues", max_cues, 1)
    if max_cues % 2 == 0:
        raise ValueError(
            "Received an invalid value for argument `max_cues`, expected an "
            f"odd integer (the majority must be clear). Received: "
            f"max_cues={max_cues}"
        )
    min_length = _check_int("min_length", min_length, 2 * max_cues)
    max_length = _check_int("max_length", max_length, min_length)
    if not 0.0 <= negation_rate <= 1.0:
        raise ValueError(
            "Received an invalid value for argument `negation_rate`, "
            "expected a probability in [0, 1]. Received: "
            f"negation_rate={negation_rate!r}"
        )

    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(num_examples) % 2).astype("int32")
    cue_counts = np.arange(1, max_cues + 1, 2)
    words_by_polarity = (NEGATIVE_WORDS, POSITIVE_WORDS)
    sentences = []
    cue_masks = []
    for label in labels:
        k = int(rng.choice(cue_counts))
        polarities = rng.integers(0, 2, size=k)
        # Flipping every polarity maps the sentences of one majority onto
        # those of the other one to one, so this draws uniformly among the
        # polarity patterns whose majority is `label`.
        if int(2 * polarities.sum() > k) != label:
            polarities = 1 - polarities
        units = []
        for polarity in polarities:
            negated = rng.random() < negation_rate
            words = words_by_polarity[polarity ^ int(negated)]
            phrase = [words[rng.integers(len(words))]]
            if negated:
                phrase.insert(0, NEGATORS[rng.integers(len(NEGATORS))])
            units.append((phrase, True))
        length = int(rng.integers(min_length, max_length + 1))
        num_fillers = length - sum(len(phrase) for phrase, _ in units)
        fillers = rng.integers(len(FILLER_WORDS), size=num_fillers)
        units += [([FILLER_WORDS[i]], False) for i in fillers]
        tokens = []
        mask = []
        for i in rng.permutation(len(units)):
            phrase, is_cue = units[i]
            tokens += phrase
            mask += [is_cue] * len(phrase)
        sentences.append(" ".join(tokens))
        cue_masks.append(np.array(mask, dtype=bool))
    return SentimentData(sentences, labels, cue_masks)


_HEADER = ("sentence", "label")


def read_sentiment_tsv(
    path: str | os.PathLike,
) -> tuple[list[str], np.ndarray]:
    """Reads a `sentence<TAB>label` file, such as SST-2 as GLUE ships it.

    The first line must be the header `sentence<TAB>label`; every other
    line is one sentence, a tab and an integer label. Labels may be any
    non-negative integer, so that multi-class files (e.g. SST-5, labels
    0-4) read too; binary sentiment uses 0 = negative, 1 = positive.
    Sentences are stripped of surrounding whitespace and otherwise kept as
    they are. Blank lines at the end of the file are ignored; a blank line
    before a row is a malformed row.

    Args:
        path: Path of the UTF-8 file (a leading byte-order mark is allowed).

    Returns:
        `(sentences, labels)`: a list of strings and an `int32` array.

    Raises:
        ValueError: If the file is empty, has no rows, lacks the header, or
            a row has other than two tab-separated columns or a label that
            is not a non-negative integer, or if it is not UTF-8 text; the
            message names the file and the 1-based line number.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "train.tsv")
    >>> rows = ["sentence\\tlabel", "a superb film\\t1", "a dull film\\t0"]
    >>> with open(path, "w", encoding="utf-8") as f:
    ...     _ = f.write("\\n".join(rows) + "\\n")
    >>> sentences, labels = keras_attention.data.read_sentiment_tsv(path)
    >>> sentences, labels.tolist()
    (['a superb film', 'a dull film'], [1, 0])
    """
    lines = files.read_lines(path, encoding="utf-8-sig")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise ValueError(
            f"{path} is empty: expected the header 'sentence<TAB>label' and "
            "at least one row."
        )
    header = tuple(column.strip() for column in lines[0].split("\t"))
    if header != _HEADER:
        raise ValueError(
            f"{path}, line 1: expected the header 'sentence<TAB>label'. "
            f"Received: {lines[0]!r}"
        )
    if len(lines) == 1:
        raise ValueError(f"{path} has a header but no rows.")
    sentences = []
    labels = []
    for number, line in enumerate(lines[1:], start=2):
        columns = line.split("\t")
        if len(columns) != 2:
            raise ValueError(
                f"{path}, line {number}: expected 2 tab-separated columns "
                f"(sentence, label), found {len(columns)}. Received: "
                f"{line!r}"
            )
        sentence, label = columns
        label = label.strip()
        if not label.isascii() or not label.lstrip("+-").isdigit():
            raise ValueError(
                f"{path}, line {number}: the label must be an integer. "
                f"Received: {label!r}"
            )
        value = int(label)
        if value < 0:
            raise ValueError(
                f"{path}, line {number}: the label must be a non-negative "
                f"integer. Received: {value}"
            )
        sentences.append(sentence.strip())
        labels.append(value)
    return sentences, np.array(labels, dtype="int32")


def make_text_vectorizer(
    sentences: list[str],
    max_tokens: int | None = 20000,
    output_sequence_length: int | None = None,
):
    """Builds a word-level `TextVectorization` adapted on `sentences`.

    Pass the training sentences only, so that no word of the validation or
    test data leaks into the vocabulary. The layer lower-cases, strips
    punctuation and splits on whitespace; its integer output uses `0` for
    padding and `1` for out-of-vocabulary words (the Keras defaults), so a
    following `keras.layers.Embedding(mask_zero=True)` masks the padding.

    Args:
        sentences: Training sentences (a list of strings).
        max_tokens: Vocabulary size including padding and OOV, or `None`
            for no limit. Defaults to `20000`.
        output_sequence_length: Pad or truncate every output to this many
            positions; `None` pads each batch to its longest sentence.
            Defaults to `None`.

    Returns:
        An adapted `keras.layers.TextVectorization` (`output_mode="int"`).

    Example:

    >>> vectorizer = keras_attention.data.make_text_vectorizer(
    ...     ["A superb film.", "a dull film"]
    ... )
    >>> vectorizer.get_vocabulary()[:2], len(vectorizer.get_vocabulary())
    (['', '[UNK]'], 6)
    """
    import keras

    if (
        not isinstance(sentences, (list, tuple, np.ndarray))
        or not len(sentences)
        or not all(isinstance(s, str) for s in sentences)
    ):
        raise ValueError(
            "Received an invalid value for argument `sentences`, expected a "
            f"non-empty list of strings. Received: sentences={sentences!r}"
        )
    if not any(has_words(str(s)) for s in sentences):
        raise ValueError(
            "Received an invalid value for argument `sentences`: not one "
            "of them holds a word (a letter or a digit), so the vocabulary "
            f"would be empty. Received: sentences={list(sentences)[:5]!r}"
        )
    vectorizer = keras.layers.TextVectorization(
        max_tokens=max_tokens,
        standardize="lower_and_strip_punctuation",
        split="whitespace",
        output_mode="int",
        output_sequence_length=output_sequence_length,
    )
    vectorizer.adapt(np.asarray(list(sentences), dtype=object))
    return vectorizer


def tokens_for(vectorizer, sentence: str) -> list[str]:
    """The tokens that `vectorizer` sees in `sentence`, in position order.

    `tokens[i]` is the word behind position `i` of `vectorizer(sentence)`:
    the same standardization and split as the layer, truncated to its
    `output_sequence_length`. Padding positions are not included, so
    `len(tokens)` is the number of unmasked positions. Words outside the
    vocabulary keep their spelling (the model sees the OOV index `1`), which
    is what a plot should show.

    Args:
        vectorizer: A `keras.layers.TextVectorization` with
            `split="whitespace"` and a built-in `standardize` (as made by
            `make_text_vectorizer`).
        sentence: One sentence.

    Returns:
        A list of token strings.

    Example:

    >>> from keras_attention.data import make_text_vectorizer, tokens_for
    >>> vectorizer = make_text_vectorizer(["a superb film"])
    >>> tokens_for(vectorizer, "A superb, SUPERB plot!")
    ['a', 'superb', 'superb', 'plot']
    """
    import tensorflow as tf

    config = vectorizer.get_config()
    standardize = config["standardize"]
    if (
        config["split"] != "whitespace"
        or config.get("ngrams")
        or not (
            standardize is None
            or standardize
            in ("lower", "strip_punctuation", "lower_and_strip_punctuation")
        )
    ):
        raise ValueError(
            "`tokens_for` needs a vectorizer with split='whitespace', no "
            "ngrams and a built-in standardize. Received: "
            f"split={config['split']!r}, ngrams={config.get('ngrams')!r}, "
            f"standardize={standardize!r}"
        )
    text = tf.constant(sentence, dtype=tf.string)
    # Same ops, in the same order, as TextVectorization's preprocessing
    # (`tf.strings.lower` only lower-cases ASCII, unlike `str.lower`).
    if standardize in ("lower", "lower_and_strip_punctuation"):
        text = tf.strings.lower(text)
    if standardize in ("strip_punctuation", "lower_and_strip_punctuation"):
        text = tf.strings.regex_replace(text, STRIP_PUNCTUATION_REGEX, "")
    tokens = [t.decode("utf-8") for t in tf.strings.split(text).numpy()]
    length = config["output_sequence_length"]
    return tokens if length is None else tokens[:length]
