"""A layer's dtype policy reaches every weight (score weights included)."""

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention import seq2seq

CASES = {
    "Attention(bilinear)": (
        lambda: keras_attention.Attention(score="bilinear", dtype="float64"),
        2,
    ),
    "Attention(additive)": (
        lambda: keras_attention.Attention(score="additive", dtype="float64"),
        2,
    ),
    "HardAttention(concat)": (
        lambda: keras_attention.HardAttention(score="concat", dtype="float64"),
        2,
    ),
    "MultiHeadAttention(bilinear)": (
        lambda: keras_attention.MultiHeadAttention(
            2, 4, score="bilinear", dtype="float64"
        ),
        2,
    ),
    "SelfAttention(additive)": (
        lambda: keras_attention.SelfAttention(
            2, score="additive", dtype="float64"
        ),
        1,
    ),
    "StructuredSelfAttention": (
        lambda: keras_attention.StructuredSelfAttention(
            4, 2, 0.0, dtype="float64"
        ),
        1,
    ),
    "scores.BilinearScore": (
        lambda: keras_attention.scores.BilinearScore(dtype="float64"),
        2,
    ),
    "seq2seq.AttentionDecoder": (
        lambda: seq2seq.AttentionDecoder(
            seq2seq.AttentionDecoderCell(
                keras.layers.GRUCell(4, dtype="float64"),
                seq2seq.LuongAttention("concat", units=4, dtype="float64"),
                attention_layer_units=4,
                dtype="float64",
            ),
            dtype="float64",
        ),
        2,
    ),
    "seq2seq.BahdanauAttention": (
        lambda: seq2seq.BahdanauAttention(units=4, dtype="float64"),
        2,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_float64_policy_reaches_every_weight_and_the_output(name, rng):
    if keras.backend.backend() == "jax":
        import jax

        if not jax.config.jax_enable_x64:
            pytest.skip("JAX without jax_enable_x64 has no float64")
    make_layer, num_inputs = CASES[name]
    layer = make_layer()
    inputs = [rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4))]
    out = layer(*inputs[:num_inputs])
    outputs = out if isinstance(out, tuple) else (out,)
    assert layer.weights
    assert {w.dtype for w in layer.weights} == {"float64"}, [
        (w.path, w.dtype) for w in layer.weights
    ]
    if keras.backend.backend() != "torch":
        # Keras 3.15's `ops.matmul` on PyTorch returns float32 for two
        # float64 tensors, so no layer's output can be float64 there.
        for output in outputs:
            assert keras.backend.standardize_dtype(output.dtype) == "float64"
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(outputs[0])))


def test_a_dtype_policy_map_quantizes_the_projections_it_names():
    policy_map = keras.dtype_policies.DTypePolicyMap()
    for name in ("query", "key", "value"):
        policy_map[f"mha/{name}"] = keras.dtype_policies.QuantizedDTypePolicy(
            "int8", "float32"
        )
    layer = keras_attention.MultiHeadAttention(
        3, 8, use_bias=False, dtype=policy_map, name="mha"
    )
    layer.build((1, 2, 2), (1, 2, 2))
    for dense in (layer.query_dense, layer.key_dense, layer.value_dense):
        assert {w.dtype for w in dense.weights} >= {"int8"}
    assert layer.score.dtype_policy.name == "float32"
