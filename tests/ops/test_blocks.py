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


@pytest.mark.parametrize("step", [_blocks.Normalised, _blocks.Running])
def test_each_online_step_equals_one_softmax_over_the_row(step, rng):
    """Both steps of the forward on every lane (each lane's kernel runs
    one of them: tests/ops/test_chunked.py). A row masked in the first
    block only, and a row masked in every block (its log-sum-exp stays
    `NEG`)."""
    s_np = rng.normal(size=(4, 9)).astype("float32") * 3
    s_np[1, :3] = _blocks.NEG
    s_np[3] = _blocks.NEG
    v_np = rng.normal(size=(9, 2)).astype("float32")
    s, v = ops.convert_to_tensor(s_np), ops.convert_to_tensor(v_np)
    # The largest logit of row 0 last: its running maximum grows.
    s_np[0, 8] = s_np[0].max() + 4.0
    s = ops.convert_to_tensor(s_np)
    carry = step.start((4, 1), 2, "float32")
    for start in (0, 3, 6):
        carry = step.merge(carry, s[:, start : start + 3], v[start : start + 3])
    lse, out = (ops.convert_to_numpy(t) for t in step.finish(carry))
    kept = s_np[:3]
    want = np_softmax(kept) @ v_np
    np.testing.assert_allclose(out[:3], want, rtol=1e-5, atol=1e-6)
    want = np.log(np.exp(kept.astype("float64")).sum(-1, keepdims=True))
    np.testing.assert_allclose(lse[:3], want, rtol=1e-5)
    assert lse[3, 0] == _blocks.NEG


def test_online_step_is_the_running_maximum_on_jax():
    import keras

    jax = keras.backend.backend() == "jax"
    want = _blocks.Running if jax else _blocks.Normalised
    assert _blocks.online_step() is want


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


@pytest.mark.parametrize(
    "sizes, limits",
    [
        ((3, 2), (2, 1)),
        ((2, 3), (None, 0)),
        ((2, 2), (None, 0)),
        ((4, 4), (0, None)),
        ((2, 2), (5, 5)),
        ((3, 2), (7, None)),
    ],
)
def test_whole_band_leaves_unmasked_exactly_the_blocks_inside_it(sizes, limits):
    """With `whole=True` the pairs of blocks the band keeps whole are not
    masked (a causal call's below its diagonal), every other one is."""
    (qc, kc), (left, right) = sizes, limits
    nq, nk = 4, 5
    visits = _blocks.Visits((nq, nk), sizes, limits, whole=True)
    q, k = np.arange(nq * qc)[:, None], np.arange(nk * kc)[None]
    inside = np.ones((nq * qc, nk * kc), bool)
    if left is not None:
        inside &= k >= q - left
    if right is not None:
        inside &= k <= q + right
    whole = inside.reshape(nq, qc, nk, kc).all(axis=(1, 3))
    for rows, walk in ((whole, visits.keys_of), (whole.T, visits.queries_of)):
        for index, row in enumerate(rows):
            first, last, block_of, full_of = walk(index)
            for n in range(_int(first), _int(last)):
                got = bool(ops.convert_to_numpy(full_of(n)))
                assert got == row[_int(block_of(n))], (index, n)
    open_band = _blocks.Visits((nq, nk), sizes, (None, None), whole=True)
    assert open_band.keys_of(0)[3](0) is None


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
