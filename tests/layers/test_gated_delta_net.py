"""`keras_attention.GatedDeltaNet`: equal to keras-hub's
`Qwen3_5GatedDeltaNet` with its weights, padding honoured (left and
right), decoding with the state equal to the full pass, save and load,
the layer basics and the errors."""

import os

import keras
import numpy as np
import pytest

import keras_attention
from tests import layer_basics

hub_module = pytest.importorskip(
    "keras_hub.src.models.qwen3_5.qwen3_5_gated_delta_net"
)

# Tiny configurations: (key heads, key size, value heads, value size,
# convolution width), grouped (2 over 4) and not.
CONFIGS = [(2, 4, 4, 3, 4), (1, 3, 1, 5, 2)]
FEATURES = 8
TOLERANCE = 1e-5

# keras-hub's weight names -> ours: the same, one to one, in one order
# (`set_weights` maps them; the table is checked, so a renamed weight
# shows here).
HUB_NAMES = {
    "conv1d_kernel": "conv1d_kernel",
    "dt_bias": "dt_bias",
    "A_log": "A_log",
    "in_proj_qkv/kernel": "in_proj_qkv/kernel",
    "in_proj_z/kernel": "in_proj_z/kernel",
    "in_proj_b/kernel": "in_proj_b/kernel",
    "in_proj_a/kernel": "in_proj_a/kernel",
    "norm/scale": "norm/scale",
    "out_proj/kernel": "out_proj/kernel",
}


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _layer(config, chunk_size, **options):
    """Our layer of a `(key_heads, key_dim, value_heads, value_dim,
    conv width)` config, built."""
    key_heads, key_dim, value_heads, value_dim, width = config
    layer = keras_attention.GatedDeltaNet(
        key_heads,
        key_dim,
        num_value_heads=value_heads,
        value_head_dim=value_dim,
        conv_kernel_size=width,
        chunk_size=chunk_size,
        **options,
    )
    layer.build((None, None, FEATURES))
    return layer


def _pair(rng, config, chunk_size=64):
    """keras-hub's layer and ours with the same random weights."""
    key_heads, key_dim, value_heads, value_dim, width = config
    hub = hub_module.Qwen3_5GatedDeltaNet(
        FEATURES, key_heads, value_heads, key_dim, value_dim, width
    )
    hub.build((None, None, FEATURES))
    for weight in hub.weights:
        weight.assign(0.3 * rng.normal(size=weight.shape))
    ours = _layer(config, chunk_size)
    names = [w.path.split("/", 1)[1] for w in ours.weights]
    hub_names = [HUB_NAMES[w.path.split("/", 1)[1]] for w in hub.weights]
    assert names == hub_names
    ours.set_weights(hub.get_weights())
    return hub, ours


@pytest.mark.skipif(
    keras.backend.backend() == "jax",
    reason="keras-hub's full pass unrolls 63 steps of Python per chunk: "
    "20 s to compile on JAX; there its layer is checked step by step "
    "(test_decoding_with_keras_hubs_cache_equals_keras_hub) and its chunked "
    "function against the op (tests/ops/test_gated_delta.py)",
)
@pytest.mark.parametrize("config", CONFIGS)
def test_equals_keras_hub_with_its_weights(rng, config):
    hub, ours = _pair(rng, config, chunk_size=8)
    x = rng.normal(size=(2, 21, FEATURES)).astype("float32")
    np.testing.assert_allclose(
        _numpy(ours(x)), _numpy(hub(x)), atol=TOLERANCE, rtol=1e-5
    )


def test_decoding_with_keras_hubs_cache_equals_keras_hub(rng):
    hub, ours = _pair(rng, CONFIGS[0])
    x = rng.normal(size=(2, 9, FEATURES)).astype("float32")
    cache = keras_attention.GatedDeltaCache.allocate(ours, 2)
    theirs, ours_cache = cache.tensors, cache.tensors
    for t in range(9):
        step = x[:, t : t + 1]
        want, theirs = hub(step, cache=theirs, cache_update_index=t)
        got, ours_cache = ours(step, cache=ours_cache, cache_update_index=t)
        np.testing.assert_allclose(_numpy(got), _numpy(want), atol=TOLERANCE)
    for got, want in zip(ours_cache, theirs, strict=True):
        np.testing.assert_allclose(_numpy(got), _numpy(want), atol=TOLERANCE)


@pytest.mark.parametrize("prefill", [0, 1, 6])
def test_prefill_then_decoding_equals_the_full_pass(rng, prefill):
    _, layer = _pair(rng, CONFIGS[0], chunk_size=4)
    x = rng.normal(size=(2, 11, FEATURES)).astype("float32")
    full = _numpy(layer(x))
    cache = keras_attention.GatedDeltaCache.allocate(layer, 2)
    outs = []
    if prefill:
        out, cache = layer(x[:, :prefill], cache=cache)
        outs.append(_numpy(out))
    for t in range(prefill, 11):
        out, cache = layer(x[:, t : t + 1], cache=cache)
        outs.append(_numpy(out))
    np.testing.assert_allclose(
        np.concatenate(outs, axis=1), full, atol=TOLERANCE
    )
    # The state after decoding is the state after one call on the whole.
    _, whole = layer(
        x, cache=keras_attention.GatedDeltaCache.allocate(layer, 2)
    )
    for got, want in zip(cache.tensors, whole.tensors, strict=True):
        np.testing.assert_allclose(_numpy(got), _numpy(want), atol=TOLERANCE)


