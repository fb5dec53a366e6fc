"""Rotary position embeddings (RoFormer), the half-split form."""

from keras import ops


def rotary_angles(
    positions, dim: int, max_wavelength=10000, scaling_factor=1.0
):
    """The rotation angles `θ_{p,i} = (p / s) · λ^(-2i / dim)`.

    Args:
        positions: Positions `p`, `(seq_len,)` or `(batch_size, seq_len)`.
        dim: The (even) number of rotated features.
        max_wavelength: The base `λ`. Defaults to `10000`.
        scaling_factor: The position divisor `s` (linear position
            interpolation). Defaults to `1.0`.

    Returns:
        float32 angles, `positions.shape + (dim // 2,)`.

    Example:

    >>> angles = keras_attention.ops.rotary_angles(np.arange(3), dim=4)
    >>> np.asarray(angles, "float64").round(2).tolist()
    [[0.0, 0.0], [1.0, 0.01], [2.0, 0.02]]
    """
    exponent = ops.arange(0, dim, 2, dtype="float32") / float(dim)
    inverse = ops.power(ops.cast(max_wavelength, "float32"), -exponent)
    positions = ops.cast(positions, "float32") / float(scaling_factor)
    return ops.expand_dims(positions, -1) * inverse


def apply_rotary(inputs, angles):
    """Rotates feature `i` with feature `i + dim / 2` by `angles[..., i]`.

    The half-split pairing of GPT-NeoX, Llama and keras-hub: with
    `x = [x1, x2]` split in halves, the result is
    `[x1 cos θ - x2 sin θ, x2 cos θ + x1 sin θ]`.

    Args:
        inputs: `(..., dim)`.
        angles: `(..., dim // 2)`, broadcastable to the halves of `inputs`.

    Returns:
        The rotated tensor, with the shape and dtype of `inputs`.

    Example:

    >>> x = np.random.rand(3, 4).astype("float32")
    >>> angles = keras_attention.ops.rotary_angles(np.arange(3), dim=4)
    >>> y = np.asarray(keras_attention.ops.apply_rotary(x, angles))
    >>> np.allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1))
    True
    >>> np.allclose(y[0], x[0])  # position 0 is not rotated
    True
    """
    cos = ops.cast(ops.cos(angles), inputs.dtype)
    sin = ops.cast(ops.sin(angles), inputs.dtype)
    first, second = ops.split(inputs, 2, axis=-1)
    return ops.concatenate(
        [first * cos - second * sin, second * cos + first * sin], axis=-1
    )
