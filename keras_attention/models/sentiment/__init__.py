"""A sentence classifier built on structured self-attention (Lin et al.).

The sentiment example's model and its steps, one module a job:
`model.py` builds it (`build_sentiment_classifier`: raw strings → the
adapted `TextVectorization` → `Embedding(mask_zero=True)` → a BiLSTM →
`keras_attention.StructuredSelfAttention` → an MLP → softmax),
`inference.py` runs it (`token_id_model`, `predict_sentiment`),
`metrics.py` scores its attention (`attention_on_cues`,
`attention_redundancy`), `training.py` trains it on the scaffold of
`keras_attention.models.fitting` (`train_sentiment_classifier`, with
weight transfer) and `report.py` evaluates it and writes the attention
report. Every name is importable from here.
"""

from keras_attention.models.sentiment.inference import (
    predict_labels as predict_labels,
)
from keras_attention.models.sentiment.inference import (
    predict_sentiment as predict_sentiment,
)
from keras_attention.models.sentiment.inference import (
    token_id_model as token_id_model,
)
from keras_attention.models.sentiment.inference import (
    vectorizer_of as vectorizer_of,
)
from keras_attention.models.sentiment.metrics import (
    attention_on_cues as attention_on_cues,
)
from keras_attention.models.sentiment.metrics import (
    attention_redundancy as attention_redundancy,
)
from keras_attention.models.sentiment.metrics import (
    cue_positions as cue_positions,
)
from keras_attention.models.sentiment.model import OUTPUT_NAMES as OUTPUT_NAMES
from keras_attention.models.sentiment.model import (
    build_sentiment_classifier as build_sentiment_classifier,
)
from keras_attention.models.sentiment.model import class_names as class_names
from keras_attention.models.sentiment.model import (
    classifier_for_training as classifier_for_training,
)
from keras_attention.models.sentiment.report import (
    balanced_indices as balanced_indices,
)
from keras_attention.models.sentiment.report import (
    evaluate_sentiment_classifier as evaluate_sentiment_classifier,
)
from keras_attention.models.sentiment.report import (
    save_attention_report as save_attention_report,
)
from keras_attention.models.sentiment.training import (
    copy_matching_weights as copy_matching_weights,
)
from keras_attention.models.sentiment.training import (
    copy_vectorizer as copy_vectorizer,
)
from keras_attention.models.sentiment.training import (
    make_dataset as make_dataset,
)
from keras_attention.models.sentiment.training import (
    train_sentiment_classifier as train_sentiment_classifier,
)
