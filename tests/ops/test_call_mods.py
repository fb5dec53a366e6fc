"""ops/_call_mods.py and `_native_plan.describe`: what the planner and
the native kernels are told of a call, every lane.

- `mask_kinds`: each source of masking named as the planner reads it.
- `call_mods`: every mask and mod of a call as one score mod and one mask
  mod (what PyTorch's FlexAttention takes): the dense kernel given only
  those two equals the dense kernel given the call itself.
- `describe`: the `NativeCall` of a call.
"""

import dataclasses

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention.ops import _call_mods
from keras_attention.ops import _native_plan
from keras_attention.ops import engine
from keras_attention.ops import mods
from keras_attention.ops.masks import AttentionMasks
from keras_attention.ops.masks import attention_masks
from keras_attention.ops.plan import Plan

SEGMENTS = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]])


def _call(rand, masks=None, **fields):
    q, kv = rand(2, 6, 4, 8), rand(2, 6, 2, 8)
    return engine.AttentionCall(
        q,
        kv,
        kv,
        engine.ScaledDot(0.3),
        masks=masks or AttentionMasks(),
        **fields,
    )


@pytest.mark.parametrize(
    "masks, kinds",
    [
        (dict(use_causal_mask=True), ("causal",)),
        (dict(use_causal_mask=True, sliding_window=4), ("causal_window",)),
        (dict(sliding_window=4), ("band",)),
        (dict(key_mask=np.ones((2, 6), bool)), ("key_padding",)),
        (dict(query_mask=np.ones((2, 6), bool)), ("query_padding",)),
        (dict(attention_mask=np.ones((2, 6, 6), bool)), ("attention_mask",)),
        (dict(mask_mods=(mods.causal(),)), ("causal",)),
        (
            dict(
                mask_mods=(
                    keras_attention.ops.and_masks(
                        mods.causal(), mods.sliding_window(3)
                    ),
                )
            ),
            ("causal_window",),
        ),
        (dict(mask_mods=(mods.padding([3, 6]),)), ("lengths",)),
        (dict(mask_mods=(mods.document(SEGMENTS),)), ("document",)),
        (
            dict(mask_mods=(mods.document(SEGMENTS, SEGMENTS[::-1]),)),
            ("mask_mod",),
        ),
        (dict(mask_mods=(mods.prefix_lm(2),)), ("mask_mod",)),
        (
            dict(use_causal_mask=True, mask_mods=(mods.document(SEGMENTS),)),
            ("causal", "document"),
        ),
    ],
)
def test_mask_kinds_name_each_mask(rand, masks, kinds):
    call = _call(rand, attention_masks(**masks))
    assert _call_mods.mask_kinds(call) == kinds


def test_the_window_and_the_lengths_are_read_back(rand):
    call = _call(
        rand,
        attention_masks(
            use_causal_mask=True,
            sliding_window=4,
            mask_mods=(mods.padding([3, 6]),),
        ),
    )
    assert _call_mods.causal_window(call) == (True, 3)
    padding = _call_mods.mask_mod_of_kind(call, "lengths")
    assert ops.convert_to_numpy(padding.lengths).tolist() == [3, 6]
    assert _call_mods.causal_window(_call(rand)) == (False, None)


def test_call_mods_are_the_whole_call(rand, rng):
    """The dense kernel of the call, and of a call holding only the two
    mods `call_mods` makes of it: equal, every mask and mod included
    (padding masks, an explicit mask, a band, a mask mod, a score mod, a
    bias, the query offset of a cache: 5 queries at positions 1-5)."""
    key_mask = rng.random((2, 6)) > 0.3
    key_mask[1] = False  # a row with no kept key: zeros both ways
    masks = attention_masks(
        query_mask=rng.random((2, 5)) > 0.2,
        key_mask=key_mask,
        attention_mask=rng.random((2, 5, 6)) > 0.2,
        band=(3, None),
        mask_mods=(mods.document(SEGMENTS),),
    )
    kv = rand(2, 6, 2, 8)
    call = engine.AttentionCall(
        rand(2, 5, 4, 8),
        kv,
        kv,
        engine.ScaledDot(0.3),
        masks=masks,
        score_mod=mods.alibi(4),
        bias=rand(2, 1, 5, 6),
        query_offset=1,
    )
    score_mod, mask_mod = _call_mods.call_mods(call)
    plain = dataclasses.replace(
        call,
        masks=AttentionMasks(mask_mods=(mask_mod,)),
        score_mod=score_mod,
        bias=None,
        query_offset=0,
    )
    want = engine.run(call, Plan("dense")).output
    got = engine.run(plain, Plan("dense")).output
    np.testing.assert_allclose(
        ops.convert_to_numpy(got), ops.convert_to_numpy(want), atol=1e-6
    )
    assert np.all(ops.convert_to_numpy(want)[1] == 0)


def test_a_call_without_masks_has_no_mods(rand):
    assert _call_mods.call_mods(_call(rand)) == (None, None)


def test_describe_reads_the_call(rand, monkeypatch):
    # As on a platform with a native kernel (only there is it read).
    platform = _native_plan.platform()
    kernels = _native_plan.KERNELS.get(platform) or (_native_plan.SDPA,)
    monkeypatch.setitem(_native_plan.KERNELS, platform, kernels)
    call = _call(
        rand,
        attention_masks(use_causal_mask=True),
        score_mod=mods.soft_cap(5.0),
        query_offset=2,
    )
    native = _native_plan.describe(call, backward=False)
    assert native.masks == ("causal",)
    assert native.score_mod and not native.bias and native.offset
    assert (native.head_dim, native.value_dim, native.grouped) == (8, 8, True)
    assert native.dtype == "float32"
    assert native.backward is False
    # Never probed off PyTorch; on its CPU not for a call too short for
    # FlexAttention there, nor for one that is differentiated.
    assert native.lowers is None
    if keras.backend.backend() != "torch":
        assert _native_plan.describe(call).backward is True
        return
    monkeypatch.setattr(_native_plan, "CPU_FLEX_MIN_LENGTH", 6)
    assert _native_plan.describe(call, backward=False).lowers is True
    monkeypatch.setattr(_native_plan, "CPU_FLEX_MIN_LENGTH", 7)
    assert _native_plan.describe(call, backward=False).lowers is None


def test_each_flex_call_is_described_once_and_planned_once(
    plans, rand, monkeypatch
):
    described = []
    original = _native_plan.describe

    def counting(*args, **kwargs):
        described.append(original(*args, **kwargs))
        return described[-1]

    monkeypatch.setattr(_native_plan, "describe", counting)
    q = rand(1, 8, 2, 4)
    keras_attention.ops.flex_attention(q, q, q, mask_mod=mods.causal())
    assert len(described) == len(plans) == 1
    if _native_plan.KERNELS.get(_native_plan.platform()):
        assert described[0].masks == ("causal",)
    else:
        # No native kernel here: `choose` reads nothing of the call, and
        # nothing of it is summarised.
        assert described[0] == _native_plan.NativeCall()
    if _native_plan.platform() == ("torch", "cpu"):
        assert plans[0].path == "sdpa", plans[0].reason
    else:
        assert "; ours: " in plans[0].reason
