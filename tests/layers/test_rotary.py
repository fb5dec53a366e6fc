"""RotaryEmbedding against the paper's complex form, keras-hub's layer and
its own relative-position property; the interleaved pairing against
DeepSeek's complex form and against the half split of de-interleaved
projections (how a checkpoint of the other kind loads); Llama 3's and
YaRN's scalings against their reference codes and keras-hub's YaRN."""

import keras
import numpy as np
import pytest

import keras_attention
from tests import rotary_references as refs
from tests.layer_basics import check_layer_basics
from tests.layer_basics import to_np


def np_rope(x, positions, base=10000.0, scale=1.0):
    """RoFormer as a complex product, pairs `(x_i, x_{i + d/2})`:
    `(x_i + i x_{i+d/2}) · exp(i p θ_i)`, `θ_i = base^(-2i/d)`.
    `x` is `(B, T, ..., d)` and `positions` `(B or 1, T)`."""
    half = x.shape[-1] // 2
    theta = base ** (-np.arange(half) * 2.0 / x.shape[-1])
    angle = (positions / scale)[..., None] * theta
    angle = angle.reshape(angle.shape[:2] + (1,) * (x.ndim - 3) + (half,))
    z = (x[..., :half] + 1j * x[..., half:]) * np.exp(1j * angle)
    return np.concatenate([z.real, z.imag], axis=-1).astype("float32")


def test_hand_case_rotates_a_pair_by_its_angle():
    # d = 2: one pair, θ = 1, so position p rotates (1, 0) by p radians.
    x = np.tile(np.array([1.0, 0.0], "float32"), (1, 3, 1))
    got = to_np(keras_attention.RotaryEmbedding()(x))
    p = np.arange(3)
    np.testing.assert_allclose(
        got[0], np.stack([np.cos(p), np.sin(p)], -1), atol=1e-6
    )


@pytest.mark.parametrize("shape", [(2, 5, 8), (2, 5, 3, 6)])
def test_matches_the_complex_form(rand, shape):
    x = rand(*shape)
    layer = keras_attention.RotaryEmbedding(
        max_wavelength=100, scaling_factor=2
    )
    want = np_rope(x, np.arange(2, 7)[None], base=100.0, scale=2.0)
    np.testing.assert_allclose(
        to_np(layer(x, start_index=2)), want, rtol=1e-5, atol=1e-5
    )
    positions = np.array([[4, 0, 2, 9, 1], [3, 3, 3, 3, 3]])
    want = np_rope(x, positions, base=100.0, scale=2.0)
    np.testing.assert_allclose(
        to_np(layer(x, positions=positions)), want, rtol=1e-5, atol=1e-5
    )


def test_other_axes_match_moved_axes(rand):
    x = rand(2, 6, 4, 3)  # (B, features, heads, T)
    layer = keras_attention.RotaryEmbedding(sequence_axis=-1, feature_axis=1)
    moved = np.moveaxis(np.moveaxis(x, 3, 1), 2, 3)  # (B, T, heads, D)
    want = np.moveaxis(
        np.moveaxis(np_rope(moved, np.arange(3)[None]), 3, 2), 1, 3
    )
    np.testing.assert_allclose(to_np(layer(x)), want, rtol=1e-5, atol=1e-5)


def test_scores_depend_on_relative_position_only(rand):
    q, k = rand(1, 1, 8), rand(1, 1, 8)
    layer = keras_attention.RotaryEmbedding()
    scores = [
        float(
            np.sum(
                to_np(layer(q, start_index=p + 3))
                * to_np(layer(k, start_index=p))
            )
        )
        for p in (0, 5, 11)
    ]
    np.testing.assert_allclose(scores, scores[0], rtol=1e-4)


