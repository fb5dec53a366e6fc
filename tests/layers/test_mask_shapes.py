"""Masks of the wrong shape are refused by name; broadcastable ones work.

Every layer checks its explicit masks against its inputs' shapes before
any computation, in eager calls and in functional models at build time
(docs/errors.md has one executed row per layer and argument).
"""

import keras
import numpy as np
import pytest

import keras_attention as ka


def _layers():
    return {
        "Attention": (ka.Attention, ((2, 3, 4), (2, 6, 4)), "value_mask"),
        "HardAttention": (ka.HardAttention, ((2, 3, 4), (2, 6, 4)), "key_mask"),
        "MultiHeadAttention": (
            lambda: ka.MultiHeadAttention(2, 4),
            ((2, 3, 8), (2, 6, 8)),
            "value_mask",
        ),
        "SelfAttention": (lambda: ka.SelfAttention(2), ((2, 6, 8),), "mask"),
        "StructuredSelfAttention": (
            lambda: ka.StructuredSelfAttention(4, 2, penalty_coefficient=0.0),
            ((2, 6, 4),),
            "mask",
        ),
    }


@pytest.mark.parametrize("name", sorted(_layers()))
def test_a_padding_mask_one_key_short_is_refused_eagerly_and_at_build(
    name, rand
):
    make, shapes, argument = _layers()[name]
    inputs = [rand(*s) for s in shapes]
    short = np.ones((2, 5), bool)
    with pytest.raises(ValueError, match=f"`{argument}` of shape"):
        make()(*inputs, **{argument: short})
    symbolic = [keras.Input(s[1:]) for s in shapes]
    with pytest.raises(ValueError, match=rf"{argument}.shape=\(None, 5\)"):
        make()(*symbolic, **{argument: keras.Input((5,), dtype="bool")})
    # The right shape builds a model that runs.
    mask = keras.Input((6,), dtype="bool")
    model = keras.Model(
        [*symbolic, mask], make()(*symbolic, **{argument: mask})
    )
    model.predict([*inputs, np.ones((2, 6), bool)], verbose=0)


@pytest.mark.parametrize(
    "make, mask_shape",
    [
        (ka.Attention, (2, 1, 6)),
        (ka.Attention, (1, 3, 6)),
        (lambda: ka.MultiHeadAttention(2, 4), (3, 6)),
        (lambda: ka.MultiHeadAttention(2, 4), (2, 1, 3, 6)),
    ],
)
def test_a_broadcastable_attention_mask_equals_the_full_mask(
    make, mask_shape, rng, rand
):
    dim = 8
    query, value = rand(2, 3, dim), rand(2, 6, dim)
    mask = rng.random(mask_shape) < 0.7
    mask[..., 0] = True
    full = np.broadcast_to(
        mask, (2, 2, 3, 6) if len(mask_shape) == 4 else (2, 3, 6)
    )
    layer = make()
    got = layer(query, value, attention_mask=mask)
    want = layer(query, value, attention_mask=np.ascontiguousarray(full))
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(got),
        keras.ops.convert_to_numpy(want),
        rtol=1e-6,
        atol=1e-6,
    )
