"""layers/_logit_activation.py: `attention_activation` on the logits."""

import keras
import numpy as np
from keras import ops

from keras_attention.layers import _logit_activation


def test_get_serialize_and_apply():
    assert _logit_activation.get(None) is None
    assert _logit_activation.serialize(None) is None
    function = _logit_activation.get("sigmoid")
    again = keras.activations.deserialize(_logit_activation.serialize(function))
    logits = np.array([[-2.0, 0.0, 3.0]], "float32")
    want = 1 / (1 + np.exp(-logits))
    for f in (function, again):
        got = ops.convert_to_numpy(_logit_activation.apply(logits, f))
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert _logit_activation.apply(logits, None) is logits


def test_apply_keeps_the_logits_dtype():
    logits = ops.cast(np.array([[0.5, -1.0]]), "float32")
    doubled = _logit_activation.apply(logits, lambda z: ops.cast(z, "float16"))
    assert keras.backend.standardize_dtype(doubled.dtype) == "float32"