def test_matches_keras_hub(rand):
    keras_hub = pytest.importorskip(
        "keras_hub", reason="keras-hub is the reference layer"
    )
    x = rand(2, 7, 2, 10)
    kwargs = dict(max_wavelength=500, scaling_factor=4.0)
    ours = keras_attention.RotaryEmbedding(**kwargs)
    theirs = keras_hub.layers.RotaryEmbedding(**kwargs)
    np.testing.assert_allclose(
        to_np(ours(x, start_index=5)),
        to_np(theirs(x, start_index=5)),
        rtol=1e-5,
        atol=1e-6,
    )
    positions = np.arange(14).reshape(2, 7)[:, ::-1].copy()
    np.testing.assert_allclose(
        to_np(ours(x, positions=positions)),
        to_np(theirs(x, positions=positions)),
        rtol=1e-5,
        atol=1e-6,
    )


def test_yarn_matches_keras_hub(rand):
    # keras-hub's rope_type="yarn" (its arguments, the same names): the
    # ramp and the attention factor on the rotated features.
    keras_hub = pytest.importorskip(
        "keras_hub", reason="keras-hub is the reference layer"
    )
    x = rand(2, 7, 2, 16)
    kwargs = dict(
        max_wavelength=10000,
        scaling_factor=8.0,
        rope_type="yarn",
        beta_fast=32.0,
        beta_slow=1.0,
        original_max_position_embeddings=512,
    )
    ours = keras_attention.RotaryEmbedding(**kwargs)
    theirs = keras_hub.layers.RotaryEmbedding(**kwargs)
    np.testing.assert_allclose(
        to_np(ours(x, start_index=300)),
        to_np(theirs(x, start_index=300)),
        rtol=1e-4,
        atol=1e-5,
    )


def _gpt_oss_rotary(keras_hub, head_dim, scaling_factor):
    # gpt-oss's attention builds its own keras-hub RotaryEmbedding (YaRN,
    # `truncate=False`); build one and take it.
    from keras_hub.src.models.gpt_oss import gpt_oss_attention

    attention = gpt_oss_attention.GptOssAttention(
        num_query_heads=2,
        num_key_value_heads=1,
        rope_max_wavelength=150000,
        rope_scaling_factor=scaling_factor,
        head_dim=head_dim,
    )
    attention.build((None, None, 8))
    return attention.rotary_embedding_layer


@pytest.mark.parametrize("truncate", [True, False])
def test_yarn_truncate_matches_keras_hub_and_gpt_oss(rand, truncate):
    # gpt-oss's YaRN leaves the correction range unrounded: at head size
    # 16 its ramp ends at pairs 3.9 and 6.5 instead of 3 and 7.
    keras_hub = pytest.importorskip(
        "keras_hub", reason="keras-hub is the reference layer"
    )
    x = rand(2, 5, 2, 16)
    kwargs = dict(
        max_wavelength=150000,
        scaling_factor=32.0,
        rope_type="yarn",
        original_max_position_embeddings=4096,
        truncate=truncate,
    )
    ours = to_np(keras_attention.RotaryEmbedding(**kwargs)(x, start_index=200))
    theirs = keras_hub.layers.RotaryEmbedding(**kwargs)
    np.testing.assert_allclose(
        ours, to_np(theirs(x, start_index=200)), rtol=1e-5, atol=1e-5
    )
    other = keras_attention.RotaryEmbedding(
        **{**kwargs, "truncate": not truncate}
    )
    assert np.abs(to_np(other(x, start_index=200)) - ours).max() > 1e-2
    if not truncate:
        gpt_oss = _gpt_oss_rotary(keras_hub, 16, 32.0)
        np.testing.assert_allclose(
            ours, to_np(gpt_oss(x, start_index=200)), rtol=1e-5, atol=1e-5
        )


def _qwen3_5_partial_rope(head_dim, factor, wavelength):
    # Qwen3.5's attention rotates the first `int(head_dim * factor)`
    # features with a keras-hub RotaryEmbedding and passes the rest.
    from keras_hub.src.models.qwen3_5 import qwen3_5_attention

    attention = qwen3_5_attention.Qwen3_5Attention(
        num_query_heads=2,
        num_key_value_heads=1,
        head_dim=head_dim,
        partial_rotary_factor=factor,
        rope_max_wavelength=wavelength,
    )
    attention.build((None, None, 8))
    return attention


