"""NumPy views of backend tensors, for assertions on any backend.

`np.asarray` fails on a PyTorch tensor that requires grad (every output of
a layer with weights), so the seq2seq tests compare through
`keras.ops.convert_to_numpy`.
"""

import keras
import numpy as np


def to_numpy(x):
    """A NumPy array of a tensor, a variable, an array, a list or a scalar."""
    if isinstance(x, keras.Variable):
        x = x.value
    return np.asarray(keras.ops.convert_to_numpy(x))


def assert_allclose(actual, desired, **kwargs):
    np.testing.assert_allclose(to_numpy(actual), to_numpy(desired), **kwargs)


def assert_array_equal(actual, desired, **kwargs):
    np.testing.assert_array_equal(to_numpy(actual), to_numpy(desired), **kwargs)
