"""ops/rotary.py: RoFormer's angles by hand and the half-split rotation
against NumPy (keras-hub's `RotaryEmbedding` is compared in
tests/layers/test_rotary.py)."""

import numpy as np
from keras import ops

from keras_attention import ops as ka_ops


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
