"""Attention for RNN encoder-decoders: mechanisms, decoder cell, decoding.

Bahdanau (additive) and Luong (dot / general / concat / location) attention
over an encoder memory, with softmax, hardmax or sparsemax weights, and
their monotonic forms (Raffel et al., 2017); `AttentionDecoderCell` (input
feeding, any Keras RNN cell, one or several mechanisms),
`AttentionDecoder` for teacher-forced training, and greedy, n-best beam
search (GNMT length and coverage penalties) and sampling decoders that
return the alignment history; `Translator` is a complete BiGRU +
attention-decoder translation model built from them.
"""

# Defined in `keras_attention.scores` with the additive family.
from keras_attention.scores import (
    NormalizedAdditiveScore as NormalizedAdditiveScore,
)
from keras_attention.seq2seq.attention import (
    AttentionMechanism as AttentionMechanism,
)
from keras_attention.seq2seq.attention import (
    BahdanauAttention as BahdanauAttention,
)
from keras_attention.seq2seq.attention import LuongAttention as LuongAttention
from keras_attention.seq2seq.beam_search import BeamHypotheses as BeamHypotheses
from keras_attention.seq2seq.beam_search import (
    beam_search_decode as beam_search_decode,
)
from keras_attention.seq2seq.cell import (
    AttentionDecoderCell as AttentionDecoderCell,
)
from keras_attention.seq2seq.cell import compute_attention as compute_attention
from keras_attention.seq2seq.decoder import AttentionDecoder as AttentionDecoder
from keras_attention.seq2seq.decoding import DecodeResult as DecodeResult
from keras_attention.seq2seq.decoding import filter_logits as filter_logits
from keras_attention.seq2seq.decoding import greedy_decode as greedy_decode
from keras_attention.seq2seq.decoding import sample_decode as sample_decode
from keras_attention.seq2seq.monotonic import (
    BahdanauMonotonicAttention as BahdanauMonotonicAttention,
)
from keras_attention.seq2seq.monotonic import (
    LuongMonotonicAttention as LuongMonotonicAttention,
)
from keras_attention.seq2seq.monotonic import (
    monotonic_alignments as monotonic_alignments,
)
from keras_attention.seq2seq.probability import hardmax as hardmax
from keras_attention.seq2seq.probability import sparsemax as sparsemax
from keras_attention.seq2seq.scheduled import (
    ScheduledSampling as ScheduledSampling,
)
from keras_attention.seq2seq.scheduled import (
    ScheduledSamplingDecoder as ScheduledSamplingDecoder,
)
from keras_attention.seq2seq.scheduled import (
    exponential_decay as exponential_decay,
)
from keras_attention.seq2seq.scheduled import (
    inverse_sigmoid_decay as inverse_sigmoid_decay,
)
from keras_attention.seq2seq.scheduled import linear_decay as linear_decay
from keras_attention.seq2seq.transformer import (
    GatedDeltaBlock as GatedDeltaBlock,
)
from keras_attention.seq2seq.transformer import (
    TransformerDecoderBlock as TransformerDecoderBlock,
)
from keras_attention.seq2seq.transformer import (
    TransformerDecoderCell as TransformerDecoderCell,
)
from keras_attention.seq2seq.transformer import (
    TransformerEncoderBlock as TransformerEncoderBlock,
)
from keras_attention.seq2seq.transformer import (
    TransformerTranslator as TransformerTranslator,
)
from keras_attention.seq2seq.translator import Translator as Translator
