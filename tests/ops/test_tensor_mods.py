"""ops/_tensor_mods.py: the mods of one call's tensors. T5's relative
position bias against a plain-Python transcription of its buckets, and
their having no config (documents, padding, the bias and the explicit
mask are checked against NumPy with the other mods in test_mods.py)."""

import math

import numpy as np
import pytest
from keras import ops

from keras_attention.ops import mods
from tests.ops.test_mods import TK
from tests.ops.test_mods import TQ
from tests.ops.test_mods import B
from tests.ops.test_mods import H
from tests.ops.test_mods import grid
from tests.ops.test_mods import score_of


def t5_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """One bucket, as Raffel et al. 2020 (section 2.1) and Mesh TensorFlow's
    `_relative_position_bucket` define it, in plain Python."""
    ret, n = 0, -relative_position
    if bidirectional:
        num_buckets //= 2
        ret += num_buckets if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    large = max_exact + int(
        math.log(n / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    )
    return ret + min(large, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_position_bias_matches_t5(rng, bidirectional):
    (b, h, i, j), _ = grid()
    relative = np.arange(-200, 201)
    want = [t5_bucket(r, bidirectional, 32, 128) for r in relative]
    got = mods.relative_position_buckets(relative, 32, 128, bidirectional)
    np.testing.assert_array_equal(ops.convert_to_numpy(got), want)
    table = rng.normal(size=(8, H)).astype("float32")
    buckets = np.vectorize(lambda r: t5_bucket(r, bidirectional, 8, 16))(j - i)
    s = rng.normal(size=(B, H, TQ, TK)).astype("float32")
    mod = mods.relative_position_bias(table, 8, 16, bidirectional)
    np.testing.assert_allclose(
        score_of(mod, s), s + table[buckets, h], atol=1e-6
    )


def test_t5_buckets_by_hand():
    # 32 buckets, both directions: 0..7 exact for keys before the query
    # (relative position <= 0), 16..23 after; far keys share 15 and 31.
    got = mods.relative_position_buckets(
        np.array([0, -1, -7, 1, 7, -1000, 1000]), 32, 128, True
    )
    np.testing.assert_array_equal(
        ops.convert_to_numpy(got), [0, 1, 7, 17, 23, 15, 31]
    )


def test_mods_of_one_call_have_no_config():
    with pytest.raises(TypeError, match="pass it to the layer's call"):
        mods.document(np.zeros((1, 3), "int32")).get_config()
    with pytest.raises(TypeError, match="pass it to the layer's call"):
        mods.bias(np.zeros((1, 1, 3, 3), "float32")).get_config()
