"""The raw-text side of a translator: vocabularies, ids, decoding choice.

`TextTranslator` is the base of the package's translators
(`keras_attention.seq2seq.Translator`, the RNN, and
`keras_attention.models.TransformerTranslator`): it holds both
vocabularies and the special tokens in its config, turns raw text into ids
and ids back into words, and runs the decoder a subclass describes
through `greedy_decode`, `beam_search_decode` or `sample_decode`. A
subclass builds its layers and defines `encode`-like methods and
`decode(source_ids, beam_width=None, decoding=None, **options)`.
"""

import keras
import numpy as np
from keras import ops

from keras_attention import _validation
from keras_attention import text as text_lib
from keras_attention._validation import positive_int as _check_positive_int
from keras_attention.seq2seq.beam_search import beam_search_decode
from keras_attention.seq2seq.decoding import greedy_decode
from keras_attention.seq2seq.decoding import sample_decode

START_TOKEN = "[start]"
END_TOKEN = "[end]"
# Both translators' embeddings: unit-variance vectors, as the RNN preset
# was tuned with.
EMBEDDINGS_INITIALIZER = {
    "class_name": "RandomNormal",
    "config": {"stddev": 1.0},
}

_DECODING_OPTIONS = {
    "greedy": (),
    "beam": ("length_penalty", "coverage_penalty"),
    "sample": ("temperature", "top_k", "top_p", "seed"),
}


def target_text(text: str) -> str:
    """The tokenized target with its start and end tokens."""
    return f"{START_TOKEN} {text_lib.tokenize(text)} {END_TOKEN}"


def check_decoding(decoding, options):
    """A `ValueError` for an unknown decoding or an option it does not take."""
    if decoding not in _DECODING_OPTIONS:
        raise ValueError(
            "Received an invalid value for argument `decoding`, expected "
            f"one of {list(_DECODING_OPTIONS)}. Received: decoding={decoding!r}"
        )
    unknown = sorted(set(options) - set(_DECODING_OPTIONS[decoding]))
    if unknown:
        raise ValueError(
            f"{decoding!r} decoding takes the options "
            f"{list(_DECODING_OPTIONS[decoding])}. Received: {unknown}"
        )


