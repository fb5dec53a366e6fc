"""The projections of the multi-head layers are called as Keras sublayers.

Quantization, LoRA and the like act inside `EinsumDense.call`; a layer that
read the kernels and did the products itself would silently skip them.
"""

import keras
import numpy as np
import pytest

import keras_attention
from tests.layer_basics import quick_collections

LAYERS = {
    "GroupedQueryAttention": lambda: keras_attention.GroupedQueryAttention(
        head_dim=8, num_query_heads=2, num_key_value_heads=1
    ),
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


@pytest.mark.parametrize("mode, tolerance", [("int8", 0.05), ("float8", 0.2)])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_quantization_keeps_the_outputs_and_survives_saving(
    name, mode, tolerance, rng, tmp_path
):
    # Keras's own layer changes by about 1% (int8) and 7% (float8) here; a
    # projection that skips the sublayer reads the int8 kernel without its
    # scale (a change of about 1e5).
    x = rng.normal(size=(2, 6, 16)).astype("float32")
    model, _ = _model(LAYERS[name])
    before = keras.ops.convert_to_numpy(model(x))
    with quick_collections():
        model.quantize(mode)
    after = keras.ops.convert_to_numpy(model(x))
    assert _relative_change(before, after) < tolerance
    # The quantized projections come back quantized (Keras 3.15's own layer
    # fails to load here: its sublayers are rebuilt in float32).
    path = str(tmp_path / "quantized.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(x)), after, rtol=1e-6, atol=1e-6
    )


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


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_lora_trains_saves_and_loads(name, rng, tmp_path):
    x = rng.normal(size=(8, 6, 16)).astype("float32")
    y = rng.normal(size=(8, 6, 16)).astype("float32")
    model, layer = _model(LAYERS[name])
    for dense in (layer.query_dense, layer.value_dense):
        dense.enable_lora(rank=2)
    lora_b = keras.ops.convert_to_numpy(layer.value_dense.lora_kernel_b)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(x, y, epochs=2, verbose=0)
    # Only the low-rank factors train; the frozen kernel stays.
    assert not np.allclose(
        keras.ops.convert_to_numpy(layer.value_dense.lora_kernel_b), lora_b
    )
    after = keras.ops.convert_to_numpy(model(x))
    path = str(tmp_path / "lora.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(x)), after, rtol=1e-5, atol=1e-5
    )
    trained = {w.name for w in layer.query_dense.trainable_weights}
    assert trained <= {"lora_kernel_a", "lora_kernel_b", "bias"}, trained
