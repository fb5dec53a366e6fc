"""layers/_projections.py: a fresh initializer per sublayer, the
projections' config in Keras's keys."""

import keras
import numpy as np

import keras_attention
from keras_attention.layers import _projections


def test_clone_initializer_is_a_new_object_with_the_same_config():
    initializer = keras.initializers.GlorotUniform()
    clone = _projections.clone_initializer(initializer)
    assert clone is not initializer
    assert type(clone) is type(initializer)
    assert clone.get_config() == initializer.get_config()
    # Unseeded clones draw their own values, as separate sublayers must.
    first = keras.ops.convert_to_numpy(clone((4, 4)))
    second = _projections.clone_initializer(initializer)((4, 4))
    assert not np.allclose(first, keras.ops.convert_to_numpy(second))


def test_projection_config_is_keras_multi_head_attention_s():
    ours = keras_attention.MultiHeadAttention(
        2, 4, kernel_regularizer="l2", bias_constraint="non_neg"
    )
    theirs = keras.layers.MultiHeadAttention(
        2, 4, kernel_regularizer="l2", bias_constraint="non_neg"
    )
    config = _projections.projection_config(ours)
    keras_config = theirs.get_config()
    assert config == {key: keras_config[key] for key in config}
    assert set(config) == {
        "kernel_initializer",
        "bias_initializer",
        "kernel_regularizer",
        "bias_regularizer",
        "activity_regularizer",
        "kernel_constraint",
        "bias_constraint",
    }