class TextTranslator(keras.Model):
    """Base of the translators: vocabularies, raw text in and out, decoding.

    Args:
        source_vocabulary: Source tokens by id; id 0 is padding, id 1
            `[UNK]` (as `TextVectorization.get_vocabulary()` returns).
        target_vocabulary: Target tokens by id, the same way, holding
            `start_token` and `end_token`.
        max_output_length: Most tokens emitted by `call`/`decode`, the end
            token included.
        beam_width: Beam width used by `call` (`1` is greedy).
        length_penalty: GNMT length penalty exponent of beam search.
        start_token: The target's start token.
        end_token: The target's end token.
        **kwargs: `keras.Model` keyword arguments such as `name`.
    """

    def __init__(
        self,
        source_vocabulary,
        target_vocabulary,
        max_output_length=50,
        beam_width=1,
        length_penalty=0.0,
        start_token=START_TOKEN,
        end_token=END_TOKEN,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value in (
            ("max_output_length", max_output_length),
            ("beam_width", beam_width),
        ):
            _check_positive_int(name, value)
        _validation.strings("source_vocabulary", source_vocabulary)
        _validation.strings("target_vocabulary", target_vocabulary)
        self.source_vocabulary = [str(w) for w in source_vocabulary]
        self.target_vocabulary = [str(w) for w in target_vocabulary]
        for token in (start_token, end_token):
            if token not in self.target_vocabulary:
                raise ValueError(
                    f"The target vocabulary has no {token!r} token; build it "
                    "from texts made by `target_text`. Received: "
                    f"target_vocabulary[:10]={self.target_vocabulary[:10]}"
                )
        self.max_output_length = max_output_length
        self.beam_width = beam_width
        self.length_penalty = _validation.number(
            "length_penalty", length_penalty
        )
        self.start_token = start_token
        self.end_token = end_token
        self.start_id = self.target_vocabulary.index(start_token)
        self.end_id = self.target_vocabulary.index(end_token)

    def check_source_rank(self, source_ids):
        """A `ValueError` unless the source ids are `(batch, time)`."""
        shape = tuple(getattr(source_ids, "shape", np.shape(source_ids)))
        if len(shape) != 2:
            raise ValueError(
                f"{type(self).__name__} expects source ids of shape "
                "`(batch_size, source_time)` (a batch of one sentence is "
                "`ids[None]`; raw text goes to `translate`). Received: "
                "source_ids with "
                f"shape={shape}"
            )

    def run_decoder(self, common, beam_width, decoding, options):
        """Runs the decoding `decoding` names with the decoder `common`.

        Args:
            common: The arguments every decoder takes (`cell`, `memory`,
                `embedding`, `output_layer`, `memory_mask`, ...); the
                special tokens and `max_length` are added here.
            beam_width: Defaults to the model's `beam_width`.
            decoding: `"greedy"`, `"beam"` or `"sample"`. Defaults to
                `"beam"` when the beam is wider than 1, else `"greedy"`.
            options: The decoding's options (see `decode`).

        Returns:
            A `keras_attention.seq2seq.DecodeResult`.
        """
        beam_width = self.beam_width if beam_width is None else beam_width
        if decoding is None:
            decoding = "beam" if beam_width > 1 else "greedy"
        check_decoding(decoding, options)
        common = {
            **common,
            "start_token": self.start_id,
            "end_token": self.end_id,
            "max_length": self.max_output_length,
        }
        if decoding == "greedy":
            return greedy_decode(**common)
        if decoding == "sample":
            return sample_decode(**common, **options)
        options = {"length_penalty": self.length_penalty, **options}
        return beam_search_decode(**common, beam_width=beam_width, **options)

    def call(self, inputs, training=None):
        if isinstance(inputs, (list, tuple)):
            source_ids, target_input_ids = inputs
            logits, _ = self.teacher_forcing(
                source_ids, target_input_ids, training=training
            )
            return logits
        result = self.decode(inputs)
        return result.tokens, result.scores, result.alignments

    def encoder_attention(self, source_ids):
        """The encoder's attention weights by layer path: `{}` here, an
        RNN encoder has none; `TransformerTranslator` returns its blocks'
        self-attention per head."""
        self.check_source_rank(source_ids)
        return {}

    def vectorize_sources(self, texts):
        """Raw source texts → padded ids `(batch_size, longest)` (NumPy).

        At least one column: a batch whose texts have no token (`""`)
        gets one padding step, so that the encoder runs (on nothing).
        """
        ids = text_lib.vectorize(
            self.source_vocabulary, [text_lib.tokenize(t) for t in texts]
        )
        if ids.shape[1] == 0:
            ids = np.zeros((ids.shape[0], 1), ids.dtype)
        return ids

    def vectorize_targets(self, texts):
        """Raw target texts → ids of `[start] ... [end]`, padded (NumPy)."""
        return text_lib.vectorize(
            self.target_vocabulary, [target_text(t) for t in texts]
        )

    @property
    def _vocab(self):
        return len(self.source_vocabulary)

    def tokens_to_words(self, tokens):
        """One id sequence → its words, up to the end token."""
        words = []
        for token in np.asarray(tokens).tolist():
            if token == self.end_id:
                break
            if token >= text_lib.SPECIAL_IDS and token != self.start_id:
                words.append(self.target_vocabulary[token])
            elif token == text_lib.OOV_ID:
                words.append("[UNK]")
        return words

    def translate(
        self,
        texts,
        beam_width=None,
        return_alignments=False,
        decoding=None,
        **options,
    ):
        """Translates raw texts eagerly.

        Args:
            texts: One source sentence (a string), or a list or NumPy array
                of them.
            beam_width: Defaults to the model's `beam_width`.
            return_alignments: Whether to also return, per sentence, the
                `(target_words, source_words, weights)` triple for plots.
            decoding: `"greedy"`, `"beam"` or `"sample"`; see `decode`.
            **options: Options of the decoding (see `decode`), e.g.
                `temperature=0.7, top_p=0.9, seed=0` for `"sample"` or
                `length_penalty=0.6, coverage_penalty=0.2` for `"beam"`.

        Returns:
            The detokenized translations (one string for one string), and
            the alignments if asked (one triple for one string). A text
            without a word (`""`, spaces or punctuation alone) gets a
            `ValueError` (`keras_attention.text.check_words`). No texts
            give an empty list.
        """
        single = isinstance(texts, (str, bytes))
        texts = text_lib.as_text_list(texts)
        text_lib.check_words(texts[0] if single else texts)
        if not texts:
            return ([], []) if return_alignments else []
        ids = self.vectorize_sources(texts)
        result = self.decode(
            ids, beam_width=beam_width, decoding=decoding, **options
        )
        tokens = ops.convert_to_numpy(result.tokens)
        weights = ops.convert_to_numpy(result.alignments)
        translations, alignments = [], []
        for i, text in enumerate(texts):
            words = self.tokens_to_words(tokens[i])
            translations.append(text_lib.detokenize(words))
            source_words = text_lib.tokenize(text).split()
            alignments.append(
                (
                    words,
                    source_words,
                    weights[i, : len(words), : len(source_words)],
                )
            )
        if single:
            translations, alignments = translations[0], alignments[0]
        if return_alignments:
            return translations, alignments
        return translations

    def get_config(self):
        return {
            **super().get_config(),
            "source_vocabulary": self.source_vocabulary,
            "target_vocabulary": self.target_vocabulary,
            "max_output_length": self.max_output_length,
            "beam_width": self.beam_width,
            "length_penalty": self.length_penalty,
            "start_token": self.start_token,
            "end_token": self.end_token,
        }
