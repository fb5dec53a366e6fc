"""The projections of the multi-head layers are called as Keras sublayers.

Quantization, LoRA and the like act inside `EinsumDense.call`; a layer that
read the kernels and did the products itself would silently skip them.
"""

import keras
import numpy as np
import pytest

import keras_attention

LAYERS = {
    "MultiHeadAttention": lambda: keras_attention.MultiHeadAttention(2, 8),
    "SelfAttention": lambda: keras_attention.SelfAttention(num_heads=2),
}


def _model(make_layer):
    inputs = keras.Input((6, 16))
    layer = make_layer()
    if isinstance(layer, keras_attention.SelfAttention):
        outputs = layer(inputs)
    else:
        outputs = layer(inputs, inputs)
    return keras.Model(inputs, outputs), layer


def _relative_change(before, after):
    return float(np.abs(after - before).max() / np.abs(before).max())


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_int8_quantization_keeps_the_outputs(name):
    # Keras's own layer changes by about 1% here; a projection that skips
    # the sublayer reads the int8 kernel without its scale (a change of
    # about 1e5).
    x = np.random.default_rng(0).normal(size=(2, 6, 16)).astype("float32")
    model, _ = _model(LAYERS[name])
    before = keras.ops.convert_to_numpy(model(x))
    model.quantize("int8")
    after = keras.ops.convert_to_numpy(model(x))
    assert _relative_change(before, after) < 0.05


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_lora_on_a_projection_changes_the_outputs(name):
    x = np.random.default_rng(1).normal(size=(2, 6, 16)).astype("float32")
    model, layer = _model(LAYERS[name])
    before = keras.ops.convert_to_numpy(model(x))
    layer.value_dense.enable_lora(rank=2)
    unchanged = keras.ops.convert_to_numpy(model(x))
    np.testing.assert_allclose(unchanged, before, rtol=1e-5, atol=1e-6)
    layer.value_dense.lora_kernel_b.assign(
        np.ones(layer.value_dense.lora_kernel_b.shape, "float32")
    )
    after = keras.ops.convert_to_numpy(model(x))
    assert _relative_change(before, after) > 0.1