@pytest.mark.parametrize("factor", [0.25, 0.5, 1.0])
def test_partial_rotation_matches_keras_hub_and_qwen3_5(rand, factor):
    keras_hub = pytest.importorskip(
        "keras_hub", reason="keras-hub is the reference layer"
    )
    x = rand(2, 6, 3, 16)
    ours = keras_attention.RotaryEmbedding(
        max_wavelength=1000, partial_rotary_factor=factor
    )
    got = to_np(ours(x, start_index=7))
    turned = int(16 * factor)
    hub = keras_hub.layers.RotaryEmbedding(max_wavelength=1000)
    want = np.concatenate(
        [to_np(hub(x[..., :turned], start_index=7)), x[..., turned:]], -1
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[..., turned:], x[..., turned:])
    qwen = _qwen3_5_partial_rope(16, factor, 1000)
    # The model's own rotation (a private method of keras-hub's layer: the
    # only place it is written).
    own = to_np(qwen._apply_partial_rope(x, start_index=7))
    np.testing.assert_allclose(got, own, rtol=1e-5, atol=1e-6)


def test_partial_rotation_with_yarn_and_adjacent_pairs(rand):
    # The rotated share is a whole rotary embedding of its own size.
    x = rand(2, 4, 12)
    kwargs = dict(
        scaling_factor=4.0,
        rope_type="yarn",
        original_max_position_embeddings=16,
        truncate=False,
        interleaved=True,
    )
    partial = keras_attention.RotaryEmbedding(
        partial_rotary_factor=2 / 3, **kwargs
    )
    whole = keras_attention.RotaryEmbedding(**kwargs)
    got = to_np(partial(x, start_index=3))
    np.testing.assert_allclose(
        got[..., :8], to_np(whole(x[..., :8], start_index=3)), atol=1e-6
    )
    np.testing.assert_array_equal(got[..., 8:], x[..., 8:])


@pytest.mark.parametrize(
    "kwargs, frequencies, scale",
    [
        (
            dict(rope_type="llama3", original_max_position_embeddings=64),
            refs.llama3_frequencies(8, 10000, 8.0, 64),
            1.0,
        ),
        (
            dict(rope_type="yarn", original_max_position_embeddings=64),
            refs.yarn_frequencies(8, 10000, 8.0, 64),
            0.1 * np.log(8.0) + 1,
        ),
        (
            dict(
                rope_type="yarn",
                original_max_position_embeddings=64,
                attention_factor=1.25,
            ),
            refs.yarn_frequencies(8, 10000, 8.0, 64),
            1.25,
        ),
    ],
)
@pytest.mark.parametrize("interleaved", [False, True])
def test_scalings_and_pairings_match_the_references(
    rand, kwargs, frequencies, scale, interleaved
):
    x = rand(2, 5, 3, 8)
    layer = keras_attention.RotaryEmbedding(
        scaling_factor=8.0, interleaved=interleaved, **kwargs
    )
    positions = np.arange(40, 45)
    angles = (positions[:, None] * frequencies)[None, :, None, :]
    want = refs.rotate(x, angles, interleaved=interleaved, scale=scale)
    np.testing.assert_allclose(
        to_np(layer(x, start_index=40)), want, rtol=1e-4, atol=1e-5
    )


def test_a_checkpoint_of_the_other_pairing_loads_by_permuting_columns(
    rand, rng
):
    # Weights trained with adjacent pairs (DeepSeek, GPT-J, Meta's Llama):
    # `interleaved=True`, or the half split after permuting the query and
    # key projections' output columns within each head. Same outputs.
    x = rand(2, 6, 16)
    kwargs = dict(num_heads=2, key_dim=8)
    interleaved = keras_attention.MultiHeadAttention(
        **kwargs,
        rotary_embedding=keras_attention.RotaryEmbedding(interleaved=True),
    )
    halves = keras_attention.MultiHeadAttention(
        **kwargs, rotary_embedding=keras_attention.RotaryEmbedding()
    )
    interleaved(x, x)
    halves(x, x)
    weights = [
        rng.normal(size=w.shape).astype("float32") for w in interleaved.weights
    ]
    interleaved.set_weights(weights)
    order = refs.deinterleave(8)
    permuted = []
    for variable, value in zip(interleaved.weights, weights, strict=True):
        if variable.path.split("/")[-2] in ("query", "key"):
            value = value[..., order]  # (dim, heads, depth) and (heads, depth)
        permuted.append(value)
    halves.set_weights(permuted)
    np.testing.assert_allclose(
        to_np(interleaved(x, x, use_causal_mask=True)),
        to_np(halves(x, x, use_causal_mask=True)),
        rtol=1e-4,
        atol=1e-5,
    )


