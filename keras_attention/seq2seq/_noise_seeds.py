"""The seeds of the monotonic mechanisms' sigmoid noise, carried in the
decoder cell's state (private module: `AttentionDecoderCell` draws, reads
and advances them; the mechanisms draw the noise from them).

Noise drawn inside a loop must be stateless (a seed generator updated
inside JAX's `scan` leaks a tracer), so the cell carries `[s_0, s_1,
step]` per row in its state and each step derives its noise from it.
"""

import keras
from keras import ops

# Seeds of the sigmoid noise travel in the decoder cell's state, which
# `keras.layers.RNN` casts to the compute dtype: integers below 2048 are
# exact in float16 (below 256 in bfloat16, see `seed_range`).
SEED_RANGE = 2048


def seed_range(dtype) -> int:
    """The integers a float state of `dtype` holds exactly, `[0, range)`."""
    if keras.backend.standardize_dtype(dtype) == "bfloat16":
        return 256
    return SEED_RANGE


def noisy_mechanisms(mechanisms) -> list:
    """For each mechanism, whether it adds sigmoid noise in training."""
    return [getattr(m, "sigmoid_noise", 0.0) > 0 for m in mechanisms]


def initial_noise_seed(mechanisms, batch, dtype):
    """`[s_0, s_1, step]` per row: a fresh seed of a sequence's noise.

    The decoder cell's state carries it (`(batch, 3)` in `dtype`), drawn
    by `AttentionDecoderCell.get_initial_state`, outside the loop that
    runs the cell, from the first noisy mechanism's seed generator; each
    step derives its noise from it statelessly (`step_noise`) and counts
    itself in `step` (`next_noise_seed`), so the noise works in any loop
    (`keras.layers.RNN`, `AttentionDecoder`, `ScheduledSamplingDecoder`)
    on every backend.
    """
    noisy = mechanisms[noisy_mechanisms(mechanisms).index(True)]
    seed = noisy.draw_seed(dtype)
    row = ops.concatenate([seed, ops.zeros((1,), "int32")], axis=0)
    row = ops.cast(row, dtype)
    return ops.broadcast_to(row[None, :], (batch, 3))


def step_noise(mechanisms, seed_state, memory, training) -> list:
    """Each mechanism's sigmoid noise `(batch_size, source_time)`.

    `None` for a mechanism without noise, and outside training. The
    seed of mechanism `i` at step `t` is `(s_0 R + s_1, t M + i)` (`R`
    the seed range, `M` the number of mechanisms), a stateless draw.
    """
    count = len(mechanisms)
    noisy = noisy_mechanisms(mechanisms)
    if not (training and any(noisy)):
        return [None] * count
    # The largest row: a padded row of `AttentionDecoder` keeps its
    # old state, but every row holds the same seed.
    seed = ops.cast(ops.max(seed_state, axis=0), "int32")
    size = seed_range(seed_state.dtype)
    shape = ops.shape(memory)[:2]
    noise = []
    for i, (mechanism, is_noisy) in enumerate(
        zip(mechanisms, noisy, strict=True)
    ):
        step_seed = ops.stack([seed[0] * size + seed[1], seed[2] * count + i])
        noise.append(
            mechanism.draw_noise(shape, memory.dtype, seed=step_seed)
            if is_noisy
            else None
        )
    return noise


def next_noise_seed(seed_state):
    """The step count of a noise seed advanced, modulo the seed range."""
    size = seed_range(seed_state.dtype)
    step = ops.mod(seed_state[:, 2:] + 1.0, float(size))
    return ops.concatenate([seed_state[:, :2], step], axis=-1)
