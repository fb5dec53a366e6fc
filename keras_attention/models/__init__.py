"""Builders, training and evaluation of the example models.

`fitting` is the training scaffold of the sentiment and translation
examples, `distribute` the `--distribute` strategies; `sentiment`,
`translation` and `language_model` build, train and evaluate each model
(`Generator` generates from the language model, compiled end to end);
`precision.auto_dtype_policy` picks the dtype policy the hardware runs
fast.
"""

from keras_attention.models.fitting import FitResult as FitResult
from keras_attention.models.generation import Generator as Generator
from keras_attention.models.language_model import (
    build_language_model as build_language_model,
)
from keras_attention.models.language_model import (
    train_language_model as train_language_model,
)
from keras_attention.models.precision import (
    auto_dtype_policy as auto_dtype_policy,
)
from keras_attention.models.sentiment import (
    build_sentiment_classifier as build_sentiment_classifier,
)
from keras_attention.models.sentiment import (
    classifier_for_training as classifier_for_training,
)
from keras_attention.models.sentiment import (
    train_sentiment_classifier as train_sentiment_classifier,
)
from keras_attention.models.translation import Translator as Translator
from keras_attention.models.translation import (
    build_vocabularies as build_vocabularies,
)
from keras_attention.models.translation import (
    evaluate_translator as evaluate_translator,
)
from keras_attention.models.translation import (
    train_translator as train_translator,
)
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
