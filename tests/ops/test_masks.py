"""ops/masks.py: the mask vocabulary by hand and against NumPy."""

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from keras import ops

from keras_attention import ops as ka_ops
from tests.profiles import examples


def test_causal_mask_is_lower_triangular():
    got = ops.convert_to_numpy(ka_ops.causal_mask(3, 5))
    np.testing.assert_array_equal(got, np.tril(np.ones((3, 5), bool)))


def test_combine_masks_ands_every_mask():
    q = np.array([[True, True, False]])
    v = np.array([[True, False, True, True]])
    a = np.ones((1, 3, 4), bool)
    a[0, 0, 3] = False
    got = ops.convert_to_numpy(
        ka_ops.combine_masks(
            3,
            4,
            query_mask=q,
            value_mask=v,
            attention_mask=a,
            use_causal_mask=True,
        )
    )
    want = q[:, :, None] & v[:, None, :] & a & np.tril(np.ones((3, 4), bool))
    np.testing.assert_array_equal(np.broadcast_to(got, want.shape), want)
    assert ka_ops.combine_masks(3, 4) is None


def reference_mask(tq, tk, flags, heads=None):
    """What the layers' mask flags mean, in NumPy: `(B, [H,] Tq, Tk)`.

    Written from the flags' documented meaning, not from the code: a
    padding mask hides a query row or a key column, `attention_mask` is
    ANDed as given, causal is `j <= i`, `sliding_window=w` is `|i - j| <
    w`, `band=(left, right)` is `i - left <= j <= i + right`.
    """
    batch = flags["batch"]
    keep = np.ones((batch, tq, tk), bool)
    i, j = np.indices((tq, tk))
    if flags.get("query_mask") is not None:
        keep &= flags["query_mask"][:, :, None]
    for name in ("value_mask", "key_mask"):
        if flags.get(name) is not None:
            keep &= flags[name][:, None, :]
    explicit = flags.get("attention_mask")
    if explicit is not None and explicit.ndim < 4:
        keep &= explicit
    if flags.get("use_causal_mask"):
        keep &= j <= i
    if flags.get("sliding_window") is not None:
        keep &= np.abs(i - j) < flags["sliding_window"]
    if flags.get("band") is not None:
        left, right = flags["band"]
        if left is not None:
            keep &= j >= i - left
        if right is not None:
            keep &= j <= i + right
    if heads is None:
        return keep
    keep = keep[:, None]
    if explicit is not None and explicit.ndim == 4:
        keep = keep & explicit
    return np.broadcast_to(keep, (batch, heads, tq, tk))


@st.composite
def mask_flags(draw, per_head=False):
    """Random flags of one call: `(tq, tk, flags)`; every flag optional."""
    batch = draw(st.integers(1, 2), label="batch")
    tq = draw(st.integers(1, 6), label="tq")
    tk = draw(st.integers(1, 6), label="tk")
    seed = draw(st.integers(0, 2**16), label="seed")
    rng = np.random.default_rng(seed)
    flags = {"batch": batch}

    def maybe(name, shape):
        if draw(st.booleans(), label=name):
            flags[name] = rng.random(shape) < 0.7

    maybe("query_mask", (batch, tq))
    maybe("value_mask", (batch, tk))
    maybe("key_mask", (batch, tk))
    explicit = draw(
        st.sampled_from([None, 2, 3, 4] if per_head else [None, 2, 3])
    )
    if explicit is not None:
        shape = {2: (tq, tk), 3: (batch, tq, tk), 4: (batch, 2, tq, tk)}
        flags["attention_mask"] = rng.random(shape[explicit]) < 0.7
    flags["use_causal_mask"] = draw(st.booleans(), label="causal")
    window = draw(st.one_of(st.none(), st.integers(1, 7)), label="window")
    if window is not None:
        flags["sliding_window"] = window
    side = st.one_of(st.none(), st.integers(0, 6))
    band = draw(st.one_of(st.none(), st.tuples(side, side)), label="band")
    if band is not None:
        flags["band"] = band
    return tq, tk, flags