def test_basics(rand):
    check_layer_basics(
        keras_attention.RotaryEmbedding,
        {
            "max_wavelength": 50,
            "scaling_factor": 4.0,
            "rope_type": "yarn",
            "original_max_position_embeddings": 16,
            "attention_factor": 1.1,
            "interleaved": True,
            "truncate": False,
            "partial_rotary_factor": 0.5,
        },
        rand(2, 4, 8),
        expected_output_shape=(2, 4, 8),
        expected_num_trainable_weights=0,
        run_training=False,
    )


def test_start_index_as_a_tensor_under_jit(rand):
    x = rand(1, 3, 4)
    layer = keras_attention.RotaryEmbedding()
    model = keras.Sequential([keras.Input((3, 4)), layer])
    model.compile(jit_compile=True)
    np.testing.assert_allclose(
        model.predict(x, verbose=0), to_np(layer(x)), atol=1e-6
    )
    step = to_np(layer(x, start_index=keras.ops.convert_to_tensor(2)))
    np.testing.assert_allclose(
        step, np_rope(x, np.arange(2, 5)[None]), atol=1e-5
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_wavelength": 0}, "max_wavelength=0"),
        ({"scaling_factor": -1.0}, "scaling_factor=-1.0"),
        ({"sequence_axis": 1.5}, "sequence_axis=1.5"),
        ({"rope_type": "dynamic"}, "Received: rope_type='dynamic'"),
        ({"rope_type": "llama3"}, "original_max_position_embeddings=None"),
        (
            {"rope_type": "yarn", "original_max_position_embeddings": 0},
            "original_max_position_embeddings=0",
        ),
        (
            {"low_freq_factor": 4.0, "high_freq_factor": 4.0},
            "`low_freq_factor` < `high_freq_factor`. Received: "
            "low_freq_factor=4.0, high_freq_factor=4.0",
        ),
        ({"beta_slow": 40.0}, "`beta_slow` < `beta_fast`"),
        ({"beta_fast": -1}, "beta_fast=-1"),
        (
            {"attention_factor": 1.2},
            "it needs `rope_type=\"yarn\"`. Received: rope_type='linear'",
        ),
        (
            {
                "rope_type": "yarn",
                "original_max_position_embeddings": 8,
                "attention_factor": 0,
            },
            "attention_factor=0",
        ),
        ({"interleaved": "yes"}, "Received: interleaved='yes'"),
        ({"truncate": "no"}, "Received: truncate='no'"),
        (
            {"truncate": False},
            "needs `rope_type=\"yarn\"`. Received: rope_type='linear', "
            "truncate=False",
        ),
        ({"partial_rotary_factor": 0}, "Received: partial_rotary_factor=0"),
        (
            {"partial_rotary_factor": 1.5},
            "Received: partial_rotary_factor=1.5",
        ),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_attention.RotaryEmbedding(**kwargs)


@pytest.mark.parametrize(
    "kwargs, shape, match",
    [
        ({}, (2, 3, 5), "even size"),
        (
            {"partial_rotary_factor": 0.5},
            (2, 3, 6),
            "Received: inputs.shape=\\(2, 3, 6\\).*partial_rotary_factor=0.5",
        ),
        ({"feature_axis": 1}, (2, 3, 4), "two different axes"),
        ({"sequence_axis": 4}, (2, 3, 4), "sequence_axis=4"),
    ],
)
def test_bad_inputs_are_named(kwargs, shape, match):
    with pytest.raises(ValueError, match=match):
        keras_attention.RotaryEmbedding(**kwargs)(np.ones(shape, "float32"))
