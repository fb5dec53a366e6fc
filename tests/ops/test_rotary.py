"""ops/rotary.py: RoFormer's angles by hand, the half-split and the
interleaved rotation against NumPy, Llama 3's and YaRN's frequencies
against their reference codes in NumPy (tests/rotary_references.py;
keras-hub's `RotaryEmbedding` is compared in tests/layers/test_rotary.py)."""

import numpy as np
import pytest
from keras import ops

from keras_attention import ops as ka_ops
from tests import rotary_references as refs


def test_rotary_angles_by_hand():
    got = ops.convert_to_numpy(ka_ops.rotary_angles(np.arange(3), 4, 100))
    # θ_{p,i} = p · 100^(-2i / 4): frequencies 1 and 0.1.
    np.testing.assert_allclose(got, [[0, 0], [1, 0.1], [2, 0.2]], rtol=1e-6)
    halved = ka_ops.rotary_angles(np.arange(3), 4, 100, scaling_factor=2.0)
    np.testing.assert_allclose(ops.convert_to_numpy(halved), got / 2)
    batched = ka_ops.rotary_angles(np.arange(6).reshape(2, 3), 4, 100)
    assert tuple(batched.shape) == (2, 3, 2)


def test_apply_rotary_rotates_feature_i_with_i_plus_half(rng):
    x = rng.normal(size=(2, 3, 4)).astype("float32")
    angles = rng.uniform(-3, 3, size=(3, 2)).astype("float32")
    got = ops.convert_to_numpy(ka_ops.apply_rotary(x, angles))
    first, second = x[..., :2], x[..., 2:]
    cos, sin = np.cos(angles), np.sin(angles)
    want = np.concatenate(
        [first * cos - second * sin, second * cos + first * sin], -1
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # A rotation keeps the length of every (i, i + dim / 2) pair.
    np.testing.assert_allclose(
        got[..., :2] ** 2 + got[..., 2:] ** 2, first**2 + second**2, rtol=1e-5
    )


def _frequencies(*args, **kwargs):
    return ops.convert_to_numpy(ka_ops.rotary_frequencies(*args, **kwargs))


def test_llama3_frequencies_equal_metas_apply_scaling():
    # Llama 3.1 8B: head dim 128, base 500,000, factor 8 over 8,192.
    got = _frequencies(128, 500000, 8.0, "llama3", 8192, 1.0, 4.0)
    want = refs.llama3_frequencies(128, 500000, 8.0, 8192, 1.0, 4.0)
    np.testing.assert_allclose(got, want, rtol=2e-6)
    # All three bands occur: kept, blended, divided by the factor.
    base = refs.base_frequencies(128, 500000)
    ratio = want / base
    kept, divided = np.isclose(ratio, 1), np.isclose(ratio, 1 / 8)
    assert kept.sum() > 0 and divided.sum() > 0
    assert 0 < (~kept & ~divided).sum() < 10


def test_llama3_by_hand():
    # dim 8, base 10: wavelengths 2π, 2π√10·... : with an original length
    # of 64 (bounds 64 / 1 and 64 / 4 = 16), 2π < 16 is kept, 2π·10 ≈ 62.8
    # is blended with smooth = (64 / 62.8 - 1) / 3, the others divided.
    got = _frequencies(8, 10000, 8.0, "llama3", 64)
    smooth = (64 / (2 * np.pi / 0.1) - 1) / 3
    want = [1.0, (1 - smooth) * 0.1 / 8 + smooth * 0.1, 0.01 / 8, 0.001 / 8]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_yarn_frequencies_equal_deepseek_v3s_precompute_freqs_cis():
    # DeepSeek-V3: rotary dim 64, base 10,000, factor 40 over 4,096.
    got = _frequencies(64, 10000, 40.0, "yarn", 4096, beta_fast=32.0)
    want = refs.yarn_frequencies(64, 10000, 40.0, 4096, 32.0, 1.0)
    np.testing.assert_allclose(got, want, rtol=2e-6)
    # The fast pairs are kept, the slow ones interpolated, a ramp between.
    base = refs.base_frequencies(64, 10000)
    np.testing.assert_allclose(got[:10], base[:10], rtol=2e-6)
    np.testing.assert_allclose(got[-5:], base[-5:] / 40, rtol=2e-6)
    ratio = got / base
    assert np.all(np.diff(ratio) <= 1e-7)


def test_yarn_attention_factor():
    factor = ka_ops.yarn_attention_factor
    assert factor(40.0) == pytest.approx(0.1 * np.log(40.0) + 1, rel=1e-12)
    assert factor(40.0, mscale=0.707) == pytest.approx(
        0.0707 * np.log(40.0) + 1, rel=1e-12
    )
    assert factor(1.0) == factor(0.5) == 1.0


def test_linear_is_the_default_and_divides_every_frequency():
    np.testing.assert_allclose(
        _frequencies(8, 100, 4.0), refs.base_frequencies(8, 100) / 4, 1e-6
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rope_type": "dynamic"}, "one of \\['linear', 'llama3', 'yarn'\\]"),
        ({"rope_type": "yarn"}, "Received: original_max_position_embeddings"),
    ],
)
def test_an_unknown_scaling_or_no_original_length_is_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ka_ops.rotary_frequencies(8, **kwargs)


def test_apply_rotary_interleaved_rotates_adjacent_pairs(rng):
    # DeepSeek's and Meta's apply_rotary_emb: (x[2i] + i x[2i+1]) e^{iθ_i}.
    x = rng.normal(size=(2, 3, 6)).astype("float32")
    angles = rng.uniform(-3, 3, size=(3, 3)).astype("float32")
    got = ops.convert_to_numpy(
        ka_ops.apply_rotary(x, angles, interleaved=True, scale=1.5)
    )
    want = refs.rotate(x, angles, interleaved=True, scale=1.5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The same rotation as the half split of the de-interleaved features.
    order = refs.deinterleave(6)
    halves = ops.convert_to_numpy(ka_ops.apply_rotary(x[..., order], angles))
    np.testing.assert_allclose(got[..., order], halves * 1.5, 1e-5, 1e-6)
