"""Set-up for the comparisons with the retired Keras-2 packages.

These tests load keras-self-attention, keras-multi-head, `attention` and
tensorflow-addons next to `keras_attention` in one process: the old
packages on `tf_keras` (Keras 2, through `tf.keras`), ours on Keras 3.
They run only with `--legacy`, in an environment made as docs/testing.md
("The retired packages themselves") says; anywhere else they stop with
that instruction instead of skipping.
"""

import os

import pytest

SETUP = (
    "the legacy comparisons need their own environment: "
    "pip install tensorflow==2.21.0 tf_keras==2.21.0 keras-self-attention "
    "keras-multi-head attention tensorflow-addons, then run "
    "TF_USE_LEGACY_KERAS=1 TF_KERAS=1 python -m pytest --legacy tests/legacy "
    "(docs/testing.md)"
)


def pytest_configure(config):
    missing = [
        name
        for name in ("TF_USE_LEGACY_KERAS", "TF_KERAS")
        if os.environ.get(name) != "1"
    ]
    if missing:
        raise pytest.UsageError(f"{', '.join(missing)} not set to 1; {SETUP}")
    import keras

    if keras.backend.backend() != "tensorflow":
        raise pytest.UsageError(
            f"KERAS_BACKEND is {keras.backend.backend()!r}; the old packages "
            f"run on TensorFlow only. {SETUP}"
        )
