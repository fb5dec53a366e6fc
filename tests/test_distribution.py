"""`keras_attention.distribution.layout_map`: the rules on every backend,
and one sharded training step on 8 simulated CPU devices (JAX).

The map is a plain `keras.distribution.LayoutMap`, so its rules are read
on any backend from a mesh of device names. `ModelParallel` places
weights on JAX only, and the 8 devices must exist before JAX starts, so
the training step runs in a subprocess with
`XLA_FLAGS=--xla_force_host_platform_device_count=8`, in the JAX lane.
"""

import json

import keras
import numpy as np
import pytest

import keras_attention as ka
from tests import subprocesses as processes

DEVICES = [f"cpu:{i}" for i in range(8)]


def _mesh(shape=(2, 4), names=("batch", "model")):
    return keras.distribution.DeviceMesh(shape, list(names), DEVICES)


def _axes(layouts, path):
    layout = layouts[path]
    return None if layout is None else tuple(layout.axes)


def _model(kv_heads=2, heads=4, every_layer=True):
    """Every layer family that shards, with fixed names (and so paths);
    `every_layer=False`: the embedding, MHA and GQA only."""
    ids = keras.Input((6,), dtype="int32")
    x = keras.layers.Embedding(10, 16, name="embedding")(ids)
    x = ka.MultiHeadAttention(heads, 4, name="mha")(x, x)
    x = ka.GroupedQueryAttention(
        head_dim=4,
        num_query_heads=heads,
        num_key_value_heads=kv_heads,
        name="gqa",
    )(x, x)
    if not every_layer:
        return keras.Model(ids, x)
    x = ka.SelfAttention(num_heads=heads, name="self_attention")(x)
    x = ka.MultiHeadLatentAttention(
        num_heads=heads,
        kv_lora_rank=8,
        qk_nope_head_dim=4,
        qk_rope_head_dim=2,
        v_head_dim=4,
        name="mla",
    )(x)
    return keras.Model(ids, x)


def test_projections_split_over_heads_and_output_over_its_input_heads():
    layouts = ka.distribution.layout_map(_mesh())
    model = "model"
    for path in (
        "mha/query/kernel",
        "block/self_attention/key/kernel",
        "gqa/value/kernel",
        "mha/gate/kernel",
        "mla/query/kernel",
        "mla/key_up_kernel",
        "mla/value_up_kernel",
    ):
        assert _axes(layouts, path) == (None, model), path
    assert _axes(layouts, "mha/query/bias") == (model,)
    assert _axes(layouts, "gqa/key/bias") == (model,)
    # Row split: the output kernel `(heads, depth, dim)` over its heads.
    assert _axes(layouts, "mha/attention_output/kernel") == (model,)
    assert _axes(layouts, "mha/attention_output/bias") is None
    assert _axes(layouts, "mla/kv_down/kernel") is None


def test_embeddings_and_feed_forward_split_over_the_model_axis():
    layouts = ka.distribution.layout_map(
        _mesh(names=("data", "tp")), "tp", "data"
    )
    for path in (
        "embedding/embeddings",
        "source_embedding/embeddings",
        "target_embedding/embeddings",
        "encoder_0/feed_forward_inner/kernel",
        "attention/ws1",
    ):
        assert _axes(layouts, path) == (None, "tp"), path
    assert _axes(layouts, "decoder_0/feed_forward_outer/kernel") == ("tp",)
    assert _axes(layouts, "attention/ws2") == ("tp",)
    assert _axes(layouts, "encoder/forward_gru/gru_cell/kernel") is None
    assert _axes(layouts, "output_layer/kernel") is None
    assert layouts.device_mesh.axis_names == ["data", "tp"]


def test_model_replicates_key_value_heads_the_axis_does_not_divide():
    model = _model(kv_heads=2, every_layer=False)
    layouts = ka.distribution.layout_map(_mesh(), model=model)
    assert _axes(layouts, "gqa/key/kernel") == (None, None, None)
    assert _axes(layouts, "gqa/value/bias") == (None, None)
    assert _axes(layouts, "gqa/query/kernel") == (None, "model")
    assert _axes(layouts, "mha/key/kernel") == (None, "model")
    # Every variable of the model has at most one entry.
    for variable in model.variables:
        layouts[variable.path]
    # Two key/value heads split over a model axis of 2.
    layouts = ka.distribution.layout_map(_mesh((4, 2)), model=model)
    assert _axes(layouts, "gqa/key/kernel") == (None, "model")


def test_overrides_win_and_the_rest_is_merged():
    mesh = _mesh()
    mine = keras.distribution.LayoutMap(mesh)
    mine[".*mha/query/kernel"] = (None, None, "model")
    mine["dense.*kernel"] = ("batch", None)
    layouts = ka.distribution.layout_map(mesh, overrides=mine)
    assert _axes(layouts, "mha/query/kernel") == (None, None, "model")
    assert _axes(layouts, "gqa/query/kernel") == (None, "model")
    assert _axes(layouts, "dense_1/kernel") == ("batch", None)
    assert len(mine) == 2  # The user's map is left as it was.


