"""ops/checks.py: the shape and argument checks of the ops, each passing
what fits and naming what does not."""

import numpy as np
import pytest

from keras_attention.ops import checks


def test_broadcasts_to():
    logits = np.zeros((2, 3, 4))
    for mask in (None, np.ones((4,)), np.ones((2, 1, 4)), np.ones((3, 1))):
        checks.broadcasts_to("f", mask, logits)
    for mask in (np.ones((5,)), np.ones((1, 2, 3, 4)), np.ones((2, 2, 4))):
        with pytest.raises(ValueError, match=r"f needs a `mask`.*mask.shape"):
            checks.broadcasts_to("f", mask, logits)


def test_attention_shapes_and_weights_fit_values():
    q, k, v = np.zeros((2, 3, 4)), np.zeros((2, 5, 4)), np.zeros((2, 5, 6))
    checks.attention_shapes(q, k, v, same_depth=True)
    checks.attention_shapes(q, np.zeros((1, 5, 7)), v, same_depth=False)
    with pytest.raises(ValueError, match="of one rank, at least 2"):
        checks.attention_shapes(q, k, np.zeros((5, 6)), same_depth=True)
    with pytest.raises(ValueError, match="as many keys as values"):
        checks.attention_shapes(q, k, np.zeros((2, 4, 6)), same_depth=True)
    with pytest.raises(ValueError, match="same depth"):
        checks.attention_shapes(q, np.zeros((2, 5, 7)), v, same_depth=True)
    checks.weights_fit_values(np.zeros((2, 3, 5)), v)
    with pytest.raises(ValueError, match="one logit per value"):
        checks.weights_fit_values(np.zeros((2, 3, 4)), v)


def test_lengths_chunk_sizes_and_dtypes():
    checks.lengths(query_length=3, key_length=0, left=None)
    with pytest.raises(ValueError, match="query_length=-1"):
        checks.lengths(query_length=-1)
    with pytest.raises(ValueError, match="key_length=None"):
        checks.lengths(key_length=None)
    assert checks.chunk_sizes(2) == 2
    with pytest.raises(ValueError, match="chunk_size=0"):
        checks.chunk_sizes(0)
    checks.dtype_name("dtype", "float16")
    with pytest.raises(ValueError, match="dtype='floaty'"):
        checks.dtype_name("dtype", "floaty")
