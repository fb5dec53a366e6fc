"""`probability_fn`: softmax, hardmax, sparsemax and callables."""

import keras
import numpy as np
import pytest

from keras_attention import seq2seq
from tests.layer_basics import normal_arrays
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import to_numpy

QUERY, MEMORY = normal_arrays(11, (3, 4), (3, 5, 4))
MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=bool)


def _sparsemax(z):
    """Martins & Astudillo (2016), Algorithm 1, one row."""
    ordered = np.sort(z)[::-1]
    cumulative = np.cumsum(ordered)
    k = np.arange(1, len(z) + 1)
    support = k[1 + k * ordered > cumulative].max()
    tau = (cumulative[support - 1] - 1) / support
    return np.maximum(z - tau, 0)


@keras.saving.register_keras_serializable(package="tests")
def sharpened(logits):
    return keras.ops.softmax(3.0 * logits, axis=-1)


def _pair(probability_fn, score="general"):
    """A softmax mechanism and one with `probability_fn`, same weights."""
    soft = seq2seq.LuongAttention(score)
    other = seq2seq.LuongAttention(score, probability_fn=probability_fn)
    soft(QUERY, MEMORY)
    other(QUERY, MEMORY)
    other.set_weights(soft.get_weights())
    return soft, other


def _logits(soft):
    """The logits of the valid positions, from the softmax weights.

    `log softmax(e) = e - logsumexp(e)`: a shift per row, which none of
    the probability functions sees.
    """
    weights = to_numpy(soft(QUERY, MEMORY, MASK)[1])
    with np.errstate(divide="ignore"):
        return np.log(weights)


def test_sparsemax_matches_the_algorithm(rng):
    logits = rng.normal(scale=2.0, size=(6, 7)).astype("float32")
    weights = to_numpy(seq2seq.sparsemax(logits))
    assert_allclose(weights, [_sparsemax(z) for z in logits], atol=1e-6)
    assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert np.any(weights == 0)
    assert_allclose(seq2seq.sparsemax(logits.T, axis=0), weights.T, atol=1e-6)


@pytest.mark.parametrize("probability_fn", ["hardmax", "sparsemax", sharpened])
def test_mechanism_weights_and_masks(probability_fn):
    soft, other = _pair(probability_fn)
    logits = _logits(soft)
    context, weights = (to_numpy(x) for x in other(QUERY, MEMORY, MASK))
    for row in range(2):
        valid = MASK[row]
        z = logits[row, valid]
        if probability_fn == "hardmax":
            expected = np.eye(len(z))[z.argmax()]
        elif probability_fn == "sparsemax":
            expected = _sparsemax(z)
        else:
            expected = np.exp(3 * (z - z.max()))
            expected /= expected.sum()
        assert_allclose(weights[row, valid], expected, atol=1e-5)
    assert np.all(weights[~MASK] == 0)
    assert np.all(weights[2] == 0) and np.all(context[2] == 0)
    assert_allclose(
        context, np.einsum("bs,bsd->bd", weights, MEMORY), atol=1e-5
    )


def test_sparsemax_and_a_callable_in_a_decoder_round_trip(tmp_path):
    cell = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(4),
        [
            seq2seq.BahdanauAttention(4, probability_fn="sparsemax"),
            seq2seq.LuongAttention("dot", probability_fn=sharpened),
        ],
    )
    targets, memory = keras.Input((2, 3)), keras.Input((5, 4))
    outputs = seq2seq.AttentionDecoder(cell)(targets, memory)
    model = keras.Model([targets, memory], outputs)
    x = [np.ones((3, 2, 3), "float32"), MEMORY]
    path = str(tmp_path / "sparsemax.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert_allclose(loaded(x), model(x), atol=1e-6)
    restored = loaded.layers[2].cell.mechanisms
    assert restored[0].probability_fn == "sparsemax"
    assert restored[1].probability_fn is sharpened


def test_unregistered_callable_is_refused_when_saving():
    layer = seq2seq.BahdanauAttention(probability_fn=lambda x: x)
    with pytest.raises(ValueError, match="must be registered"):
        layer.get_config()


def test_unknown_probability_fn_raises():
    with pytest.raises(ValueError, match="probability_fn='argmax'"):
        seq2seq.LuongAttention(probability_fn="argmax")
