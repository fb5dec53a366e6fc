"""Bahdanau and Luong attention over an encoder memory."""

import re

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from keras_attention import seq2seq
from tests.layer_basics import check_layer_basics
from tests.layer_basics import normal_arrays
from tests.profiles import examples
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import to_numpy

QUERY, MEMORY = normal_arrays(0, (2, 4), (2, 5, 6))
MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)


def _np_masked_softmax(logits, mask):
    logits = np.where(mask, logits, -np.inf)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _weights(layer, name):
    return {w.path.split("/")[-1]: to_numpy(w) for w in layer.weights}[name]


def _check(layer, logits):
    context, weights = layer(QUERY, MEMORY, MASK)
    expected = _np_masked_softmax(logits, MASK)
    assert_allclose(weights, expected, atol=1e-5)
    assert_allclose(
        context, np.einsum("bs,bsd->bd", expected, MEMORY), atol=1e-5
    )


def test_bahdanau_matches_numpy():
    layer = seq2seq.BahdanauAttention(units=7)
    layer(QUERY, MEMORY, MASK)
    wq = _weights(layer, "query_kernel")
    wk = _weights(layer, "key_kernel")
    v = _weights(layer, "v")
    hidden = np.tanh((QUERY @ wq)[:, None, :] + MEMORY @ wk)
    _check(layer, hidden @ v)


def test_normalized_bahdanau_matches_numpy(rng):
    layer = seq2seq.BahdanauAttention(units=7, normalize=True)
    layer(QUERY, MEMORY, MASK)
    # Move g and b off their initial values so both enter the check.
    layer.score.g.assign(1.7)
    layer.score.bias.assign(rng.normal(size=(7,)).astype("float32"))
    wq = _weights(layer, "query_kernel")
    wk = _weights(layer, "key_kernel")
    v = _weights(layer, "v")
    b = _weights(layer, "bias")
    hidden = np.tanh((QUERY @ wq + b)[:, None, :] + MEMORY @ wk)
    _check(layer, hidden @ (1.7 * v / np.linalg.norm(v)))


def test_normalized_score_starts_with_g_sqrt_one_over_units():
    layer = seq2seq.BahdanauAttention(units=16, normalize=True)
    layer(QUERY, MEMORY)
    assert_allclose(to_numpy(layer.score.g), 0.25)


def test_luong_dot_matches_numpy(rng):
    query = rng.normal(size=(2, 6)).astype("float32")
    layer = seq2seq.LuongAttention("dot")
    context, weights = layer(query, MEMORY, MASK)
    expected = _np_masked_softmax(np.einsum("bd,bsd->bs", query, MEMORY), MASK)
    assert_allclose(weights, expected, atol=1e-5)


def test_luong_general_matches_numpy():
    layer = seq2seq.LuongAttention("general")
    layer(QUERY, MEMORY, MASK)
    w = _weights(layer, "kernel")
    _check(layer, np.einsum("bd,bsd->bs", QUERY @ w, MEMORY))


def test_luong_concat_matches_numpy():
    layer = seq2seq.LuongAttention("concat", units=3)
    layer(QUERY, MEMORY, MASK)
    w = _weights(layer, "kernel")
    v = _weights(layer, "v")
    pairs = np.concatenate(
        [np.broadcast_to(QUERY[:, None, :], (2, 5, 4)), MEMORY], axis=-1
    )
    _check(layer, np.tanh(pairs @ w) @ v)


def test_luong_location_matches_numpy():
    layer = seq2seq.LuongAttention("location", max_length=9)
    layer(QUERY, MEMORY, MASK)
    w = _weights(layer, "kernel")
    _check(layer, (QUERY @ w)[:, :5])


@pytest.mark.parametrize(
    "layer",
    [
        lambda: seq2seq.BahdanauAttention(4),
        lambda: seq2seq.BahdanauAttention(4, normalize=True),
        lambda: seq2seq.LuongAttention("general"),
        lambda: seq2seq.LuongAttention("concat"),
        lambda: seq2seq.LuongAttention("location", max_length=5),
    ],
)
def test_padded_positions_get_zero_weight_and_do_not_change_outputs(layer, rng):
    layer = layer()
    context, weights = layer(QUERY, MEMORY, MASK)
    assert np.all(to_numpy(weights)[~MASK] == 0)
    changed = MEMORY.copy()
    changed[~MASK] = rng.normal(size=changed[~MASK].shape) * 100
    context2, weights2 = layer(QUERY, changed, MASK)
    assert_allclose(context2, context, atol=1e-5)
    assert_allclose(weights2, weights, atol=1e-6)


