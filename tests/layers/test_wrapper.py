"""MultiHead, keras-multi-head's wrapper (issue 16)."""

import keras
import numpy as np
import pytest

import keras_attention
from tests.layer_basics import quick_collections
from tests.layer_basics import to_np


def test_outputs_are_the_copies_stacked_and_penalty_matches_numpy(rng):
    x = rng.normal(size=(2, 5, 4)).astype("float32")
    layer = keras_attention.MultiHead(
        keras.layers.Dense(3, name="dense"),
        num_heads=3,
        reg_index=[0, 1],
        reg_factor=[0.5, 2.0],
    )
    layer(x)
    old = [rng.normal(size=s).astype("float32") for s in [(4, 3), (3,)] * 3]
    layer.set_weights(old)
    output = to_np(layer(x))
    assert output.shape == (2, 5, 3, 3)
    for i in range(3):
        kernel, bias = old[2 * i], old[2 * i + 1]
        np.testing.assert_allclose(output[..., i], x @ kernel + bias, atol=1e-5)
    assert [c.name for c in layer.copies] == ["dense_1", "dense_2", "dense_3"]

    # keras-multi-head: for each index, W stacks the flattened copies and
    # the loss is factor · Σ (W Wᵀ − I)².
    want = 0.0
    for index, factor in [(0, 0.5), (1, 2.0)]:
        w = np.stack([old[2 * i + index].ravel() for i in range(3)])
        want += factor * np.sum(np.square(w @ w.T - np.eye(3)))
    np.testing.assert_allclose(to_np(layer.losses[-1]), want, rtol=1e-5)


def test_copies_start_different_and_the_penalty_trains():
    inputs = keras.Input((3,))
    layer = keras_attention.MultiHead(
        keras.layers.Dense(2), num_heads=2, reg_index=0, reg_factor=1.0
    )
    model = keras.Model(inputs, layer(inputs))
    x = np.ones((4, 3), "float32")
    first, second = (to_np(c.kernel) for c in layer.copies)
    assert not np.allclose(first, second)
    model(x)
    before = float(to_np(model.losses[-1]))
    model.compile(keras.optimizers.SGD(0.05), "mse")
    # The outputs' targets are the outputs: only the penalty moves them.
    model.fit(x, to_np(model(x)), epochs=5, verbose=0)
    model(x)
    assert float(to_np(model.losses[-1])) < before


def test_masks_and_save_load(tmp_path):
    tokens = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(20, 4, mask_zero=True)(tokens)
    attention = keras_attention.Attention(score="additive", attention_width=3)
    heads = keras_attention.MultiHead(
        attention, 2, reg_index=0, reg_factor=0.1
    )(x)
    # The output is (batch, time, dim, heads) and its mask the copies'
    # (batch, time): Keras's layout, a mask over the leading axes, so
    # masked layers downstream skip the padded steps.
    y = keras.layers.TimeDistributed(keras.layers.Flatten())(heads)
    pooled = keras.layers.GlobalAveragePooling1D()(y)
    model = keras.Model(tokens, [pooled, heads])
    ids = np.array([[1, 2, 3, 0], [4, 5, 6, 7]])
    out, per_head = (to_np(t) for t in model(ids))
    assert out.shape == (2, 8) and per_head.shape == (2, 4, 4, 2)
    kept = [per_head[b][ids[b] > 0].reshape(-1, 8) for b in range(2)]
    np.testing.assert_allclose(out, [k.mean(0) for k in kept], atol=1e-6)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(
        to_np(loaded(ids)[0]), to_np(model(ids)[0]), atol=1e-6
    )
    # The mask reached the copies: a padded step gets no weight.
    wrapper = model.layers[2]
    hidden = model.layers[1](ids)
    _, a = wrapper.copies[0](
        hidden, query_mask=ids > 0, return_attention_scores=True
    )
    assert np.all(to_np(a)[0, :, 3] == 0)


@keras.saving.register_keras_serializable(package="test_wrapper")
class Probe(keras.layers.Layer):
    """Outputs 1 where it got a mask, plus 10 when training."""

    def call(self, inputs, mask=None, training=None):
        seen = 1.0 if mask is not None else 0.0
        return inputs * 0 + seen + (10.0 if training else 0.0)


def test_mask_and_training_are_passed_on():
    layer = keras_attention.MultiHead(Probe(), 2)
    x = np.ones((1, 3, 2), "float32")
    out = to_np(layer(x, mask=np.ones((1, 3), bool), training=True))
    assert np.all(out == 11.0)


def test_config_round_trip():
    layer = keras_attention.MultiHead(
        keras.layers.Dense(2), 2, reg_index=0, reg_factor=0.1
    )
    config = layer.get_config()
    clone = keras_attention.MultiHead.from_config(config)
    assert clone.get_config() == config


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"layer": "dense"}, "expects a `keras.layers.Layer`"),
        ({"num_heads": 0}, "num_heads=0"),
        ({"reg_index": -1}, "reg_index=-1"),
        ({"reg_index": 0, "reg_factor": -1.0}, "reg_factor=-1.0"),
        ({"reg_index": [0, 1], "reg_factor": [1.0] * 3}, "one per"),
    ],
)
def test_bad_arguments(kwargs, match):
    kwargs = {"layer": keras.layers.Dense(2), "num_heads": 2, **kwargs}
    error = TypeError if kwargs["layer"] == "dense" else ValueError
    with pytest.raises(error, match=match):
        keras_attention.MultiHead(**kwargs)


def test_reg_index_out_of_range():
    layer = keras_attention.MultiHead(keras.layers.Dense(2), 2, reg_index=2)
    with pytest.raises(ValueError, match="out of range"):
        layer(np.ones((1, 3), "float32"))


@pytest.mark.filterwarnings("ignore:Layer .* does not have a `quantize`")
def test_quantized_copies_save_and_load(tmp_path):
    inputs = keras.Input((4,))
    model = keras.Model(
        inputs, keras_attention.MultiHead(keras.layers.Dense(3), 2)(inputs)
    )
    with quick_collections():
        model.quantize("int8")
    x = np.random.default_rng(0).normal(size=(2, 4)).astype("float32")
    path = str(tmp_path / "q.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(to_np(loaded(x)), to_np(model(x)), atol=1e-6)
