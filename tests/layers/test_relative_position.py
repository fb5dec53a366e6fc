"""`keras_attention.RelativePositionBias`: T5's bias by hand (exact
buckets), its config; the table's gradients through the blocks are in
tests/layers/test_mods.py and tests/ops/test_flex.py."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention


def _indices(length):
    # int32, as flex_attention passes them.
    q_idx = np.arange(length, dtype="int32").reshape(1, 1, -1, 1)
    kv_idx = np.arange(length, dtype="int32").reshape(1, 1, 1, -1)
    head = np.arange(2, dtype="int32").reshape(1, -1, 1, 1)
    return np.zeros((1, 1, 1, 1), "int32"), head, q_idx, kv_idx


@pytest.mark.parametrize("bidirectional", [True, False])
def test_short_distances_have_their_own_bucket(bidirectional):
    bias = keras_attention.RelativePositionBias(
        num_heads=2, num_buckets=32, bidirectional=bidirectional
    )
    table = np.arange(64, dtype="float32").reshape(32, 2)
    bias.set_weights([table])
    score = np.zeros((1, 2, 3, 3), "float32")
    got = ops.convert_to_numpy(bias(score, *_indices(3)))
    # T5: j - i = 0, -1, -2 -> buckets 0, 1, 2; with both directions
    # j - i = 1, 2 -> 16 + 1, 16 + 2 (half the buckets look ahead);
    # causal, every key ahead shares bucket 0.
    ahead = {1: 17, 2: 18} if bidirectional else {1: 0, 2: 0}
    for i in range(3):
        for j in range(3):
            bucket = i - j if j <= i else ahead[j - i]
            np.testing.assert_array_equal(got[0, :, i, j], table[bucket])


def test_config_round_trips_and_bad_distances_are_named():
    bias = keras_attention.RelativePositionBias(
        num_heads=3, num_buckets=8, max_distance=20, bidirectional=False
    )
    again = keras.layers.deserialize(keras.layers.serialize(bias))
    assert again.get_config() == bias.get_config()
    assert tuple(again.table.shape) == (8, 3)
    with pytest.raises(ValueError, match="max_distance=4, num_buckets=32"):
        keras_attention.RelativePositionBias(2, max_distance=4)
