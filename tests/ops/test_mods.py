"""`keras_attention.ops.mods`: each mod against a NumPy reference written
from its paper, hand values, and the configs of the mods."""

import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import ops as ka_ops
from keras_attention.ops import mods

B, H, TQ, TK = 2, 4, 5, 7


def _grid():
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
    _, idx = _grid()
    out = ops.convert_to_numpy(mod(*idx))
    return np.broadcast_to(out, (B, H, TQ, TK)).astype(bool)


def _score(mod, s):
    _, idx = _grid()
    return ops.convert_to_numpy(mod(ops.convert_to_tensor(s), *idx))


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


def test_mask_mods_match_numpy():
    (b, h, i, j), _ = _grid()
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
    ]
    for mod, want in cases:
        np.testing.assert_array_equal(_mask(mod), want, err_msg=repr(mod))


def test_combined_masks_match_numpy():
    (_, _, i, j), _ = _grid()
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
    (b, h, i, j), _ = _grid()
    s = rng.normal(size=(B, H, TQ, TK)).astype("float32") * 5
    slopes = 2.0 ** (-8.0 * (np.arange(H) + 1) / H)
    np.testing.assert_allclose(
        _score(mods.alibi(H), s), s - slopes[h] * np.abs(i - j), atol=1e-5
    )
    np.testing.assert_allclose(
        _score(mods.soft_cap(2.5), s), 2.5 * np.tanh(s / 2.5), atol=1e-5
    )
    tensor = rng.normal(size=(1, H, 1, TK)).astype("float32")
    np.testing.assert_allclose(
        _score(mods.bias(tensor), s), s + tensor[0, h, 0, j], atol=1e-6
    )
    chained = mods.chain(mods.alibi(H), mods.soft_cap(2.5))
    np.testing.assert_allclose(
        _score(chained, s),
        2.5 * np.tanh((s - slopes[h] * np.abs(i - j)) / 2.5),
        atol=1e-5,
    )


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_position_bias_matches_t5(rng, bidirectional):
    (b, h, i, j), _ = _grid()
    relative = np.arange(-200, 201)
    want = [t5_bucket(r, bidirectional, 32, 128) for r in relative]
    got = mods.relative_position_buckets(relative, 32, 128, bidirectional)
    np.testing.assert_array_equal(ops.convert_to_numpy(got), want)
    table = rng.normal(size=(8, H)).astype("float32")
    buckets = np.vectorize(lambda r: t5_bucket(r, bidirectional, 8, 16))(j - i)
    s = rng.normal(size=(B, H, TQ, TK)).astype("float32")
    mod = mods.relative_position_bias(table, 8, 16, bidirectional)
    np.testing.assert_allclose(_score(mod, s), s + table[buckets, h], atol=1e-6)


def test_t5_buckets_by_hand():
    # 32 buckets, both directions: 0..7 exact for keys before the query
    # (relative position <= 0), 16..23 after; far keys share 15 and 31.
    got = mods.relative_position_buckets(
        np.array([0, -1, -7, 1, 7, -1000, 1000]), 32, 128, True
    )
    np.testing.assert_array_equal(
        ops.convert_to_numpy(got), [0, 1, 7, 17, 23, 15, 31]
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
    ):
        config = keras.saving.serialize_keras_object(mod)
        again = keras.saving.deserialize_keras_object(config)
        assert type(again) is type(mod)
        assert again.get_config() == mod.get_config()


def test_mods_of_one_call_have_no_config():
    with pytest.raises(TypeError, match="pass it to the layer's call"):
        mods.document(np.zeros((1, 3), "int32")).get_config()
    with pytest.raises(TypeError, match="pass it to the layer's call"):
        mods.bias(np.zeros((1, 1, 3, 3), "float32")).get_config()


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
        (lambda: ka_ops.and_masks(3), "Received: 3"),
    ],
)
def test_bad_mod_arguments_name_the_value(build, match):
    with pytest.raises((ValueError, TypeError), match=match):
        build()
