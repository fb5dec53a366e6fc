"""Translation data: a synthetic task with gold alignments, readers, TFDS.

The synthetic task (`make_synthetic_translation`) is the embedded default of
the translation example: it needs no download, and because the generator
knows which source word every target word translates, it can measure where
a decoder attends.

Generating rule. Both languages are invented. Every source word has exactly
one target word (`SYNTHETIC_LEXICON`, a bijection between two disjoint
word lists, no multi-word translations), so the alignment is one-to-one and
a target sentence is as long as its source. A source sentence is

    NP VERB [NP] [ADVERB] [PREPOSITION NP]

with a noun phrase `NP = DETERMINER ADJECTIVE{0,2} NOUN` (optional parts
present with probability 1/2, each adjective slot too). The target
translates word by word with one reordering rule: adjectives follow their
noun (`DET ADJ1 ADJ2 NOUN` → `DET' NOUN' ADJ1' ADJ2'`), as from English to
French. Sentences have 3 to 15 words. Everything is drawn from
`numpy.random.default_rng(seed)`, so a seed fixes the data; the lexicon
itself is fixed.

`read_parallel` reads a pair of aligned text files (Multi30k's layout,
`PREFIX.de` / `PREFIX.en`), `load_tfds_translation` a TFDS translation set,
and `tokenize` / `detokenize` (from `keras_attention.text`, re-exported
here) are the word splitting the example uses.
"""

import dataclasses
import os

import numpy as np

from keras_attention.data import download
from keras_attention.data import files
from keras_attention.text import detokenize as detokenize
from keras_attention.text import tokenize as tokenize

# What to pass instead of a TFDS set that cannot be downloaded.
_OFFLINE = (
    "Offline, pass local parallel files: --train/--validation/--test "
    "PREFIX, or --preset multi30k (keras_attention.data.read_parallel)."
)
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"

#: Word classes of the synthetic grammar and how many words each has.
WORD_CLASSES = {
    "determiner": 3,
    "adjective": 12,
    "noun": 20,
    "verb": 12,
    "adverb": 6,
    "preposition": 5,
}


def _invent_words(rng, count, syllables, taken, ending=""):
    words = []
    while len(words) < count:
        word = "".join(
            rng.choice(list(_CONSONANTS)) + rng.choice(list(_VOWELS))
            for _ in range(syllables)
        )
        word += ending
        if word not in taken:
            taken.add(word)
            words.append(word)
    return words


def _make_lexicon():
    # A fixed seed: the lexicon is part of the task, not of the sample.
    rng = np.random.default_rng(20150901)
    taken = set()
    source, target = {}, {}
    for word_class, count in WORD_CLASSES.items():
        syllables = 1 if word_class in ("determiner", "preposition") else 2
        source[word_class] = _invent_words(rng, count, syllables, taken, "")
        target[word_class] = _invent_words(rng, count, syllables, taken, "x")
    return source, target


SOURCE_WORDS, TARGET_WORDS = _make_lexicon()

#: Source word → target word, a bijection.
SYNTHETIC_LEXICON = {
    s: t
    for word_class in WORD_CLASSES
    for s, t in zip(
        SOURCE_WORDS[word_class], TARGET_WORDS[word_class], strict=True
    )
}


@dataclasses.dataclass(frozen=True)
class ParallelCorpus:
    """Sentence pairs, line `i` of `targets` translating line `i` of `sources`.

    Attributes:
        sources: Source sentences (space-separated tokens for the
            synthetic task, raw text from files).
        targets: Target sentences.
        alignments: For the synthetic task, one list per pair giving, for
            each target word, the position of the source word it
            translates; `None` for real data.

    Example:

    >>> corpus = keras_attention.data.make_synthetic_translation(3, seed=0)
    >>> isinstance(corpus, keras_attention.data.ParallelCorpus)
    True
    >>> len(corpus.sources), len(corpus.targets), len(corpus.alignments)
    (3, 3, 3)
    """

    sources: list
    targets: list
    alignments: list | None = None

    def __len__(self):
        return len(self.sources)


def _noun_phrase(rng, max_adjectives):
    adjectives = [
        str(rng.choice(SOURCE_WORDS["adjective"]))
        for _ in range(max_adjectives)
        if rng.random() < 0.5
    ]
    return (
        [str(rng.choice(SOURCE_WORDS["determiner"]))]
        + adjectives
        + [str(rng.choice(SOURCE_WORDS["noun"]))]
    )


def _translate_phrase(phrase, offset):
    """Target words and their source positions for one source phrase."""
    if len(phrase) > 2 and phrase[0] in SOURCE_WORDS["determiner"]:
        # DET ADJ... NOUN -> DET NOUN ADJ...
        order = [0, len(phrase) - 1, *range(1, len(phrase) - 1)]
    else:
        order = list(range(len(phrase)))
    words = [SYNTHETIC_LEXICON[phrase[i]] for i in order]
    return words, [offset + i for i in order]