def test_model_axis_that_does_not_divide_the_heads_is_an_error():
    layer = ka.MultiHeadAttention(2, 4, name="mha")
    layer(np.zeros((1, 3, 8)), np.zeros((1, 3, 8)))
    with pytest.raises(
        ValueError, match=r"Received: heads=2, device_mesh.shape\['model'\]=4"
    ):
        ka.distribution.layout_map(_mesh(), model=layer)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"device_mesh": "cpu"}, "Received: device_mesh='cpu'"),
        ({"model_axis": "heads"}, "Received: model_axis='heads'"),
        ({"batch_axis": None}, "Received: batch_axis=None"),
        ({"batch_axis": "model"}, "other than `model_axis`"),
        ({"model": "nope"}, "Received: model='nope'"),
        ({"overrides": {}}, "Received: overrides={}"),
    ],
)
def test_bad_arguments_name_what_was_received(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ka.distribution.layout_map(**{"device_mesh": _mesh(), **kwargs})


def test_overrides_on_another_mesh_is_an_error():
    other = keras.distribution.LayoutMap(_mesh((1, 8)))
    with pytest.raises(ValueError, match="the same mesh as `device_mesh`"):
        ka.distribution.layout_map(_mesh(), overrides=other)


def one_step_on_eight_devices():
    """Run in a subprocess: one step on 1 device and on a (2, 4) mesh.

    Prints JSON: both losses, the largest weight difference after the
    step and, per variable path, its sharding spec and a shard's shape.
    """
    import jax

    assert len(jax.devices()) == 8, jax.devices()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.integers(1, 10, (8, 6)).astype("int32")
    y = rng.normal(size=(8, 6, 16)).astype("float32")
    single = _model(kv_heads=2)
    weights = single.get_weights()
    single.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    mesh = keras.distribution.DeviceMesh(
        (2, 4), ["batch", "model"], keras.distribution.list_devices()
    )
    layouts = ka.distribution.layout_map(mesh, model=single)
    distribution = keras.distribution.ModelParallel(
        layout_map=layouts, batch_dim_name="batch"
    )
    with distribution.scope():
        sharded = keras.Model.from_config(single.get_config())
        sharded.set_weights(weights)
        sharded.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        sharded_loss = sharded.train_on_batch(x, y)
    single_loss = single.train_on_batch(x, y)
    difference = max(
        float(np.max(np.abs(a - b)))
        for a, b in zip(
            single.get_weights(), sharded.get_weights(), strict=True
        )
    )
    moved = max(
        float(np.max(np.abs(a - b)))
        for a, b in zip(weights, sharded.get_weights(), strict=True)
    )
    shards = {
        v.path: [
            str(v.value.sharding.spec),
            list(v.value.addressable_shards[0].data.shape),
        ]
        for v in sharded.variables
    }
    print(
        json.dumps(
            {
                "losses": [float(single_loss), float(sharded_loss)],
                "difference": difference,
                "moved": moved,
                "paths_equal": [v.path for v in single.variables]
                == [v.path for v in sharded.variables],
                "shards": shards,
            }
        )
    )


@pytest.mark.heavy
@pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="runs in the JAX lane"
)
def test_one_sharded_step_equals_one_device_on_a_2x4_mesh():
    env = processes.environment(
        KERAS_BACKEND="jax",
        XLA_FLAGS="--xla_force_host_platform_device_count=8",
    )
    code = (
        "from tests import test_distribution; "
        "test_distribution.one_step_on_eight_devices()"
    )
    done = processes.run_python(["-c", code], env=env)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    single, sharded = report["losses"]
    np.testing.assert_allclose(sharded, single, rtol=1e-5)
    assert report["difference"] < 1e-5
    assert report["moved"] > 1e-3  # The step trained.
    assert report["paths_equal"]
    shards = report["shards"]
    # Column split: 4 heads over 4 devices, one head each.
    assert shards["mha/query/kernel"][1] == [16, 1, 4]
    assert shards["mha/key/kernel"][1] == [16, 1, 4]
    assert shards["self_attention/value/kernel"][1] == [16, 1, 4]
    assert shards["mha/query/bias"][1] == [1, 4]
    assert shards["mla/key_up_kernel"][1] == [8, 1, 4]
    # Row split: the output kernel over its input heads.
    assert shards["mha/attention_output/kernel"][1] == [1, 4, 16]
    assert shards["mla/attention_output/kernel"][1] == [1, 4, 16]
    assert shards["mha/attention_output/bias"][1] == [16]
    # GQA's 2 key/value heads do not split over 4: replicated.
    assert shards["gqa/key/kernel"][1] == [16, 2, 4]
    assert shards["gqa/query/kernel"][1] == [16, 1, 4]
    assert shards["embedding/embeddings"][1] == [10, 4]
    assert "model" in shards["mha/query/kernel"][0]
