"""Rotary position embeddings (RoFormer): frequencies, their context-length
scalings (linear, Llama 3's, YaRN's) and the rotation of feature pairs
(the half split, or adjacent pairs)."""

import math

from keras import ops

from keras_attention.ops import _eager

#: The RoPE scalings `rotary_angles` knows (`rope_type`).
ROPE_TYPES = ("linear", "llama3", "yarn")


def check_rope_type(rope_type, original_max_position_embeddings):
    """A `ValueError` for an unknown `rope_type`, or a `"llama3"` or
    `"yarn"` scaling without the context length it extends."""
    if rope_type not in ROPE_TYPES:
        raise ValueError(
            f"Expected `rope_type` to be one of {list(ROPE_TYPES)}. "
            f"Received: rope_type={rope_type!r}"
        )
    if rope_type != "linear" and original_max_position_embeddings is None:
        raise ValueError(
            f'`rope_type="{rope_type}"` scales the frequencies from the '
            "context length the model was trained on: give "
            "`original_max_position_embeddings` (Llama 3.1: 8192, "
            "DeepSeek-V3: 4096). Received: "
            "original_max_position_embeddings=None"
        )


def yarn_attention_factor(scaling_factor, mscale=1.0) -> float:
    """YaRN's `0.1 · mscale · ln(s) + 1` (`1` for `s <= 1`).

    The factor by which YaRN multiplies the rotated query and key, so
    their logits by its square (DeepSeek-V3's `mscale` folded into the
    softmax scale; Qwen's `attention_factor`).

    Example:

    >>> round(keras_attention.ops.yarn_attention_factor(40.0), 4)
    1.3689
    """
    if scaling_factor <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scaling_factor) + 1.0


def _llama3(inverse, factor, original, low_freq_factor, high_freq_factor):
    """Llama 3.1's ramp: long wavelengths divided by `factor`, short ones
    kept, a linear blend in the band between (Meta's `apply_scaling`)."""
    wavelength = 2.0 * math.pi / inverse
    long, short = original / low_freq_factor, original / high_freq_factor
    smooth = (original / wavelength - low_freq_factor) / (
        high_freq_factor - low_freq_factor
    )
    scaled = ops.where(wavelength > long, inverse / factor, inverse)
    band = ops.logical_and(wavelength >= short, wavelength <= long)
    blended = (1.0 - smooth) * scaled / factor + smooth * scaled
    return ops.where(band, blended, scaled)


