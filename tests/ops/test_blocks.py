"""ops/_blocks.py: the blocks of the chunked paths and the online
softmax's merge step, against the whole row at once."""

import numpy as np
import pytest
from keras import ops

from keras_attention.ops import _blocks
from tests.layer_basics import np_softmax


def test_to_blocks_pads_and_from_blocks_undoes_it(rng):
    x = rng.normal(size=(2, 7, 3)).astype("float32")
    blocks = _blocks.to_blocks(x, 3, 3)
    assert tuple(blocks.shape) == (3, 2, 3, 3)
    np.testing.assert_array_equal(ops.convert_to_numpy(blocks)[1], x[:, 3:6])
    np.testing.assert_array_equal(ops.convert_to_numpy(blocks)[2, :, 1:], 0)
    back = ops.convert_to_numpy(_blocks.from_blocks(blocks, 7))
    np.testing.assert_array_equal(back, x)
    assert _blocks.block_size(4, 3) == 3 and _blocks.block_size(4, 9) == 4


@pytest.mark.tensorflow_lane
def test_block_softmax_gives_the_softmax_and_its_log_sum_exp(rng):
    """Other lanes: tests/ops/test_chunked.py (the blocks' softmax is
    the chunked path's)."""
    s = rng.normal(size=(2, 5)).astype("float32")
    s[1, 0] = -200.0  # a first weight below 1e-30: the other branch
    weights, lse = _blocks.block_softmax(ops.convert_to_tensor(s))
    # float32 rounding: one ulp of 0.198 is a relative 1.5e-7 (seen on an
    # AVX2-only Zen 3, whose exp rounds otherwise than AVX-512's).
    np.testing.assert_allclose(
        ops.convert_to_numpy(weights), np_softmax(s), rtol=1e-6
    )
    want = np.log(np.exp(s.astype("float64")).sum(-1, keepdims=True))
    np.testing.assert_allclose(ops.convert_to_numpy(lse), want, rtol=1e-5)


@pytest.mark.tensorflow_lane
def test_merging_blocks_equals_one_softmax_over_the_row(rng):
    """Other lanes: tests/ops/test_chunked.py, chunked against dense."""
    s_np = rng.normal(size=(3, 8)).astype("float32")
    v = ops.convert_to_tensor(rng.normal(size=(8, 2)).astype("float32"))
    s = ops.convert_to_tensor(s_np)
    weights, lse = _blocks.block_softmax(s[:, :3])
    carry = (lse, ops.matmul(weights, v[:3]))
    for start in (3, 6):
        carry = _blocks.merge_block(
            carry, s[:, start : start + 3], v[start : start + 3]
        )
    lse, out = (ops.convert_to_numpy(t) for t in carry)
    want = np_softmax(s_np) @ ops.convert_to_numpy(v)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    want = np.log(np.exp(s_np.astype("float64")).sum(-1, keepdims=True))
    np.testing.assert_allclose(lse, want, rtol=1e-5)


def _int(x):
    return int(ops.convert_to_numpy(x))


@pytest.mark.parametrize(
    "sizes, limits",
    [
        ((3, 2), (2, 1)),
        ((2, 3), (None, 0)),
        ((4, 4), (0, None)),
        ((2, 2), (5, 5)),
    ],
)
def test_band_visits_exactly_the_blocks_that_meet_the_band(sizes, limits):
    (qc, kc), (left, right) = sizes, limits
    nq, nk = 4, 5
    visits = _blocks.Visits((nq, nk), sizes, limits)
    q, k = np.arange(nq * qc)[:, None], np.arange(nk * kc)[None]
    inside = np.ones((nq * qc, nk * kc), bool)
    if left is not None:
        inside &= k >= q - left
    if right is not None:
        inside &= k <= q + right
    meets = inside.reshape(nq, qc, nk, kc).any(axis=(1, 3))
    for i in range(nq):
        first, last, block_of, full_of = visits.keys_of(i)
        got = [_int(block_of(n)) for n in range(_int(first), _int(last))]
        assert got == np.flatnonzero(meets[i]).tolist(), i
        assert full_of(0) is None
    for j in range(nk):
        first, last, block_of, _ = visits.queries_of(j)
        got = [_int(block_of(n)) for n in range(_int(first), _int(last))]
        assert got == np.flatnonzero(meets[:, j]).tolist(), j


def test_block_mask_visits_the_non_empty_blocks_in_order():
    kinds = np.array([[0, 2, 1], [1, 0, 0], [2, 2, 0]], "int32")
    visits = _blocks.Visits((3, 3), (2, 2), kinds=kinds[None, None])
    for rows, walk in ((kinds, visits.keys_of), (kinds.T, visits.queries_of)):
        for index, row in enumerate(rows):
            first, last, block_of, full_of = walk(index)
            steps = range(_int(first), _int(last))
            assert [_int(block_of(n)) for n in steps] == np.flatnonzero(
                row
            ).tolist()
            full = [bool(ops.convert_to_numpy(full_of(n))) for n in steps]
            assert full == (row[row > 0] == 2).tolist()
