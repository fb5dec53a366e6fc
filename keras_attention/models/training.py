"""Deprecated: the sentiment example's training moved to other modules.

Importing this module warns with a `DeprecationWarning`. Its names still
work and are the same objects as at their new homes:

- splits (`SentimentSplit`, `split_off`, `load_sentiment_splits` and the
  default sizes): `keras_attention.data.splits`;
- `make_dataset`, `train_sentiment_classifier`,
  `evaluate_sentiment_classifier`, `save_attention_report`:
  `keras_attention.models.sentiment`;
- `TrainingResult`: `keras_attention.models.fitting.FitResult`, the one
  result type of both examples;
- `get_strategy`, `worker_index`: `keras_attention.models.distribute`
  (`get_strategy`, `tf_config_index`).
"""

import warnings

from keras_attention.data.splits import SYNTHETIC_EXAMPLES as SYNTHETIC_EXAMPLES
from keras_attention.data.splits import TEST_FRACTION as TEST_FRACTION
from keras_attention.data.splits import (
    VALIDATION_FRACTION as VALIDATION_FRACTION,
)
from keras_attention.data.splits import SentimentSplit as SentimentSplit
from keras_attention.data.splits import (
    load_sentiment_splits as load_sentiment_splits,
)
from keras_attention.data.splits import split_off as split_off
from keras_attention.models.distribute import get_strategy as get_strategy
from keras_attention.models.distribute import tf_config_index as worker_index
from keras_attention.models.fitting import FitResult as TrainingResult
from keras_attention.models.sentiment import (
    evaluate_sentiment_classifier as evaluate_sentiment_classifier,
)
from keras_attention.models.sentiment import make_dataset as make_dataset
from keras_attention.models.sentiment import (
    save_attention_report as save_attention_report,
)
from keras_attention.models.sentiment import (
    train_sentiment_classifier as train_sentiment_classifier,
)

__all__ = [
    "SYNTHETIC_EXAMPLES",
    "TEST_FRACTION",
    "VALIDATION_FRACTION",
    "SentimentSplit",
    "TrainingResult",
    "evaluate_sentiment_classifier",
    "get_strategy",
    "load_sentiment_splits",
    "make_dataset",
    "save_attention_report",
    "split_off",
    "train_sentiment_classifier",
    "worker_index",
]

warnings.warn(
    "keras_attention.models.training is deprecated: use "
    "keras_attention.data.splits, keras_attention.models.sentiment and "
    "keras_attention.models.fitting (see the module docstring).",
    DeprecationWarning,
    stacklevel=2,
)