def make_synthetic_translation(
    num_examples: int = 4000, seed: int = 0, max_adjectives: int = 2
) -> ParallelCorpus:
    """Generates the synthetic translation task (see the module docstring).

    Args:
        num_examples: Number of sentence pairs. Defaults to `4000`.
        seed: Seed of `numpy.random.default_rng`. Defaults to `0`.
        max_adjectives: Most adjectives in a noun phrase. Defaults to `2`.

    Returns:
        A `ParallelCorpus` with gold `alignments`.

    Example:

    >>> from keras_attention.data.translation import make_synthetic_translation
    >>> data = make_synthetic_translation(num_examples=3, seed=1)
    >>> len(data), len(data.alignments[0]) == len(data.targets[0].split())
    (3, True)
    """
    for name, value, low in (
        ("num_examples", num_examples, 1),
        ("max_adjectives", max_adjectives, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(
                f"Received an invalid value for argument `{name}`, expected "
                f"an integer >= {low}. Received: {name}={value!r}"
            )
    rng = np.random.default_rng(seed)
    sources, targets, alignments = [], [], []
    for _ in range(num_examples):
        phrases = [
            _noun_phrase(rng, max_adjectives),
            [str(rng.choice(SOURCE_WORDS["verb"]))],
        ]
        if rng.random() < 0.5:
            phrases.append(_noun_phrase(rng, max_adjectives))
        if rng.random() < 0.5:
            phrases.append([str(rng.choice(SOURCE_WORDS["adverb"]))])
        if rng.random() < 0.5:
            phrases.append([str(rng.choice(SOURCE_WORDS["preposition"]))])
            phrases.append(_noun_phrase(rng, max_adjectives))
        source, target, alignment = [], [], []
        for phrase in phrases:
            words, positions = _translate_phrase(phrase, len(source))
            source += phrase
            target += words
            alignment += positions
        sources.append(" ".join(source))
        targets.append(" ".join(target))
        alignments.append(alignment)
    return ParallelCorpus(sources, targets, alignments)


def hold_out(
    corpus: ParallelCorpus, count: int = 1000, seed: int = 0
) -> tuple[ParallelCorpus, ParallelCorpus]:
    """Splits `count` pairs off `corpus`, drawn at random with `seed`.

    The held-out pairs make a test set carved from training data (for
    Multi30k: 1,000 of the 29,000 `train` pairs, while `val` stays for
    every choice). The draw is `numpy.random.default_rng(seed)
    .permutation(len(corpus))[:count]`, so a seed fixes it; both parts
    keep the corpus order. No held-out sentence is left to train on: a
    pair of the rest whose source or target repeats one of a held-out
    pair is dropped too (in Multi30k's `train`, with seed 0, one pair).

    Args:
        corpus: A `ParallelCorpus` (its `alignments` follow their pairs).
        count: Pairs to hold out, `1 <= count < len(corpus)`. Defaults to
            `1000`.
        seed: Seed of the draw. Defaults to `0`.

    Returns:
        `(rest, held_out)`: two `ParallelCorpus`; `rest` has
        `len(corpus) - count` pairs, fewer when sentences repeat.

    Raises:
        ValueError: If `count` is not an integer in `[1, len(corpus))`.

    Example:

    >>> from keras_attention.data.translation import ParallelCorpus, hold_out
    >>> corpus = ParallelCorpus(list("abcde"), list("ABCDE"))
    >>> rest, held = hold_out(corpus, count=2, seed=0)
    >>> len(rest), len(held), sorted(rest.sources + held.sources)
    (3, 2, ['a', 'b', 'c', 'd', 'e'])
    """
    if not isinstance(corpus, ParallelCorpus):
        raise ValueError(
            "Received an invalid value for argument `corpus`, expected a "
            f"ParallelCorpus. Received: corpus={corpus!r}"
        )
    if (
        isinstance(count, bool)
        or not isinstance(count, int)
        or not 1 <= count < len(corpus)
    ):
        raise ValueError(
            "Received an invalid value for argument `count`, expected an "
            f"integer in [1, {len(corpus)}) (the corpus has {len(corpus)} "
            f"pairs). Received: count={count!r}"
        )
    chosen = np.zeros(len(corpus), dtype=bool)
    chosen[np.random.default_rng(seed).permutation(len(corpus))[:count]] = True
    held = [
        {text for text, keep in zip(texts, chosen, strict=True) if keep}
        for texts in (corpus.sources, corpus.targets)
    ]
    pairs = zip(corpus.sources, corpus.targets, strict=True)
    repeats = np.array(
        [source in held[0] or target in held[1] for source, target in pairs]
    )

    def take(keep):
        indices = np.flatnonzero(keep).tolist()
        return ParallelCorpus(
            [corpus.sources[i] for i in indices],
            [corpus.targets[i] for i in indices],
            None
            if corpus.alignments is None
            else [corpus.alignments[i] for i in indices],
        )

    return take(~chosen & ~repeats), take(chosen)


def _read_lines(path):
    lines = files.read_lines(path)
    # Blank lines at the very end of a file are not sentences.
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def read_parallel(
    prefix: str | os.PathLike, source: str = "de", target: str = "en"
) -> ParallelCorpus:
    """Reads `PREFIX.<source>` and `PREFIX.<target>`, one sentence a line.

    Line `i` of the target file translates line `i` of the source file.
    Lines are stripped of surrounding whitespace; blank lines at the end of
    a file are ignored.

    Args:
        prefix: Path without the language suffix, e.g. `data/train`.
        source: Suffix of the source file. Defaults to `"de"`.
        target: Suffix of the target file. Defaults to `"en"`.

    Returns:
        A `ParallelCorpus` without alignments.

    Raises:
        FileNotFoundError: If a file is missing.
        ValueError: If the files are empty, have different numbers of
            lines, or a line is empty; the message names the file (and the
            line number).

    Example:

    >>> import os, tempfile
    >>> from keras_attention.data.translation import read_parallel
    >>> folder = tempfile.mkdtemp()
    >>> for lang, text in (("de", "ein hund\\n"), ("en", "a dog\\n")):
    ...     with open(os.path.join(folder, f"train.{lang}"), "w") as f:
    ...         _ = f.write(text)
    >>> read_parallel(os.path.join(folder, "train")).targets
    ['a dog']
    """
    source_path = f"{os.fspath(prefix)}.{source}"
    target_path = f"{os.fspath(prefix)}.{target}"
    source_lines = _read_lines(source_path)
    target_lines = _read_lines(target_path)
    if not source_lines and not target_lines:
        raise ValueError(
            f"{source_path} is empty, and so is {target_path}: expected one "
            "sentence a line."
        )
    if len(source_lines) != len(target_lines):
        longer, shorter = (
            (source_path, target_path)
            if len(source_lines) > len(target_lines)
            else (target_path, source_path)
        )
        line = min(len(source_lines), len(target_lines)) + 1
        raise ValueError(
            f"{source_path} has {len(source_lines)} lines but {target_path} "
            f"has {len(target_lines)}: line {line} of {longer} has no "
            f"counterpart in {shorter}."
        )
    for path, lines in (
        (source_path, source_lines),
        (target_path, target_lines),
    ):
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                raise ValueError(
                    f"Empty line {number} in {path}: every line must hold a "
                    "sentence (line i of one file translates line i of the "
                    "other)."
                )
    return ParallelCorpus(
        [line.strip() for line in source_lines],
        [line.strip() for line in target_lines],
    )


def load_tfds_translation(
    name: str = "wmt14_translate/de-en",
    split: str = "validation",
    source: str = "de",
    target: str = "en",
    data_dir: str | os.PathLike | None = None,
) -> ParallelCorpus:
    """Loads a translation set with `tensorflow_datasets.load`.

    Works for the TFDS translation builders whose examples are
    `{language: text}` dicts, e.g. `"wmt14_translate/de-en"`,
    `"wmt_t2t_translate/de-en"` or `"ted_hrlr_translate/de_to_en"`. Pairs
    with an empty side are dropped. TFDS downloads and prepares the data on
    first use unless `data_dir` already holds it (offline, a `ValueError`
    within seconds that says what to pass instead); `tensorflow_datasets`
    is imported here only.

    Args:
        name: TFDS name with its config. Defaults to
            `"wmt14_translate/de-en"`.
        split: A TFDS split, e.g. `"train[:1%]"`. Defaults to
            `"validation"`.
        source: Feature holding the source text. Defaults to `"de"`.
        target: Feature holding the target text. Defaults to `"en"`.
        data_dir: TFDS data directory. Defaults to TFDS's own default.

    Returns:
        A `ParallelCorpus` without alignments.

    Raises:
        ValueError: If `source` or `target` is not a feature of the set,
            or the set is not prepared and the network is unreachable.
    """
    import tensorflow_datasets as tfds

    builder = tfds.builder(name, data_dir=data_dir)
    features = sorted(builder.info.features.keys())
    for argument, language in (("source", source), ("target", target)):
        if language not in features:
            raise ValueError(
                f"Received an invalid value for argument `{argument}`: "
                f"{name!r} has the features {features}. "
                f"Received: {argument}={language!r}"
            )
    dataset = download.load(name, _OFFLINE, split, data_dir)
    sources, targets = [], []
    for example in tfds.as_numpy(dataset):
        src = example[source].decode("utf-8").strip()
        tgt = example[target].decode("utf-8").strip()
        if src and tgt:
            sources.append(src)
            targets.append(tgt)
    return ParallelCorpus(sources, targets)
