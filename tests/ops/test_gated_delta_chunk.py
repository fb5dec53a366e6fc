"""The chunked form of the gated delta rule on its own
(`ops/_gated_delta_chunk.py`): against the NumPy recurrence for chunk
sizes that divide the length, do not, and exceed it."""

import keras
import numpy as np
import pytest

from keras_attention.ops import _gated_delta_chunk
from tests import gated_delta_reference as reference


@pytest.mark.parametrize("chunk_size", [1, 4, 7, 32])
def test_every_chunk_size_gives_the_recurrence(rng, chunk_size):
    query, key, value, g, beta = reference.inputs(rng, 2, 20, 3, 3, 4, 5)
    state = rng.normal(size=(2, 3, 4, 5)).astype("float32")
    segment_ids = np.repeat([[0, 1, 2, 3]], [5, 4, 10, 1], axis=1)
    segment_ids = np.repeat(segment_ids, 2, axis=0)
    resets = np.zeros((2, 20), "float32")
    resets[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    expected, expected_state = reference.gated_delta_rule(
        query,
        key,
        value,
        g,
        beta,
        scale=1.0,
        initial_state=state,
        segment_ids=segment_ids,
    )
    out, final = _gated_delta_chunk.chunk_gated_delta_rule(
        *(keras.ops.convert_to_tensor(x) for x in (query, key, value, g, beta)),
        keras.ops.convert_to_tensor(state),
        keras.ops.convert_to_tensor(resets),
        chunk_size,
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(out), expected, atol=1e-5
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(final), expected_state, atol=1e-5
    )


@pytest.mark.parametrize("size", [1, 2, 3, 8, 13])
def test_doubling_inverse_equals_numpys(rng, size):
    """The chunk's `(I + L)⁻¹` by doubling blocks (JAX's path, run here
    on every backend): sizes that are powers of two and others, padded."""
    lower = np.tril(rng.normal(size=(2, 3, size, size)), -1) / 2
    inverse = _gated_delta_chunk._doubling_inverse(
        keras.ops.convert_to_tensor(lower.astype("float32"))
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(inverse),
        np.linalg.inv(np.eye(size) + lower),
        atol=1e-5,
    )