def _call_flags(flags):
    return {k: v for k, v in flags.items() if k != "batch"}


def _compare(got, want):
    if got is None:
        assert want.all()
        return
    got = ops.convert_to_numpy(got)
    assert got.ndim <= want.ndim
    np.testing.assert_array_equal(np.broadcast_to(got, want.shape), want)


# Off TensorFlow every drawn shape compiles its ops anew: fewer cases.
@examples(30 if keras.backend.backend() == "tensorflow" else 4)
@given(case=mask_flags(per_head=True), heads_axis=st.booleans())
def test_combine_masks_equals_numpy_meaning_of_the_flags(case, heads_axis):
    tq, tk, flags = case
    if not heads_axis and flags.get("attention_mask", np.ones(1)).ndim == 4:
        heads_axis = True
    got = ka_ops.combine_masks(
        tq, tk, heads_axis=heads_axis, **_call_flags(flags)
    )
    _compare(got, reference_mask(tq, tk, flags, 2 if heads_axis else None))


def _flags_of(flags):
    return ka_ops.masks.attention_masks(**_call_flags(flags))


@examples(20 if keras.backend.backend() == "tensorflow" else 3)
@given(case=mask_flags(per_head=True))
def test_mask_mod_of_the_flags_equals_numpy_meaning(case):
    """The flex path's mask mod, on `flex_attention`'s index tensors."""
    tq, tk, flags = case
    mod = _flags_of(flags).mask_mod()
    b, h, q, kv = (
        ops.reshape(ops.arange(flags["batch"]), (-1, 1, 1, 1)),
        ops.reshape(ops.arange(2), (1, -1, 1, 1)),
        ops.reshape(ops.arange(tq), (1, 1, -1, 1)),
        ops.reshape(ops.arange(tk), (1, 1, 1, -1)),
    )
    got = None if mod is None else mod(b, h, q, kv)
    _compare(got, reference_mask(tq, tk, flags, heads=2))


@examples(10 if keras.backend.backend() == "tensorflow" else 3)
@given(
    case=mask_flags(),
    qc=st.integers(1, 4),
    kc=st.integers(1, 4),
)
def test_block_masks_and_limits_equal_numpy_meaning(case, qc, kc):
    """What the chunked path does: each block's mask from the flags'
    `AttentionMasks` at the block's offsets, stitched, is the whole mask;
    and no pair outside the band's limits is kept (blocks there may be
    skipped)."""
    tq, tk, flags = case
    flags.pop("attention_mask", None)  # the chunked path takes none
    masks = _flags_of(flags)
    want = reference_mask(tq, tk, flags, heads=1)
    got = np.zeros_like(want)
    for r in range(0, tq, qc):
        for c in range(0, tk, kc):
            rows, cols = min(qc, tq - r), min(kc, tk - c)
            block = ka_ops.masks.AttentionMasks(
                query_mask=_slice(masks.query_mask, r, rows),
                key_mask=_slice(masks.key_mask, c, cols),
                band=masks.band,
            ).dense(rows, cols, heads_axis=True, query_offset=r, key_offset=c)
            if block is not None:
                shape = (flags["batch"], 1, rows, cols)
                block = np.broadcast_to(ops.convert_to_numpy(block), shape)
            else:
                block = True
            got[:, :, r : r + rows, c : c + cols] = block
    np.testing.assert_array_equal(got, want)
    left, right = masks.limits
    i, j = np.indices((tq, tk))
    outside = np.zeros((tq, tk), bool)
    if left is not None:
        outside |= j < i - left
    if right is not None:
        outside |= j > i + right
    assert not want[..., outside].any()


def _slice(mask, start, size):
    return None if mask is None else mask[:, start : start + size]


def test_flags_merge_into_one_band():
    masks = ka_ops.masks.attention_masks(
        use_causal_mask=True, sliding_window=3, band=(1, None)
    )
    assert masks.limits == (1, 0)
    assert ka_ops.masks.attention_masks(sliding_window=3).limits == (2, 2)
    assert ka_ops.masks.attention_masks().band is None
    assert ka_ops.masks.merge_limits((2, None), None, (None, 1)) == (2, 1)


