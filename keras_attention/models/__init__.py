"""Builders (and training helpers) for the example models."""

from keras_attention.models.sentiment import (
    build_sentiment_classifier as build_sentiment_classifier,
)
from keras_attention.models.sentiment import (
    classifier_for_training as classifier_for_training,
)
