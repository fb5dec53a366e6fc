"""layers/_in_place.py: within `writing_in_place()` a PyTorch cache write
changes the tensor it is given, with the values of `ops.slice_update`;
outside it, and on the other backends, the tensor given is unchanged."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.layers import _in_place
from tests.layer_basics import to_np


def _cache():
    return ops.zeros((2, 2, 5, 1, 3))


def _update(rand):
    return ops.convert_to_tensor(rand(2, 2, 1, 1, 3))


@pytest.mark.parametrize("index", [3, "tensor"])
def test_in_place_writes_the_values_of_slice_update(rand, index):
    if index == "tensor":
        index = ops.convert_to_tensor(3, "int32")
    update = _update(rand)
    start = [0, 0, index, 0, 0]
    want = to_np(ops.slice_update(_cache(), start, update))
    given = _cache()
    with _in_place.writing_in_place():
        got = _in_place.slice_update(given, start, update)
    np.testing.assert_array_equal(to_np(got), want)
    on_torch = keras.backend.backend() == "torch"
    assert (got is given) is on_torch
    # Only PyTorch's given tensor holds the write.
    assert bool(np.any(to_np(given))) is on_torch


def test_outside_it_the_given_tensor_is_unchanged(rand):
    given = _cache()
    got = _in_place.slice_update(given, [0, 0, 1, 0, 0], _update(rand))
    assert got is not given
    assert not np.any(to_np(given))
    assert np.any(to_np(got)[:, :, 1])


def test_it_ends_with_its_block(rand):
    with _in_place.writing_in_place():
        pass
    given = _cache()
    _in_place.slice_update(given, [0, 0, 0, 0, 0], _update(rand))
    assert not np.any(to_np(given))
