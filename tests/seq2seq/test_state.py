"""StateLayout: the decoder cell's state list, packed and unpacked by name."""

import keras
import numpy as np
import pytest

from keras_attention import seq2seq
from keras_attention.seq2seq.state import DecoderState
from keras_attention.seq2seq.state import StateLayout
from tests.layer_basics import normal_arrays
from tests.seq2seq._arrays import assert_allclose

(MEMORY,) = normal_arrays(3, (2, 5, 6))


def _named_state(keys):
    """A `DecoderState` whose entries are strings: positions show."""
    return DecoderState(
        cell_states=["h", "c"],
        attention="a",
        alignments=["α0", "α1"],
        noise_seed="seed",
        keys=keys,
        memory="memory",
        memory_mask="mask",
        constants=None,
    )


@pytest.mark.backend_independent
def test_layout_of_two_cell_states_two_mechanisms_noise_and_one_key():
    layout = StateLayout(2, 2, noisy=True, keyed=[False, True])
    packed = layout.pack(_named_state([None, "k1"]))
    # By hand: [h, c, a, α0, α1, seed, k1, memory, mask].
    assert packed == ["h", "c", "a", "α0", "α1", "seed", "k1", "memory", "mask"]
    assert layout.size == len(packed) == 9
    assert layout.attention_index == 2
    assert layout.alignments_indices == [3, 4]
    assert layout.noise_seed_index == 5
    assert layout.keys_indices == [None, 6]
    assert layout.num_constant_states == 3
    assert layout.num_varying_states == 6
    assert layout.memory(packed) == "memory"
    assert layout.alignments(packed) == "α0"


@pytest.mark.backend_independent
def test_unpack_inverts_pack():
    layout = StateLayout(2, 2, noisy=True, keyed=[True, True])
    state = _named_state(["k0", "k1"])
    unpacked = layout.unpack(layout.pack(state))
    assert unpacked._replace(constants=None) == state
    assert unpacked.constants == ["k0", "k1", "memory", "mask"]
    assert layout.pack_step(unpacked) == layout.pack(state)


@pytest.mark.backend_independent
def test_layout_without_noise_has_no_seed():
    layout = StateLayout(1, 1, noisy=False, keyed=[False])
    state = _named_state([None])._replace(
        cell_states=["h"], alignments=["α0"], noise_seed=None
    )
    assert layout.pack(state) == ["h", "a", "α0", "memory", "mask"]
    assert layout.noise_seed_index is None
    assert layout.unpack(layout.pack(state)).noise_seed is None


@pytest.mark.backend_independent
def test_list_without_the_keys_unpacks_with_none_keys():
    # The layout before the keys were carried: [h, a, α0, memory, mask].
    layout = StateLayout(1, 1, noisy=False, keyed=[True])
    unpacked = layout.unpack(["h", "a", "α0", "memory", "mask"])
    assert unpacked.keys == [None]
    assert unpacked.constants == ["memory", "mask"]
    assert unpacked.memory == "memory"


@pytest.mark.backend_independent
def test_build_shapes_put_the_memory_where_the_cell_reads_it():
    layout = StateLayout(1, 1, noisy=False, keyed=[True])
    shapes = layout.build_shapes((2, 5, 6))
    assert len(shapes) == layout.size
    assert layout.memory(shapes) == (2, 5, 6)


def test_cell_initial_state_follows_its_layout():
    cell = seq2seq.AttentionDecoderCell(
        keras.layers.LSTMCell(4),
        [
            seq2seq.BahdanauMonotonicAttention(3, sigmoid_noise=1.0),
            seq2seq.LuongAttention("general"),
        ],
    )
    states = cell.get_initial_state(memory=MEMORY)
    layout = cell.state_layout
    assert len(states) == layout.size == len(cell.state_size)
    assert layout.keyed == [True, False]
    unpacked = layout.unpack(states)
    assert_allclose(unpacked.memory, MEMORY)
    assert_allclose(unpacked.memory_mask, np.ones((2, 5)))
    assert tuple(unpacked.noise_seed.shape) == (2, 3)
    assert tuple(unpacked.keys[0].shape) == (2, 5, 3)
    assert unpacked.keys[1] is None
    assert cell.alignments_index == layout.alignments_index == 3
    assert cell.keys_indices == layout.keys_indices == [6, None]