def test_decoding_compiled_equals_the_full_pass(rng):
    _, layer = _pair(rng, CONFIGS[1])
    x = rng.normal(size=(1, 6, FEATURES)).astype("float32")
    full = _numpy(layer(x))
    step = keras.Input(batch_shape=(1, 1, FEATURES))
    cache = keras_attention.GatedDeltaCache.allocate(layer, 1)
    conv = keras.Input(batch_shape=tuple(cache.conv_state.shape))
    state = keras.Input(batch_shape=tuple(cache.recurrent_state.shape))
    out, (new_conv, new_state) = layer(step, cache=(conv, state))
    model = keras.Model([step, conv, state], [out, new_conv, new_state])
    tensors, outs = [_numpy(t) for t in cache.tensors], []
    for t in range(6):
        out, *tensors = model.predict_on_batch([x[:, t : t + 1], *tensors])
        outs.append(out)
    np.testing.assert_allclose(
        np.concatenate(outs, axis=1), full, atol=TOLERANCE
    )


@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_rows_equal_their_unpadded_selves(rng, side):
    _, layer = _pair(rng, CONFIGS[0], chunk_size=4)
    lengths = (9, 4, 1)
    x = rng.normal(size=(3, 9, FEATURES)).astype("float32")
    positions = np.arange(9)[None]
    lengths_ = np.array(lengths)[:, None]
    mask = (
        positions < lengths_ if side == "right" else positions >= 9 - lengths_
    )
    cache = keras_attention.GatedDeltaCache.allocate(layer, 3)
    out, cache = layer(x, mask=mask, cache=cache)
    out = _numpy(out)
    assert np.all(out[~mask] == 0)
    for row in range(len(lengths)):
        alone_x = x[row : row + 1][mask[row : row + 1]][None]
        one = keras_attention.GatedDeltaCache.allocate(layer, 1)
        alone, one = layer(alone_x, cache=one)
        np.testing.assert_allclose(
            out[row][mask[row]], _numpy(alone)[0], atol=TOLERANCE
        )
        # The state (the convolution's and the recurrence's) too: decoding
        # goes on from each row's last real position.
        for got, want in zip(cache.tensors, one.tensors, strict=True):
            np.testing.assert_allclose(
                _numpy(got)[row], _numpy(want)[0], atol=TOLERANCE
            )


def test_a_keras_mask_is_used(rng):
    _, layer = _pair(rng, CONFIGS[1])
    ids = np.array([[3, 1, 4, 0, 0]])
    embedded = keras.layers.Embedding(6, FEATURES, mask_zero=True)
    x = embedded(ids)
    explicit = layer(x, mask=ids != 0)
    np.testing.assert_allclose(_numpy(layer(x)), _numpy(explicit))


def _check_saves_and_loads(layer, x, path):
    """A model of `layer` saved to `.keras` and loaded gives the same
    outputs; the layer's config round-trips. Returns the config."""
    inputs = keras.Input((None, FEATURES))
    model = keras.Model(inputs, layer(inputs))
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(
        _numpy(loaded.predict_on_batch(x)), _numpy(model.predict_on_batch(x))
    )
    config = layer.get_config()
    again = keras_attention.GatedDeltaNet.from_config(config)
    assert again.get_config() == config
    return config


def test_save_and_load_round_trip(rng, tmp_path):
    _, layer = _pair(rng, CONFIGS[0])
    x = rng.normal(size=(2, 7, FEATURES)).astype("float32")
    _check_saves_and_loads(layer, x, os.path.join(tmp_path, "gdn.keras"))


def _per_channel(rng, config, chunk_size=64):
    """A layer with KDA's decay, one per key channel, random weights."""
    layer = _layer(config, chunk_size, per_channel_decay=True)
    for weight in layer.weights:
        weight.assign(0.3 * rng.normal(size=weight.shape))
    return layer


def test_per_channel_decay_with_one_decay_per_head_is_qwen35s(rng):
    """Each head's decay projection copied to its key channels (in fla's
    `(head, channel)` order) gives the per-head layer's numbers."""
    _, per_head = _pair(rng, CONFIGS[0], chunk_size=4)
    per_channel = _per_channel(rng, CONFIGS[0], chunk_size=4)
    key_dim = CONFIGS[0][1]
    weights = []
    for weight, name in zip(
        per_head.get_weights(), (w.path for w in per_head.weights), strict=True
    ):
        if name.endswith(("in_proj_a/kernel", "dt_bias")):
            weight = np.repeat(weight, key_dim, axis=-1)
        weights.append(weight)
    per_channel.set_weights(weights)
    # 20 positions: past the recurrent form's 16, the chunked one runs.
    x = rng.normal(size=(2, 20, FEATURES)).astype("float32")
    np.testing.assert_allclose(
        _numpy(per_channel(x)), _numpy(per_head(x)), atol=TOLERANCE
    )


