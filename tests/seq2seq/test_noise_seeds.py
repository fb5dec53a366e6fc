"""The seeds of the monotonic mechanisms' noise that the decoder cell
carries in its state: exact in the state's dtype, advanced per step,
and each step's noise a function of the seed, the step and the
mechanism alone."""

import numpy as np
from keras import ops

from keras_attention import seq2seq
from keras_attention.seq2seq import _noise_seeds
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import assert_array_equal
from tests.seq2seq._arrays import to_numpy

MEMORY = np.zeros((2, 5, 4), "float32")


def _mechanisms(noise=(1.0, 0.0, 1.0)):
    return [
        seq2seq.BahdanauMonotonicAttention(
            4, sigmoid_noise=n, sigmoid_noise_seed=i
        )
        for i, n in enumerate(noise)
    ]


def test_the_seed_range_is_what_the_state_dtype_holds_exactly():
    assert _noise_seeds.seed_range("float32") == 2048
    assert _noise_seeds.seed_range("float16") == 2048
    assert _noise_seeds.seed_range("bfloat16") == 256
    # Every integer below the range survives the cast to the dtype; the
    # range's next one does not.
    for dtype in ("float16", "bfloat16"):
        size = _noise_seeds.seed_range(dtype)
        held = ops.cast(ops.cast(np.arange(size + 2), dtype), "int32")
        assert_array_equal(to_numpy(held)[:size], np.arange(size))
        assert to_numpy(held)[size + 1] != size + 1


def test_the_step_count_advances_modulo_the_range():
    state = np.array([[3.0, 5.0, 7.0], [3.0, 5.0, 2047.0]], "float32")
    advanced = to_numpy(_noise_seeds.next_noise_seed(state))
    assert_array_equal(advanced, [[3.0, 5.0, 8.0], [3.0, 5.0, 0.0]])


def test_a_fresh_seed_is_one_row_for_the_whole_batch_at_step_zero():
    mechanisms = _mechanisms()
    seed = to_numpy(_noise_seeds.initial_noise_seed(mechanisms, 3, "float32"))
    assert seed.shape == (3, 3)
    assert_array_equal(seed, np.broadcast_to(seed[:1], (3, 3)))
    assert seed[0, 2] == 0 and np.all((0 <= seed) & (seed < 2048))
    assert _noise_seeds.noisy_mechanisms(mechanisms) == [True, False, True]


def test_the_noise_of_a_step_depends_on_its_seed_step_and_mechanism():
    mechanisms = _mechanisms()
    state = np.array([[11.0, 13.0, 4.0]] * 2, "float32")

    def noise(state, training=True):
        return _noise_seeds.step_noise(mechanisms, state, MEMORY, training)

    first, quiet, third = noise(state)
    assert quiet is None and first.shape == (2, 5)
    assert_allclose(to_numpy(first), to_numpy(noise(state)[0]), atol=0)
    # The noisy mechanisms of one step draw apart from each other.
    assert not np.allclose(to_numpy(first), to_numpy(third))
    # The next step, or another seed, draws anew.
    later = _noise_seeds.next_noise_seed(state)
    assert not np.allclose(to_numpy(first), to_numpy(noise(later)[0]))
    other = np.array([[11.0, 14.0, 4.0]] * 2, "float32")
    assert not np.allclose(to_numpy(first), to_numpy(noise(other)[0]))
    # Outside training, or with no noisy mechanism, there is none.
    assert noise(state, training=False) == [None] * 3
    silent = _noise_seeds.step_noise(
        _mechanisms((0.0, 0.0)), state, MEMORY, True
    )
    assert silent == [None, None]
