"""Monotonic attention against the expected-alignment recurrence in NumPy.

The reference follows Raffel et al. (2017), eq. 9-10, position by
position: `q_ij = (1 - p_i,j-1) q_i,j-1 + α_i-1,j`, `α_ij = p_ij q_ij`,
with `p_ij = σ(e_ij + r)`; hard mode stops at the first position at or
after the previous one whose energy is positive.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import seq2seq
from tests.layer_basics import normal_arrays
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import assert_array_equal
from tests.seq2seq._arrays import to_numpy

QUERIES, MEMORY = normal_arrays(7, (3, 2, 4), (2, 6, 4))
MASK = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=bool)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _expected(p_choose, previous):
    alignments = np.zeros_like(p_choose)
    for b in range(p_choose.shape[0]):
        q = 0.0
        for j in range(p_choose.shape[1]):
            stay = 1.0 - p_choose[b, j - 1] if j > 0 else 0.0
            q = stay * q + previous[b, j]
            alignments[b, j] = p_choose[b, j] * q
    return alignments


def _hard(energies, previous):
    alignments = np.zeros_like(energies)
    for b in range(energies.shape[0]):
        if previous[b].sum() == 0:
            continue
        start = int(previous[b].argmax())
        for j in range(start, energies.shape[1]):
            if energies[b, j] > 0:
                alignments[b, j] = 1.0
                break
    return alignments


@pytest.mark.parametrize("mode", ["parallel", "recursive", "hard"])
def test_luong_dot_follows_the_recurrence(mode):
    bias = -0.5
    layer = seq2seq.LuongMonotonicAttention(
        "dot", mode=mode, score_bias_init=bias
    )
    previous = np.zeros((2, 6), "float32")
    previous[:, 0] = 1.0
    for query in QUERIES:
        energies = np.einsum("bd,bsd->bs", query, MEMORY) + bias
        if mode == "hard":
            expected = _hard(np.where(MASK, energies, -1.0), previous)
        else:
            p_choose = _sigmoid(energies) * MASK
            expected = _expected(p_choose, previous)
        context, weights = layer(
            query, MEMORY, memory_mask=MASK, previous_alignments=previous
        )
        assert_allclose(weights, expected, atol=1e-5)
        assert_allclose(
            context, np.einsum("bs,bsd->bd", expected, MEMORY), atol=1e-5
        )
        assert np.all(to_numpy(weights)[~MASK] == 0)
        previous = to_numpy(weights)


def test_bahdanau_parallel_and_recursive_agree_with_the_reference():
    modes = {}
    for mode in ("parallel", "recursive"):
        layer = seq2seq.BahdanauMonotonicAttention(
            5, normalize=True, mode=mode, score_bias_init=1.0
        )
        layer(QUERIES[0], MEMORY)
        if modes:
            layer.set_weights(modes["parallel"][0].get_weights())
        modes[mode] = (layer, to_numpy(layer(QUERIES[0], MEMORY, MASK)[1]))
    layer = modes["parallel"][0]
    bias, wq, wk, v, b, g = (to_numpy(w) for w in layer.weights)
    hidden = np.tanh((QUERIES[0] @ wq)[:, None, :] + MEMORY @ wk + b)
    energies = hidden @ (g * v / np.linalg.norm(v)) + bias
    previous = np.eye(6, dtype="float32")[[0, 0]]
    expected = _expected(_sigmoid(energies) * MASK, previous)
    assert_allclose(modes["parallel"][1], expected, atol=1e-5)
    assert_allclose(modes["recursive"][1], expected, atol=1e-5)


def test_hard_decoding_is_one_hot_and_never_moves_back(rng):
    keras.utils.set_random_seed(1)
    cell = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(4),
        seq2seq.LuongMonotonicAttention(
            "general", mode="hard", score_bias_init=0.5
        ),
    )
    memory = rng.normal(size=(3, 6, 4)).astype("float32")
    mask = np.arange(6)[None] < np.array([[6], [4], [5]])
    states = cell.get_initial_state(memory=memory, memory_mask=mask)
    steps = []
    # Step by step, eagerly: a compiled decoding loop costs seconds on JAX.
    for inputs in rng.normal(size=(6, 3, 3)).astype("float32"):
        _, states = cell(inputs, states)
        steps.append(to_numpy(states[cell.alignments_index]))
    alignments = np.stack(steps, axis=1)
    assert np.all(alignments[~np.broadcast_to(mask[:, None], (3, 6, 6))] == 0)
    assert set(np.unique(alignments)) <= {0.0, 1.0}
    assert np.all(alignments.sum(-1) <= 1.0)
    assert alignments.sum() > 0
    for example in alignments:
        attended = example.sum(-1) > 0
        positions = example.argmax(-1)[attended]
        assert np.all(np.diff(positions) >= 0)
        # Once it stops attending it never starts again.
        assert np.all(np.diff(attended.astype(int)) <= 0)


def test_sigmoid_noise_only_in_training_and_seeded():
    def run(training, seed):
        layer = seq2seq.BahdanauMonotonicAttention(
            4, sigmoid_noise=1.0, sigmoid_noise_seed=seed
        )
        layer(QUERIES[0], MEMORY)
        layer.set_weights([np.float32(0.0)] + reference.get_weights()[1:])
        return to_numpy(layer(QUERIES[0], MEMORY, training=training)[1])

    reference = seq2seq.BahdanauMonotonicAttention(4)
    clean = to_numpy(reference(QUERIES[0], MEMORY)[1])
    assert_allclose(run(False, 3), clean, atol=1e-6)
    assert not np.allclose(run(True, 3), clean, atol=1e-3)
    assert_allclose(run(True, 3), run(True, 3), atol=1e-6)
    config = seq2seq.BahdanauMonotonicAttention(
        sigmoid_noise=1.0, score_bias_init=-1.0, mode="recursive"
    ).get_config()
    loaded = seq2seq.BahdanauMonotonicAttention.from_config(config)
    assert (loaded.sigmoid_noise, loaded.score_bias_init) == (1.0, -1.0)
    assert loaded.mode == "recursive" and "probability_fn" not in config


def test_sigmoid_noise_works_in_any_loop():
    """In a user's own `keras.layers.RNN` (on JAX too), as step by step.

    The seed comes from `get_initial_state`, outside the loop, and each
    step draws statelessly from it and its step count: fresh noise per
    call and per step, and no seed generator updated inside `scan` (on
    JAX, that gave the same noise at every call, or leaked a tracer).
    """
    cell = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(4),
        seq2seq.BahdanauMonotonicAttention(
            4, sigmoid_noise=1.0, sigmoid_noise_seed=2, score_bias_init=-1.0
        ),
    )
    memory, x = MEMORY[:, :5], np.ones((2, 3, 2), "float32")
    states = cell.get_initial_state(memory=memory)
    index = cell.noise_seed_index
    fresh = cell.get_initial_state(memory=memory)[index]
    assert not np.array_equal(to_numpy(fresh), to_numpy(states[index]))
    rnn = keras.layers.RNN(cell, return_sequences=True)
    outputs = to_numpy(rnn(x, initial_state=states, training=True))
    steps, step_states = [], states
    for t in range(3):
        output, step_states = cell(x[:, t], step_states, training=True)
        steps.append(to_numpy(output))
    assert_allclose(outputs, np.stack(steps, 1), atol=1e-5)
    assert_array_equal(to_numpy(step_states[index])[:, 2], [3.0, 3.0])
    # The noise is used, and the next step draws other noise.
    clean = cell(x[:, 0], states, training=False)[0]
    moved = list(states)
    moved[index] = ops.concatenate(
        [states[index][:, :2], ops.ones_like(states[index][:, 2:])], -1
    )
    assert not np.allclose(steps[0], to_numpy(clean))
    assert not np.allclose(
        steps[0], to_numpy(cell(x[:, 0], moved, training=True)[0])
    )


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: seq2seq.LuongMonotonicAttention(mode="soft"), "mode='soft'"),
        (
            lambda: seq2seq.BahdanauMonotonicAttention(sigmoid_noise=-1.0),
            "sigmoid_noise=-1.0",
        ),
        (
            lambda: seq2seq.BahdanauMonotonicAttention(
                mode="hard", sigmoid_noise=1.0
            ),
            "not allowed in hard mode",
        ),
        (
            lambda: seq2seq.LuongMonotonicAttention("location"),
            "score='location'",
        ),
        (lambda: seq2seq.LuongMonotonicAttention(scale=1), "scale=1"),
        (
            lambda: seq2seq.LuongMonotonicAttention(max_length=7),
            "takes no `max_length`.*Received: max_length=7",
        ),
        (
            lambda: seq2seq.BahdanauMonotonicAttention(
                probability_fn="hardmax"
            ),
            "Received: probability_fn='hardmax'",
        ),
        (
            lambda: seq2seq.LuongMonotonicAttention("dot")(QUERIES[:2], MEMORY),
            "one decoder step at a time",
        ),
    ],
)
def test_invalid_monotonic_arguments_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_initial_alignments_start_on_the_first_position():
    cell = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(4), seq2seq.LuongMonotonicAttention("dot")
    )
    states = cell.get_initial_state(memory=MEMORY)
    assert_array_equal(
        states[cell.alignments_index], np.eye(6, dtype="float32")[[0, 0]]
    )
