"""Data for the examples: synthetic tasks, file readers, TFDS loaders."""

from keras_attention.data.named import (
    load_tfds_sentiment as load_tfds_sentiment,
)
from keras_attention.data.sentiment import SentimentData as SentimentData
from keras_attention.data.sentiment import (
    make_synthetic_sentiment as make_synthetic_sentiment,
)
from keras_attention.data.sentiment import (
    make_text_vectorizer as make_text_vectorizer,
)
from keras_attention.data.sentiment import (
    read_sentiment_tsv as read_sentiment_tsv,
)
from keras_attention.data.sentiment import tokens_for as tokens_for
from keras_attention.data.sst import load_sst_splits as load_sst_splits
from keras_attention.data.translation import ParallelCorpus as ParallelCorpus
from keras_attention.data.translation import hold_out as hold_out
from keras_attention.data.translation import (
    load_tfds_translation as load_tfds_translation,
)
from keras_attention.data.translation import (
    make_synthetic_translation as make_synthetic_translation,
)
from keras_attention.data.translation import read_parallel as read_parallel
