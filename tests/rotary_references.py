"""Rotary embeddings in NumPy, float64, as the reference codes define them.

- `llama3_frequencies`: Meta's `apply_scaling` (meta-llama/llama-models,
  `models/llama3/model.py`), one frequency at a time as its first
  version reads: kept below the high-frequency wavelength, divided by
  the factor above the low-frequency one, blended between.
- `yarn_frequencies`: DeepSeek-V3's `precompute_freqs_cis`
  (deepseek-ai/DeepSeek-V3, `inference/model.py`): the correction range
  from `beta_fast` / `beta_slow` rotations over the original length,
  floored and ceiled and clamped, a linear ramp over the pairs.
- `rotate`: a rotation as a complex product, `(x_a + i x_b) · e^{iθ}`,
  the pairs `(a, b)` the two halves (RoFormer as GPT-NeoX writes it) or
  adjacent features (`torch.view_as_complex` of `(..., d/2, 2)`, as
  Meta's and DeepSeek's `apply_rotary_emb` do).
"""

import math

import numpy as np


def base_frequencies(dim, base):
    return 1.0 / base ** (np.arange(0, dim, 2) / dim)


def llama3_frequencies(dim, base, factor, original, low=1.0, high=4.0):
    out = []
    for f in base_frequencies(dim, base):
        wavelength = 2 * math.pi / f
        if wavelength < original / high:
            out.append(f)
        elif wavelength > original / low:
            out.append(f / factor)
        else:
            smooth = (original / wavelength - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return np.array(out)


def yarn_frequencies(dim, base, factor, original, fast=32.0, slow=1.0):
    def correction(rotations):
        return (
            dim
            * math.log(original / (rotations * 2 * math.pi))
            / (2 * math.log(base))
        )

    low = max(math.floor(correction(fast)), 0)
    high = min(math.ceil(correction(slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
    smooth = 1 - ramp
    freqs = base_frequencies(dim, base)
    return freqs / factor * (1 - smooth) + freqs * smooth


def rotate(x, angles, interleaved=False, scale=1.0):
    """`x (..., d)` rotated by `angles (..., d/2)` (broadcast)."""
    d = x.shape[-1]
    if interleaved:
        z = x[..., 0::2] + 1j * x[..., 1::2]
    else:
        z = x[..., : d // 2] + 1j * x[..., d // 2 :]
    z = z * np.exp(1j * angles) * scale
    if interleaved:
        return np.stack([z.real, z.imag], -1).reshape(x.shape)
    return np.concatenate([z.real, z.imag], -1)


def deinterleave(d):
    """The feature order that turns adjacent pairs into halves: the even
    features, then the odd ones."""
    return np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