def _yarn(inverse, dim, base, factor, original, betas, truncate):
    """YaRN's ramp (Peng et al.; DeepSeek-V3's `precompute_freqs_cis`,
    keras-hub's): the pairs that turn fewer than `beta_slow` times over
    the original context are interpolated (divided by `factor`), those
    that turn more than `beta_fast` times kept, a linear ramp between;
    its ends rounded outwards to whole pairs with `truncate` (DeepSeek's,
    keras-hub's default) or not (gpt-oss)."""
    beta_fast, beta_slow = betas

    def pair_index(rotations):
        turns = original / (rotations * 2.0 * math.pi)
        return dim * math.log(turns) / (2.0 * math.log(base))

    low, high = pair_index(beta_fast), pair_index(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    # An empty ramp would divide by zero: keras-hub's (and DeepSeek's)
    # smallest width.
    width = max(high - low, 0.001)
    pairs = ops.arange(dim // 2, dtype="float32")
    kept = 1.0 - ops.clip((pairs - low) / width, 0.0, 1.0)
    return inverse / factor * (1.0 - kept) + inverse * kept


def rotary_frequencies(
    dim: int,
    max_wavelength=10000,
    scaling_factor=1.0,
    rope_type="linear",
    original_max_position_embeddings=None,
    low_freq_factor=1.0,
    high_freq_factor=4.0,
    beta_fast=32.0,
    beta_slow=1.0,
    truncate=True,
):
    """The `dim // 2` rotation frequencies `λ^(-2i / dim)`, scaled.

    Args:
        dim: The (even) number of rotated features.
        max_wavelength: The base `λ`. Defaults to `10000`.
        scaling_factor: The context extension `s`. Defaults to `1.0`.
        rope_type: `"linear"` (every frequency divided by `s`: position
            interpolation), `"llama3"` (Llama 3.1's: frequencies whose
            wavelength is longer than `original_max_position_embeddings /
            low_freq_factor` divided by `s`, shorter than `... /
            high_freq_factor` kept, a blend between) or `"yarn"` (YaRN's
            ramp over the pairs by how often they turn in the original
            context, `beta_fast` and `beta_slow` turns). Defaults to
            `"linear"`.
        original_max_position_embeddings: The context length the model
            was trained on; needed by `"llama3"` and `"yarn"`.
        low_freq_factor: `"llama3"`'s long-wavelength bound. Defaults to
            `1.0` (Llama 3.1's).
        high_freq_factor: `"llama3"`'s short-wavelength bound. Defaults
            to `4.0` (Llama 3.1's).
        beta_fast: `"yarn"`'s turns above which a pair is kept. Defaults
            to `32.0` (YaRN's and DeepSeek-V3's).
        beta_slow: `"yarn"`'s turns below which a pair is interpolated.
            Defaults to `1.0`.
        truncate: `"yarn"` only: whether the ends of the ramp are rounded
            to whole pairs (YaRN's, DeepSeek-V3's and keras-hub's default;
            gpt-oss sets `False`). Defaults to `True`.

    Returns:
        float32 frequencies, `(dim // 2,)`.

    Example:

    >>> f = keras_attention.ops.rotary_frequencies(8, 10000, 8.0, "llama3", 64)
    >>> np.asarray(f, "float64").round(5).tolist()  # kept, blended, divided
    [1.0, 0.01304, 0.00125, 0.00013]
    """
    check_rope_type(rope_type, original_max_position_embeddings)
    exponent = ops.arange(0, dim, 2, dtype="float32") / float(dim)
    inverse = ops.power(ops.cast(max_wavelength, "float32"), -exponent)
    factor, original = float(scaling_factor), original_max_position_embeddings
    if rope_type == "llama3":
        return _llama3(
            inverse, factor, original, low_freq_factor, high_freq_factor
        )
    if rope_type == "yarn":
        return _yarn(
            inverse,
            dim,
            max_wavelength,
            factor,
            original,
            (beta_fast, beta_slow),
            truncate,
        )
    return inverse / factor


@_eager.compiled_when_eager
def rotary_angles(
    positions, dim: int, max_wavelength=10000, scaling_factor=1.0, **scaling
):
    """The rotation angles `θ_{p,i} = p · f_i`, `f = rotary_frequencies`.

    With the default linear scaling, `θ_{p,i} = (p / s) · λ^(-2i / dim)`.

    Args:
        positions: Positions `p`, `(seq_len,)` or `(batch_size, seq_len)`.
        dim: The (even) number of rotated features.
        max_wavelength: The base `λ`. Defaults to `10000`.
        scaling_factor: The context extension `s` (for `"linear"`, the
            position divisor). Defaults to `1.0`.
        **scaling: `rotary_frequencies`' other arguments (`rope_type`,
            `original_max_position_embeddings`, ...).

    Returns:
        float32 angles, `positions.shape + (dim // 2,)`.

    Example:

    >>> angles = keras_attention.ops.rotary_angles(np.arange(3), dim=4)
    >>> np.asarray(angles, "float64").round(2).tolist()
    [[0.0, 0.0], [1.0, 0.01], [2.0, 0.02]]
    """
    if scaling.get("rope_type", "linear") == "linear":
        # Position interpolation: the positions divided, not the
        # frequencies (the same in exact arithmetic).
        frequencies = rotary_frequencies(dim, max_wavelength, **scaling)
        positions = ops.cast(positions, "float32") / float(scaling_factor)
    else:
        frequencies = rotary_frequencies(
            dim, max_wavelength, scaling_factor, **scaling
        )
        positions = ops.cast(positions, "float32")
    return ops.expand_dims(positions, -1) * frequencies


@_eager.compiled_when_eager
def apply_rotary(inputs, angles, interleaved=False, scale=1.0):
    """Rotates each feature pair by its angle `angles[..., i]`.

    The half split of GPT-NeoX, Llama's Hugging Face weights and
    keras-hub pairs feature `i` with `i + dim / 2`: with `x = [x1, x2]`
    split in halves, the result is `[x1 cos θ - x2 sin θ, x2 cos θ + x1
    sin θ]`. `interleaved=True` pairs adjacent features `(x[2i],
    x[2i + 1])`, as GPT-J, Meta's Llama code and DeepSeek do (a complex
    number each): the same rotation, the features in another order.

    Args:
        inputs: `(..., dim)`.
        angles: `(..., dim // 2)`, broadcastable to the pairs of `inputs`.
        interleaved: Whether the pairs are adjacent features. Defaults to
            `False` (the half split).
        scale: A factor on the result (YaRN's attention factor). Defaults
            to `1.0`.

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
    inputs = ops.convert_to_tensor(inputs)
    cos = ops.cast(ops.cos(angles) * scale, inputs.dtype)
    sin = ops.cast(ops.sin(angles) * scale, inputs.dtype)
    if not interleaved:
        first, second = ops.split(inputs, 2, axis=-1)
        return ops.concatenate(
            [first * cos - second * sin, second * cos + first * sin], axis=-1
        )
    even, odd = inputs[..., 0::2], inputs[..., 1::2]
    rotated = ops.stack([even * cos - odd * sin, odd * cos + even * sin], -1)
    return ops.reshape(rotated, ops.shape(inputs))
