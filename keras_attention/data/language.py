"""The decoder-only language model's text: lines, a word vocabulary and
one stream of ids.

The synthetic default needs no download and has a known answer: each line
is `SOURCE = TARGET`, a sentence of the synthetic translation task
(`make_synthetic_translation`), `=` and its translation. What follows the
`=` is fixed by the words before it (the task's one-to-one lexicon and its
adjective swap), so a model's continuation of the prompt `SOURCE =` can be
checked word for word. `"multi30k"` is the English side of Multi30k
(`DATA_DIR/train.en`, `val.en`), read where it lies.

Words are `keras_attention.text.tokenize`'s; each line ends with
`[end]`, and the lines are one stream cut into windows (`windows`).
"""

import os

import numpy as np

from keras_attention import _validation
from keras_attention import text as text_lib
from keras_attention.data import files
from keras_attention.data import translation

#: The word between a synthetic line's sentence and its translation.
SEPARATOR = "="
#: The word that ends each line.
END = "[end]"
#: Ids of padding, unknown words and the end of a line.
PAD_ID, UNK_ID, END_ID = 0, 1, 2


def synthetic_lines(num_examples: int = 4000, seed: int = 0) -> list[str]:
    """`SOURCE = TARGET` lines of the synthetic translation task.

    Example:

    >>> from keras_attention.data import language
    >>> language.synthetic_lines(1, seed=0)
    ['de feza kozu zabe = rax nogax ladax lovox']
    """
    corpus = translation.make_synthetic_translation(num_examples, seed)
    return [
        f"{source} {SEPARATOR} {target}"
        for source, target in zip(corpus.sources, corpus.targets, strict=True)
    ]


def load_lines(
    data: str = "synthetic",
    data_dir: str | None = None,
    num_examples: int = 4000,
    seed: int = 0,
) -> tuple[list[str], list[str]]:
    """`(train, validation)` lines.

    Args:
        data: `"synthetic"` (`num_examples` lines of `synthetic_lines`
            with `seed`, and 500 with `seed + 1` to validate) or
            `"multi30k"` (`data_dir/train.en` and `data_dir/val.en`).
        data_dir: The Multi30k folder, with `data="multi30k"`.
        num_examples: Synthetic training lines. Defaults to `4000`.
        seed: Seed of the synthetic lines. Defaults to `0`.
    """
    if data == "synthetic":
        return (
            synthetic_lines(num_examples, seed),
            synthetic_lines(500, seed + 1),
        )
    if data == "multi30k":
        if data_dir is None:
            raise _validation.invalid(
                "data_dir", data_dir, "the folder of train.en and val.en"
            )
        return tuple(
            files.read_lines(os.path.join(data_dir, f"{split}.en"))
            for split in ("train", "val")
        )
    raise _validation.invalid("data", data, "'synthetic' or 'multi30k'")


def words(line: str) -> list[str]:
    """The words of a line (`keras_attention.text.tokenize`)."""
    return text_lib.tokenize(line).split()


def build_vocabulary(lines, max_tokens: int | None = None) -> list[str]:
    """`["", "[UNK]", "[end]", words by frequency...]` (ties in alphabetical
    order), at most `max_tokens` entries (`None`: every word)."""
    counts = {}
    for line in lines:
        for word in words(line):
            counts[word] = counts.get(word, 0) + 1
    ordered = sorted(counts, key=lambda w: (-counts[w], w))
    vocabulary = ["", "[UNK]", END] + ordered
    if max_tokens is not None:
        _validation.positive_int("max_tokens", max_tokens)
        vocabulary = vocabulary[: max(3, max_tokens)]
    return vocabulary


def to_ids(line: str, vocabulary) -> list[int]:
    """A line's word ids (unknown words `[UNK]`), without `[end]`."""
    index = {word: i for i, word in enumerate(vocabulary)}
    return [index.get(word, UNK_ID) for word in words(line)]


def encode(lines, vocabulary) -> np.ndarray:
    """One `int32` stream of the lines' word ids, each line ended by
    `[end]`."""
    index = {word: i for i, word in enumerate(vocabulary)}
    ids = []
    for line in lines:
        ids += [index.get(word, UNK_ID) for word in words(line)] + [END_ID]
    return np.asarray(ids, dtype="int32")


def decode(ids, vocabulary) -> str:
    """The text of word ids up to the first `[end]` (detokenized)."""
    ids = [int(i) for i in np.asarray(ids).reshape(-1)]
    if END_ID in ids:
        ids = ids[: ids.index(END_ID)]
    return text_lib.detokenize([vocabulary[i] for i in ids if i != PAD_ID])


def windows(stream, length: int) -> tuple[np.ndarray, np.ndarray]:
    """`(inputs, targets)`: the stream cut into `(count, length)` windows
    and the ids one position on."""
    length = _validation.positive_int("length", length)
    count = (len(stream) - 1) // length
    if count < 1:
        raise ValueError(
            f"A stream of {len(stream)} ids holds no window of {length} ids "
            "and the next one: give more text or a shorter length. "
            f"Received: length={length}"
        )
    cut = np.asarray(stream[: count * length + 1], dtype="int32")
    return cut[:-1].reshape(count, length), cut[1:].reshape(count, length)
