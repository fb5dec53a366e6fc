"""Heads a distribution's layout cannot split: `layers/_sharding.py`.

`layout_map(mesh)` without `model=` splits every projection's heads over
the model axis; a layer whose heads that axis does not divide failed
inside JAX (`IndivisibleError`) as it made its variables (issue 54). The
layer now raises first, on every backend: the check reads the layouts,
not the devices, so a mesh of device names is enough.
"""

import re

import keras
import numpy as np
import pytest

import keras_attention as ka
from keras_attention.layers import _sharding

MESH_DEVICES = [f"cpu:{i}" for i in range(8)]


def _distribution(model=None):
    mesh = keras.distribution.DeviceMesh(
        (2, 4), ["batch", "model"], MESH_DEVICES
    )
    return keras.distribution.ModelParallel(
        layout_map=ka.distribution.layout_map(mesh, model=model),
        batch_dim_name="batch",
    )


def _inputs():
    return np.zeros((2, 3, 16), "float32")


def test_key_value_heads_the_model_axis_does_not_divide():
    layer = ka.GroupedQueryAttention(8, 4, 2, name="gqa")
    with _distribution().scope():
        with pytest.raises(ValueError) as error:
            layer(_inputs(), _inputs())
    assert str(error.value) == (
        "GroupedQueryAttention 'gqa' has 2 key/value heads, which the mesh "
        "axis 'model' (4 devices) of the distribution's layout for "
        "`gqa/key/kernel` does not divide: "
        "`keras_attention.distribution.layout_map(mesh, model=...)`, given "
        "the model built once outside the distribution, replicates them. "
        "Received: key/value heads=2, device_mesh.shape['model']=4"
    )
    assert not layer.weights


@pytest.mark.parametrize(
    "make, call",
    [
        (lambda: ka.MultiHeadAttention(2, 4, name="mha"), 2),
        (lambda: ka.SelfAttention(num_heads=2, name="mha"), 1),
        (
            lambda: ka.MultiHeadLatentAttention(
                num_heads=2,
                kv_lora_rank=8,
                qk_nope_head_dim=4,
                qk_rope_head_dim=2,
                v_head_dim=4,
                name="mha",
            ),
            1,
        ),
    ],
)
def test_query_heads_the_model_axis_does_not_divide(make, call):
    layer = make()
    with _distribution().scope():
        with pytest.raises(
            ValueError,
            match=re.escape(
                "'mha' has 2 query heads, which the mesh axis 'model' (4 "
                "devices) of the distribution's layout for `mha/query/kernel`"
                " does not divide: each device must hold whole query heads"
            ),
        ):
            layer(*[_inputs()] * call)


def test_heads_the_layout_replicates_or_divides_pass():
    single = ka.GroupedQueryAttention(8, 4, 2, name="gqa")
    single(_inputs(), _inputs())
    with _distribution(model=single).scope():
        # The key/value kernels replicated by `model=`, the query heads
        # split 4 ways: nothing to refuse.
        _sharding.check_heads(single, 4, 2)
        _sharding.check_heads(ka.MultiHeadAttention(8, 2, name="x"), 8)
    # Outside a ModelParallel distribution nothing is split.
    _sharding.check_heads(single, 3, 1)
