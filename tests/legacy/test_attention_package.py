"""docs/migration/attention-package.md against `attention` 5.0.0 itself.

The guide's checked blocks build our `AttentionPooling` from stand-ins for
`Attention(...).get_weights()`, mapped as the guide says. Here those same
arrays go into philipperemy's `Attention` layer (on tf_keras), in the
`get_weights()` order the guide states, and the old layer's output must
be ours; the mapping is then checked once more on the old layer's own
(freshly initialised) weights, read by name.
"""

import numpy as np
import pytest
import tensorflow as tf
from attention import Attention

import keras_attention
from tests.legacy import _tfa

GUIDE = "attention-package.md"
# The guide's stated `get_weights()` order of version 5.
ORDER = {
    "luong": ["luong_w", "attention_vector"],
    "bahdanau": [
        "bahdanau_v",
        "bahdanau_w1",
        "bahdanau_w2",
        "attention_vector",
    ],
}


def _names(layer):
    return [w.name.split("/")[-2] for w in layer.weights]


@pytest.mark.parametrize("score", ["luong", "bahdanau"])
def test_guide_block_matches_the_package(score):
    ns = _tfa.guide_block(GUIDE, f"attention_package_{score}")
    h_s = ns["h_s"]
    old = Attention(units=16, score=score)
    old(tf.constant(h_s))
    assert _names(old) == ORDER[score]
    if score == "luong":
        old.set_weights([ns["luong_w"], ns["w_c"]])
    else:
        old.set_weights([ns["v"], ns["w1"], ns["w2"], ns["w_c"]])
    expected = old(tf.constant(h_s)).numpy()
    np.testing.assert_allclose(
        _tfa.numpy(ns["output"]), expected, rtol=1e-5, atol=1e-5
    )
    if score == "luong":
        # The weights our layer returns are the old layer's softmax,
        # computed by its own sublayers.
        logits = old.luong_dot([old.h_t(h_s), old.luong_w(h_s)])
        alpha = old.softmax_normalizer(logits).numpy()
        np.testing.assert_allclose(
            _tfa.numpy(ns["alpha"]), alpha, rtol=1e-5, atol=1e-6
        )


@pytest.mark.parametrize(
    ("score", "ours"), [("luong", "bilinear"), ("bahdanau", "additive")]
)
def test_trained_weights_port(score, ours):
    """The old layer's own weights, by name, through the guide's table."""
    rng = np.random.default_rng(7)
    h_s = rng.normal(size=(4, 7, 6)).astype("float32")
    old = Attention(units=5, score=score)
    old(tf.constant(h_s))
    _tfa.randomize(old.weights, rng)
    weights = dict(zip(_names(old), old.get_weights(), strict=True))
    layer = keras_attention.AttentionPooling(query="last", score=ours, units=5)
    layer(h_s)
    if score == "luong":
        layer.set_weights([weights["luong_w"].T, weights["attention_vector"]])
    else:
        layer.set_weights(
            [
                weights["bahdanau_w1"],
                weights["bahdanau_w2"],
                weights["bahdanau_v"][:, 0],
                weights["attention_vector"],
            ]
        )
    np.testing.assert_allclose(
        _tfa.numpy(layer(h_s)),
        old(tf.constant(h_s)).numpy(),
        rtol=1e-5,
        atol=1e-5,
    )
