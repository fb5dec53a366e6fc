"""ops/masks.py: the causal mask and combine_masks by hand."""

import keras
import numpy as np
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


@examples(30 if keras.backend.backend() == "tensorflow" else 10)
@given(case=mask_flags(per_head=True), heads_axis=st.booleans())
def test_combine_masks_equals_numpy_meaning_of_the_flags(case, heads_axis):
    tq, tk, flags = case
    if not heads_axis and flags.get("attention_mask", np.ones(1)).ndim == 4:
        heads_axis = True
    got = ka_ops.combine_masks(
        tq, tk, heads_axis=heads_axis, **_call_flags(flags)
    )
    _compare(got, reference_mask(tq, tk, flags, 2 if heads_axis else None))