def test_per_channel_decay_decodes_and_pads_as_the_full_pass(rng):
    layer = _per_channel(rng, CONFIGS[0], chunk_size=4)
    x = rng.normal(size=(2, 9, FEATURES)).astype("float32")
    full = _numpy(layer(x))
    cache = keras_attention.GatedDeltaCache.allocate(layer, 2)
    out, cache = layer(x[:, :5], cache=cache)
    outs = [_numpy(out)]
    for t in range(5, 9):
        out, cache = layer(x[:, t : t + 1], cache=cache)
        outs.append(_numpy(out))
    np.testing.assert_allclose(
        np.concatenate(outs, axis=1), full, atol=TOLERANCE
    )
    # The second row right-padded after 6 positions: its first six as the
    # row alone, its state as the state of the row alone.
    mask = np.arange(9)[None] < np.array([[9], [6]])
    one = keras_attention.GatedDeltaCache.allocate(layer, 2)
    padded, one = layer(x, mask=mask, cache=one)
    alone = keras_attention.GatedDeltaCache.allocate(layer, 1)
    want, alone = layer(x[1:, :6], cache=alone)
    np.testing.assert_allclose(
        _numpy(padded)[1, :6], _numpy(want)[0], atol=TOLERANCE
    )
    np.testing.assert_allclose(
        _numpy(one.recurrent_state)[1],
        _numpy(alone.recurrent_state)[0],
        atol=TOLERANCE,
    )


def test_per_channel_decay_saves_and_loads(rng, tmp_path):
    layer = _per_channel(rng, CONFIGS[1])
    x = rng.normal(size=(1, 5, FEATURES)).astype("float32")
    path = os.path.join(tmp_path, "kda.keras")
    assert _check_saves_and_loads(layer, x, path)["per_channel_decay"] is True


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="TensorFlow's XLA bridge is what refused the scan's gradient; "
    "JAX always compiles, PyTorch's jit_compile is torch.compile",
)
def test_trains_under_xla_as_eagerly(rng):
    """One step of SGD under `jit_compile=True` gives the eager loss and
    weights: the recurrent form (6 positions, one decay per head) and the
    chunked one (20, one decay per key channel)."""
    for length, per_channel in ((6, False), (20, True)):
        x = rng.normal(size=(2, length, FEATURES)).astype("float32")
        y = rng.normal(size=(2, length, FEATURES)).astype("float32")
        models = []
        for jit_compile in (True, False):
            inputs = keras.Input((length, FEATURES))
            layer = keras_attention.GatedDeltaNet(
                2,
                4,
                num_value_heads=4,
                chunk_size=8,
                per_channel_decay=per_channel,
            )
            model = keras.Model(inputs, layer(inputs))
            model.compile(
                optimizer=keras.optimizers.SGD(0.5),
                loss="mse",
                jit_compile=jit_compile,
                run_eagerly=not jit_compile,
            )
            models.append(model)
        models[1].set_weights(models[0].get_weights())
        before = models[0].get_weights()
        losses = [model.train_on_batch(x, y) for model in models]
        np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
        compiled, eager = (model.get_weights() for model in models)
        for a, b in zip(compiled, eager, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5)
        # Every weight moved: each has a gradient.
        assert all(
            not np.allclose(a, old)
            for a, old in zip(compiled, before, strict=True)
        )


def test_layer_basics(rng):
    layer_basics.check_layer_basics(
        keras_attention.GatedDeltaNet,
        {"num_key_heads": 2, "key_head_dim": 4, "num_value_heads": 4},
        rng.normal(size=(2, 5, FEATURES)).astype("float32"),
        expected_output_shape=(2, 5, FEATURES),
        expected_num_trainable_weights=9,
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_key_heads": 0}, "Received: num_key_heads=0"),
        ({"num_value_heads": 3}, "a multiple of num_key_heads=2"),
        ({"conv_kernel_size": 0}, "Received: conv_kernel_size=0"),
        ({"norm_epsilon": -1.0}, "Received: norm_epsilon=-1.0"),
        ({"chunk_size": -4}, "Received: chunk_size=-4"),
        ({"per_channel_decay": 1}, "Received: per_channel_decay=1"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    options = {"num_key_heads": 2, "key_head_dim": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        keras_attention.GatedDeltaNet(**options)


def test_bad_inputs_and_caches_are_refused(rng):
    layer = keras_attention.GatedDeltaNet(2, 4, num_value_heads=4)
    with pytest.raises(ValueError, match=r"inputs.shape=\(2, 8\)"):
        layer(np.zeros((2, 8), "float32"))
    x = np.zeros((2, 3, FEATURES), "float32")
    with pytest.raises(ValueError, match="should not be set if `cache`"):
        layer(x, cache_update_index=0)
    wrong = (np.zeros((2, 32, 3), "float32"), np.zeros((2, 4, 4, 5), "float32"))
    with pytest.raises(
        ValueError, match=r"recurrent_state.shape=\(2, 4, 4, 5\)"
    ):
        layer(x, cache=wrong)