def test_every_call_with_the_same_rules_shares_one_band():
    attention_masks = ka_ops.masks.attention_masks
    first = attention_masks(use_causal_mask=True).band
    assert first == ka_ops.mods.band(None, 0)
    assert attention_masks(use_causal_mask=True).band is first
    assert attention_masks(band=(None, 0)).band is first
    assert attention_masks(sliding_window=3).band is not first
    # A bad band is still refused in the band's words, hashable or not,
    # also where it equals a band made before (`1.0 == True == 1`).
    assert attention_masks(band=(1, 0)).limits == (1, 0)
    for bad in ((1.5, None), ([1], None), (1.0, 0), (True, 0)):
        with pytest.raises(ValueError, match="Received: left="):
            attention_masks(band=bad)


def test_a_band_given_is_read_by_its_limits_and_other_mods_refused():
    masks = ka_ops.masks.AttentionMasks(band=ka_ops.mods.causal())
    flags = ka_ops.masks.attention_masks(use_causal_mask=True)
    assert masks.limits == flags.limits == (None, 0)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(masks.dense(3, 4)),
        ops.convert_to_numpy(flags.dense(3, 4)),
    )
    # A mask mod that is no band would be lost by `dense`: refused.
    with pytest.raises(ValueError, match="Received: band=PrefixLM"):
        ka_ops.masks.AttentionMasks(band=ka_ops.mods.prefix_lm(2))


def test_mods_declare_their_band_limits():
    mods = ka_ops.mods
    assert mods.causal().limits == (None, 0)
    assert mods.sliding_window(4).limits == (3, 3)
    assert mods.band(2, None).limits == (2, None)
    assert mods.prefix_lm(2).limits is None


def test_bounds_merge_the_band_and_the_mask_mods_that_are_bands():
    mods, masks = ka_ops.mods, ka_ops.masks
    document = mods.document(np.zeros((1, 8), "int32"))
    window = ka_ops.and_masks(mods.causal(), mods.sliding_window(4))
    assert masks.AttentionMasks().bounds == (None, None)
    assert masks.AttentionMasks(mask_mods=(window,)).bounds == (3, 0)
    # The band's and the mods' limits, the tighter side of each.
    both = masks.AttentionMasks(
        band=mods.band(None, 0), mask_mods=(mods.sliding_window(6), document)
    )
    assert both.bounds == (5, 0)
    # An OR of bands or a mod that is no band bounds nothing.
    either = ka_ops.or_masks(mods.causal(), mods.sliding_window(4))
    assert masks.AttentionMasks(mask_mods=(either,)).bounds == (None, None)
    assert masks.AttentionMasks(mask_mods=(document,)).bounds == (None, None)


def test_and_all_skips_nones():
    a = np.array([True, True, False])
    b = np.array([[True], [False]])
    got = ops.convert_to_numpy(ka_ops.masks.and_all(None, a, None, b))
    np.testing.assert_array_equal(got, a & b)
    assert ka_ops.masks.and_all() is None
    assert ka_ops.masks.and_all(None, None) is None


def test_a_band_on_a_grid_per_sequence_reads_its_positions():
    """`position_mask` with one query offset per sequence or a table of
    key positions per sequence gives `(B, Tq, Tk)`; `dense` ANDs it."""
    offsets = np.array([0, 3])
    positions = np.array([[2, 0, 1], [5, -1, 3]])
    got = ops.convert_to_numpy(
        ka_ops.masks.position_mask(
            ka_ops.mods.causal(), 2, 3, offsets, key_positions=positions
        )
    )
    rows = offsets[:, None, None] + np.arange(2)[None, :, None]
    np.testing.assert_array_equal(got, rows >= positions[:, None, :])
    masks = ka_ops.masks.attention_masks(
        key_mask=positions >= 0, use_causal_mask=True
    )
    dense = ops.convert_to_numpy(
        masks.dense(2, 3, query_offset=offsets, key_positions=positions)
    )
    want = (rows >= positions[:, None, :]) & (positions >= 0)[:, None, :]
    np.testing.assert_array_equal(dense, want)