def test_fully_masked_memory_gives_zero_weights_and_context():
    layer = seq2seq.BahdanauAttention(4)
    mask = np.zeros((2, 5), dtype=bool)
    context, weights = layer(QUERY, MEMORY, mask)
    assert np.all(to_numpy(weights) == 0)
    assert np.all(to_numpy(context) == 0)


def test_keras_mask_of_memory_is_used():
    ids = np.array([[3, 4, 0, 0], [1, 2, 3, 4]])
    memory = keras.layers.Embedding(5, 6, mask_zero=True)(ids)
    _, weights = seq2seq.LuongAttention("general")(QUERY, memory)
    assert np.all(to_numpy(weights)[0, 2:] == 0)


def test_query_sequence_gives_one_row_per_query(rng):
    layer = seq2seq.BahdanauAttention(4)
    queries = rng.normal(size=(2, 3, 4)).astype("float32")
    context, weights = layer(queries, MEMORY, MASK)
    assert tuple(context.shape) == (2, 3, 6)
    assert tuple(weights.shape) == (2, 3, 5)
    single_context, _ = layer(queries[:, 1], MEMORY, MASK)
    assert_allclose(context[:, 1], single_context, atol=1e-6)


@examples(15)
@given(
    st.lists(
        st.lists(st.booleans(), min_size=5, max_size=5), min_size=2, max_size=2
    )
)
def test_weights_are_a_distribution_over_valid_positions(mask_rows):
    mask = np.array(mask_rows, dtype=bool)
    _, weights = seq2seq.LuongAttention("general")(QUERY, MEMORY, mask)
    weights = to_numpy(weights)
    assert np.all(np.isfinite(weights))
    assert np.all(weights[~mask] == 0)
    totals = weights.sum(-1)
    assert_allclose(totals, mask.any(-1).astype("float32"), atol=1e-5)


@pytest.mark.parametrize(
    "cls, kwargs, num_weights",
    [
        # The normalised score subclasses the additive one: one case runs
        # both (the plain one's numbers: test_bahdanau_matches_numpy).
        (seq2seq.BahdanauAttention, {"units": 4, "normalize": True}, 5),
        (seq2seq.LuongAttention, {"score": "dot"}, 0),
        (seq2seq.LuongAttention, {"score": "general"}, 1),
        (seq2seq.LuongAttention, {"score": "concat", "units": 3}, 2),
        (seq2seq.LuongAttention, {"score": "location", "max_length": 5}, 1),
    ],
)
def test_layer_basics(cls, kwargs, num_weights):
    query = QUERY if kwargs.get("score") != "dot" else QUERY[:, :4]
    memory = MEMORY if kwargs.get("score") != "dot" else MEMORY[..., :4]
    check_layer_basics(
        cls,
        kwargs,
        [query, memory],
        expected_output_shape=[(2, memory.shape[-1]), (2, 5)],
        expected_num_trainable_weights=num_weights,
        run_training=num_weights > 0,
    )


def test_invalid_normalize_raises():
    with pytest.raises(ValueError, match="normalize=1"):
        seq2seq.BahdanauAttention(4, normalize=1)


def test_unknown_luong_score_raises():
    with pytest.raises(ValueError, match="score='additive'"):
        seq2seq.LuongAttention("additive")


def test_location_without_max_length_raises():
    with pytest.raises(ValueError, match="needs `max_length`"):
        seq2seq.LuongAttention("location")


def test_memory_of_wrong_rank_raises_naming_both_shapes():
    with pytest.raises(ValueError, match=r"memory.shape=\(2, 6\)"):
        seq2seq.BahdanauAttention(4)(QUERY, MEMORY[:, 0])


def test_query_of_wrong_rank_raises_naming_both_shapes():
    with pytest.raises(ValueError, match=r"query.shape=\(2, 1, 1, 4\)"):
        seq2seq.BahdanauAttention(4)(QUERY[:, None, None], MEMORY)


@pytest.mark.parametrize(
    "call",
    [
        lambda mask: seq2seq.BahdanauAttention(4)(QUERY, MEMORY, mask),
        lambda mask: seq2seq.LuongMonotonicAttention()(QUERY, MEMORY, mask),
        lambda mask: seq2seq.AttentionDecoderCell(
            keras.layers.GRUCell(4), seq2seq.LuongAttention()
        ).get_initial_state(memory=MEMORY, memory_mask=mask),
    ],
)
def test_memory_mask_of_wrong_shape_raises_naming_both_shapes(call):
    # (2, 1) would broadcast: it must be refused, not mask every position.
    for mask in (MASK[:, :1], MASK[:, :4], MASK[:, :, None]):
        received = re.escape(f"Received: memory_mask.shape={mask.shape}")
        with pytest.raises(ValueError, match=rf"shape \(2, 5\).*{received}"):
            call(mask)
