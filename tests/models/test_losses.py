"""The example models' losses."""

import keras
import numpy as np
import pytest

from keras_attention.models import losses


def test_smoothed_loss_matches_numpy_and_ignores_padding():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype("float32")
    labels = np.array([[2, 4, 0], [1, 0, 0]])
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    gold = np.take_along_axis(log_p, labels[..., None], -1)[..., 0]
    mask = labels != 0
    for eps in (0.0, 0.1):
        per_token = -(1 - eps) * gold - eps * log_p.mean(-1)
        expected = per_token[mask].mean()
        loss = losses.SmoothedSequenceLoss(eps)(labels, logits)
        np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    plain = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, ignore_class=0
    )(labels, logits)
    np.testing.assert_allclose(float(plain), -gold[mask].mean(), rtol=1e-5)
    with pytest.raises(ValueError, match="label_smoothing=1.0"):
        losses.SmoothedSequenceLoss(1.0)
