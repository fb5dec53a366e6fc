"""ops/_torch_probe.py: what the planner asks PyTorch of a call, PyTorch
lane only.

- `lowers`: this package's mods lower in FlexAttention; a gather by
  `take`, a cast of a whole table, a mod that raises do not.
- `records_gradients`: autograd's answer, not the layer's `training`.
- Each multi-head layer called eagerly with `training=False` outside
  `torch.no_grad()`, at a size that would take PyTorch's FlexAttention on
  the CPU, keeps a kernel with a backward pass; under `torch.no_grad()` it
  takes FlexAttention.
"""

import dataclasses

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention.ops import _native_plan
from keras_attention.ops import mods
from keras_attention.ops import plan as plan_lib
from tests.conftest import BACKEND
from tests.ops.test_native_torch import _cases
from tests.ops.test_native_torch import _flex_call

pytestmark = pytest.mark.skipif(BACKEND != "torch", reason="PyTorch only")


@pytest.fixture
def probe():
    from keras_attention.ops import _torch_probe

    return _torch_probe


def test_our_mods_lower_and_a_take_does_not(rand, probe):
    for name, (score_mod, mask_mod) in _cases(rand).items():
        assert probe.lowers(score_mod, mask_mod), name
    table = ops.convert_to_tensor(rand(4))
    refused = {
        "take": lambda s, b, h, q, kv: s + ops.take(table, h),
        "cast of a table": lambda s, b, h, q, kv: (
            s + ops.cast(table, "float16")[0]
        ),
        "raises": lambda s, b, h, q, kv: s + table.shape[5],
    }
    for name, score_mod in refused.items():
        assert not probe.lowers(score_mod, None), name
    layer = keras_attention.RelativePositionBias(num_heads=4)
    assert probe.lowers(layer, None)


def test_records_gradients_is_autograd(rand, probe):
    import torch

    call = _flex_call(rand)
    assert not probe.records_gradients(call)  # plain arrays
    query = torch.tensor(call.query, requires_grad=True)
    call = dataclasses.replace(call, query=query)
    assert probe.records_gradients(call)
    with torch.no_grad():
        assert not probe.records_gradients(call)
    table = keras.Variable(rand(8, 4))
    call = _flex_call(
        rand, score_mod=mods.relative_position_bias(table, 8, 16, True)
    )
    assert probe.records_gradients(call)


def _layers():
    ka = keras_attention
    return {
        "mha": ka.MultiHeadAttention(2, 4),
        "self": ka.SelfAttention(2),
        "gqa": ka.GroupedQueryAttention(4, 4, 2),
        "mla": ka.MultiHeadLatentAttention(
            2,
            kv_lora_rank=4,
            qk_nope_head_dim=4,
            qk_rope_head_dim=2,
            v_head_dim=4,
        ),
    }


def test_an_eager_call_outside_no_grad_keeps_a_backward(
    rand, plans, monkeypatch
):
    import torch

    from keras_attention.ops import _native_torch

    # A short call planned as a long one: the blocks, then FlexAttention
    # (uncompiled) wherever the call is not differentiated.
    monkeypatch.setattr(plan_lib, "AUTO_CHUNK_MIN_BYTES", 1)
    monkeypatch.setattr(_native_plan, "CPU_FLEX_MIN_LENGTH", 8)
    monkeypatch.setattr(_native_torch, "COMPILE", False)
    x = rand(1, 8, 8)
    document = mods.document(np.repeat(np.arange(2), 4)[None])
    for name, layer in _layers().items():
        args = (x,) if name in ("self", "mla") else (x, x)
        plans.clear()
        layer(*args, mask_mod=document, training=False)
        assert plans[-1].path == "blocks", name
        assert "no backward pass on the CPU" in plans[-1].reason, name
        plans.clear()
        with torch.no_grad():
            layer(*args, mask_mod=document, training=False)
        assert plans[-1].path == "torch_flex", name
