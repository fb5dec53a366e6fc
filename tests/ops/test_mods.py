"""`keras_attention.ops.mods`: each mod against a NumPy reference written
from its paper, hand values, and the configs of the mods."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import ops as ka_ops
from keras_attention.ops import mods

B, H, TQ, TK = 2, 4, 5, 7


def grid():
    """Index arrays `(B, H, Tq, Tk)` as NumPy, and as broadcasting tensors."""
    b, h, i, j = np.meshgrid(
        np.arange(B), np.arange(H), np.arange(TQ), np.arange(TK), indexing="ij"
    )
    tensors = (
        ops.reshape(ops.arange(B), (B, 1, 1, 1)),
        ops.reshape(ops.arange(H), (1, H, 1, 1)),
        ops.reshape(ops.arange(TQ), (1, 1, TQ, 1)),
        ops.reshape(ops.arange(TK), (1, 1, 1, TK)),
    )
    return (b, h, i, j), tensors


def _mask(mod):
    _, idx = grid()
    out = ops.convert_to_numpy(mod(*idx))
    return np.broadcast_to(out, (B, H, TQ, TK)).astype(bool)


def score_of(mod, s):
    _, idx = grid()
    return ops.convert_to_numpy(mod(ops.convert_to_tensor(s), *idx))


def test_mask_mods_match_numpy():
    (b, h, i, j), _ = grid()
    segments = np.array([[0, 0, 1, 1, 1, 2, 2], [0, 1, 1, 1, 1, 1, 1]])
    lengths = np.array([3, 7])
    explicit = np.random.default_rng(0).random((B, TQ, TK)) > 0.5
    cases = [
        (mods.causal(), i >= j),
        (mods.sliding_window(2), np.abs(i - j) < 2),
        (mods.prefix_lm(3), (j < 3) | (i >= j)),
        (mods.document(segments), segments[b, i] == segments[b, j]),
        (mods.padding(lengths), j < lengths[b]),
        (mods.band(1, 2), (j - i >= -1) & (j - i <= 2)),
        (mods.band(right=0), j <= i),
        (mods.boolean_mask(explicit[:, None]), explicit[b, i, j]),
        (mods.streaming(2), i - j < 2),
        (mods.streaming(2, num_sink_tokens=1), (i - j < 2) | (j < 1)),
    ]
    for mod, want in cases:
        np.testing.assert_array_equal(_mask(mod), want, err_msg=repr(mod))


def test_combined_masks_match_numpy():
    (_, _, i, j), _ = grid()
    both = ka_ops.and_masks(mods.causal(), mods.sliding_window(3))
    either = ka_ops.or_masks(mods.prefix_lm(0), mods.sliding_window(2))
    np.testing.assert_array_equal(_mask(both), (i >= j) & (np.abs(i - j) < 3))
    np.testing.assert_array_equal(_mask(either), (i >= j) | (np.abs(i - j) < 2))
    assert _mask(ka_ops.and_masks()).all()
    assert not _mask(ka_ops.or_masks()).any()


def test_alibi_slopes_are_the_papers():
    # Press et al. 2022: for 8 heads the geometric sequence 1/2 ... 1/256.
    np.testing.assert_allclose(
        mods.alibi_slopes(8), [2.0**-k for k in range(1, 9)]
    )
    np.testing.assert_allclose(
        mods.alibi_slopes(4), [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]
    )


def test_score_mods_match_numpy(rng):
    (b, h, i, j), _ = grid()
    s = rng.normal(size=(B, H, TQ, TK)).astype("float32") * 5
    slopes = 2.0 ** (-8.0 * (np.arange(H) + 1) / H)
    np.testing.assert_allclose(
        score_of(mods.alibi(H), s), s - slopes[h] * np.abs(i - j), atol=1e-5
    )
    np.testing.assert_allclose(
        score_of(mods.soft_cap(2.5), s), 2.5 * np.tanh(s / 2.5), atol=1e-5
    )
    tensor = rng.normal(size=(1, H, 1, TK)).astype("float32")
    np.testing.assert_allclose(
        score_of(mods.bias(tensor), s), s + tensor[0, h, 0, j], atol=1e-6
    )
    chained = mods.chain(mods.alibi(H), mods.soft_cap(2.5))
    np.testing.assert_allclose(
        score_of(chained, s),
        2.5 * np.tanh((s - slopes[h] * np.abs(i - j)) / 2.5),
        atol=1e-5,
    )


def test_mods_with_configs_round_trip_through_keras_serialization():
    for mod in (
        mods.causal(),
        mods.sliding_window(4),
        mods.prefix_lm(2),
        mods.band(3, None),
        mods.alibi(8),
        mods.soft_cap(30.0),
        ka_ops.and_masks(mods.causal(), mods.sliding_window(4)),
        mods.chain(mods.alibi(2), mods.soft_cap(5.0)),
        mods.streaming(4, num_sink_tokens=2),
    ):
        config = keras.saving.serialize_keras_object(mod)
        again = keras.saving.deserialize_keras_object(config)
        assert type(again) is type(mod)
        assert again.get_config() == mod.get_config()


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: mods.sliding_window(0), "window=0"),
        (lambda: mods.prefix_lm(-1), "prefix_length=-1"),
        (lambda: mods.alibi(0), "num_heads=0"),
        (lambda: mods.soft_cap(0.0), "cap=0.0"),
        (lambda: mods.soft_cap("big"), "cap='big'"),
        (
            lambda: mods.relative_position_bias(np.zeros((4, 2)), 8),
            "table.shape=",
        ),
        (lambda: mods.bias(np.zeros((3, 3))), "tensor.shape="),
        (lambda: mods.band(left=-1), "left=-1"),
        (lambda: mods.boolean_mask(np.ones((2, 3), bool)), "mask.shape="),
        (lambda: ka_ops.and_masks(3), "Received: mask_mod=3"),
        (lambda: mods.streaming(0), "window=0"),
        (lambda: mods.streaming(2, -1), "num_sink_tokens=-1"),
    ],
)
def test_bad_mod_arguments_name_the_value(build, match):
    with pytest.raises((ValueError, TypeError), match=match):
        build()


def test_a_shifted_band_keeps_its_limits_shifted_an_and_of_bands_too():
    """Queries from position 5: query `q` keeps keys `q + 5 - left ..= q
    + 5 + right`, so the band's limits are `(left - 5, right + 5)`; an
    AND of mods is shifted mod by mod, so an AND of bands keeps the band
    of its merged limits (`masks.band_limits`)."""
    band_limits = ka_ops.masks.band_limits
    window = ka_ops.and_masks(mods.causal(), mods.sliding_window(3))
    assert band_limits(window) == (2, 0)
    assert mods.shifted(mods.causal(), 5).limits == (None, 5)
    assert band_limits(mods.shifted(window, 5)) == (-3, 5)
    q, kv = ops.arange(4)[:, None], ops.arange(12)[None]
    kept = ops.convert_to_numpy(mods.shifted(window, 5)(0, 0, q, kv))
    offsets = np.arange(12)[None] - np.arange(4)[:, None]
    np.testing.assert_array_equal(kept, (offsets >= 3) & (offsets <= 5))
    either = ka_ops.or_masks(mods.causal(), mods.sliding_window(3))
    assert band_limits(mods.shifted(either, 5)) is None
    kept = ops.convert_to_numpy(mods.shifted(either, 5)(0, 0, q, kv))
    both_sides = (offsets >= 3) & (offsets <= 7)  # the window is symmetric
    np.testing.assert_array_equal(kept, (offsets <= 5) | both_sides)


def test_shifted_reads_a_table_of_key_positions_and_offsets_per_sequence():
    """A cache's keys out of order (`key_positions`, `(Tk,)` or per
    sequence `(B, Tk)`) and a first position per sequence (`(B,)`): the
    mod sees `q_idx + offset[b]` and `positions[b, kv_idx]`; a band then
    has no limits (its blocks cannot be skipped by arithmetic)."""
    (b, _, i, j), idx = grid()
    offsets = np.array([2, 5])
    table = np.random.default_rng(1).permutation(TK * B).reshape(B, TK)
    for positions, looked_up in ((table[0], table[0][j]), (table, table[b, j])):
        mod = mods.shifted(mods.causal(), offsets, key_positions=positions)
        assert mod.limits is None
        want = i + offsets[b] >= looked_up
        np.testing.assert_array_equal(_mask(mod), want)
    alibi = mods.shifted(mods.alibi(H), offsets, key_positions=table)
    s = np.zeros((B, H, TQ, TK), "float32")
    slopes = np.array(mods.alibi_slopes(H))[None, :, None, None]
    want = -slopes * np.abs(i + offsets[b] - table[b, j])
    np.testing.assert_allclose(score_of(alibi, s), want, rtol=1e-6)


def plain_numbers(mod):
    """The plain numbers left in a mod's `scalars`, its parts' included."""
    parts = [getattr(mod, name, ()) for name in ("mask_mods", "score_mods")]
    inner = [mod.mod] if hasattr(mod, "mod") else []
    found = [
        getattr(mod, name)
        for name in getattr(mod, "scalars", ())
        if isinstance(getattr(mod, name), (int, float))
    ]
    for part in [*parts[0], *parts[1], *inner]:
        found += plain_numbers(part)
    return found


def test_with_scalars_converts_every_number_and_keeps_the_mod():
    """`with_scalars(convert)`: the mask and the scores unchanged, no
    plain number left (PyTorch's compiled FlexAttention would compile
    again for each), the original untouched; a user's function as is."""
    from keras_attention.ops._mod_base import with_scalars

    masks = [
        ka_ops.and_masks(mods.causal(), mods.sliding_window(3)),
        ka_ops.or_masks(mods.prefix_lm(2), mods.band(left=1, right=2)),
        mods.streaming(2, num_sink_tokens=1),
        mods.shifted(mods.band(left=2), query_offset=2, key_offset=1),
    ]
    for mod in masks:
        converted = with_scalars(mod, ops.convert_to_tensor)
        np.testing.assert_array_equal(_mask(converted), _mask(mod))
        assert plain_numbers(mod) and not plain_numbers(converted), mod
    scores = mods.chain(mods.alibi(H), mods.soft_cap(2.5))
    converted = with_scalars(scores, ops.convert_to_tensor)
    s = np.random.default_rng(0).normal(size=(B, H, TQ, TK)) * 4
    np.testing.assert_allclose(
        score_of(converted, s.astype("float32")),
        score_of(scores, s.astype("float32")),
        rtol=1e-6,
    )
    assert plain_numbers(scores) and not plain_numbers(converted)

    def own(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    assert with_scalars(own, ops.convert_to_tensor) is own
