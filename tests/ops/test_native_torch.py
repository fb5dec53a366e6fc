"""ops/_native_torch.py: PyTorch's kernels equal to this package's.

PyTorch lane only. What runs on this CPU: SDPA itself; FlexAttention's
forward, uncompiled (`COMPILE` off: the path's mods, masks, block mask,
lse and bridges without a compile) and compiled (`heavy`: PyTorch's
inductor kernel, as the planner runs it for inference on the CPU, through
`flex_attention` and a layer). What the planner asks PyTorch
(`ops/_torch_probe.py`) is checked in tests/ops/test_torch_probe.py.
"""

import dataclasses

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention.ops import and_masks
from keras_attention.ops import engine
from keras_attention.ops import mods
from keras_attention.ops.masks import attention_masks
from keras_attention.ops.plan import Plan
from tests.conftest import BACKEND
from tests.ops.test_flex import _mod_cases

pytestmark = pytest.mark.skipif(BACKEND != "torch", reason="PyTorch only")

SEGMENTS = np.repeat(np.arange(4), 4)[None].repeat(2, 0)
SEGMENTS[1, :3] = 7


@pytest.fixture
def torch_native():
    from keras_attention.ops import _native_torch

    return _native_torch


@pytest.fixture
def eager(torch_native, monkeypatch):
    """FlexAttention and its block masks uncompiled."""
    monkeypatch.setattr(torch_native, "COMPILE", False)


def _cases(rand):
    table, tensor = rand(8, 4), rand(1, 4, 16, 16)
    lengths = np.array([0, 11])  # the first example has no key at all
    return _mod_cases(table, tensor, SEGMENTS, lengths)


def _flex_call(rand, score_mod=None, mask_mod=None, **fields):
    q, k, v = rand(2, 16, 4, 8), rand(2, 16, 2, 8), rand(2, 16, 2, 8)
    masks = attention_masks(mask_mods=(mask_mod,))
    return engine.AttentionCall(
        q,
        k,
        v,
        engine.ScaledDot(0.35),
        masks=masks,
        score_mod=score_mod,
        **fields,
    )


def _equal_to_ours(call, path, atol=2e-6, lse=False):
    """The native kernel's `Result` against the dense kernel's."""
    import torch

    with torch.no_grad():
        got = engine.run(call, Plan(path))
        want = engine.run(call, Plan("dense"))
    np.testing.assert_allclose(
        ops.convert_to_numpy(got.output),
        ops.convert_to_numpy(want.output),
        atol=atol,
    )
    if lse:
        np.testing.assert_allclose(
            ops.convert_to_numpy(got.lse),
            ops.convert_to_numpy(want.lse),
            atol=atol,
        )
    return got


def _sdpa_cases(rng, rand):
    """The calls SDPA takes on the CPU: `is_causal`, and masks, mask mods
    and a bias as one dense mask; the first example's keys all padding."""
    key_mask = rng.random((2, 12)) > 0.3
    key_mask[0] = False
    documents = mods.document(np.repeat(np.arange(3), 4)[None].repeat(2, 0))
    window = and_masks(mods.causal(), mods.sliding_window(3))
    return {
        "none": {},
        "causal": {"masks": attention_masks(use_causal_mask=True)},
        "causal_after_a_cache": {
            "masks": attention_masks(use_causal_mask=True),
            "query_offset": 3,
        },
        "key_padding": {"masks": attention_masks(key_mask=key_mask)},
        "query_padding": {
            "masks": attention_masks(query_mask=rng.random((2, 12)) > 0.3)
        },
        "explicit": {
            "masks": attention_masks(
                attention_mask=rng.random((2, 12, 12)) > 0.3
            )
        },
        "documents": {"masks": attention_masks(mask_mods=(documents,))},
        "window": {"masks": attention_masks(mask_mods=(window,))},
        "bias_and_padding": {
            "bias": rand(2, 1, 12, 12),
            "masks": attention_masks(key_mask=key_mask),
        },
    }


def _value_and_gradients(call, path, cotangents):
    """The output, lse (`None` unless asked) and the gradients of the
    query, key and value of `Σ out·g + Σ lse·h` (the rows with a kept
    key) on `path`."""
    import torch

    q, k, v = (
        torch.tensor(ops.convert_to_numpy(t), requires_grad=True)
        for t in (call.query, call.key, call.value)
    )
    call = dataclasses.replace(call, query=q, key=k, value=v)
    result = engine.run(call, Plan(path))
    loss = (result.output * cotangents[0]).sum()
    lse = result.lse
    if lse is not None:
        kept = torch.isfinite(lse)
        loss = loss + torch.where(kept, lse * cotangents[1], 0.0).sum()
        lse = torch.where(kept, lse, -1e9).detach().numpy()
    grads = torch.autograd.grad(loss, (q, k, v))
    return [result.output.detach().numpy(), lse, *(g.numpy() for g in grads)]


@pytest.mark.parametrize("lse", [False, True])
def test_sdpa_equals_ours_with_its_lse_and_gradients(rng, rand, lse):
    """Every call SDPA takes on the CPU: output, lse (through its CPU
    flash kernel) and gradients against the dense kernel's; grouped heads,
    a query with no key (zeros, lse `-inf`)."""
    import torch

    cotangents = (torch.tensor(rand(2, 12, 4, 8)), torch.tensor(rand(2, 4, 12)))
    for name, fields in _sdpa_cases(rng, rand).items():
        q, kv = rand(2, 12, 4, 8), rand(2, 12, 2, 8)
        call = engine.AttentionCall(
            q, kv, rand(2, 12, 2, 8), engine.ScaledDot(0.35), lse=lse, **fields
        )
        got = _value_and_gradients(call, "sdpa", cotangents)
        want = _value_and_gradients(call, "dense", cotangents)
        for what, a, b in zip(
            "out lse dq dk dv".split(), got, want, strict=True
        ):
            if b is not None:
                np.testing.assert_allclose(
                    a, b, atol=1e-5, err_msg=f"{name}: {what}"
                )
        if name == "key_padding":
            assert np.all(got[0][0] == 0)
            assert not lse or np.all(got[1][0] == -1e9)


def test_sdpa_runs_the_planners_cpu_calls(rand, plans):
    """Through `flex_attention` and a layer with sinks, trained and in
    inference, on PyTorch's CPU: the plans name SDPA."""
    import torch

    q = ops.convert_to_tensor(rand(1, 64, 2, 8))
    with torch.no_grad():
        out = keras_attention.ops.flex_attention(
            q, q, q, mask_mod=mods.causal()
        )
    assert plans[-1].path == "sdpa" and "is_causal" in plans[-1].reason
    want = keras_attention.ops.flex_attention(
        q, q, q, mask_mod=mods.causal(), chunk_size=0
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(out), ops.convert_to_numpy(want), atol=1e-6
    )
    layer = keras_attention.SelfAttention(2, use_sinks=True)
    x = torch.tensor(rand(2, 16, 8))
    out = layer(x, use_causal_mask=True, training=True)
    assert plans[-1].path == "sdpa" and "lse" in plans[-1].reason
    out.sum().backward()
    assert all(w.value.grad is not None for w in layer.trainable_weights)


def test_flex_equals_ours_for_every_mod(rand, eager):
    for name, (score_mod, mask_mod) in _cases(rand).items():
        call = _flex_call(rand, score_mod, mask_mod)
        got = _equal_to_ours(call, "torch_flex")
        if name == "padding":  # no key in the first example: zeros
            assert np.all(ops.convert_to_numpy(got.output)[0] == 0)


@pytest.mark.parametrize(
    "q_len, k_len, offset, mask_mods, full",
    [
        (300, 300, 0, (mods.causal(),), 1),
        (300, 300, 0, (and_masks(mods.causal(), mods.sliding_window(64)),), 0),
        (256, 640, 384, (mods.causal(),), 7),
        (200, 330, 0, (mods.band(40, 150),), 0),
        (384, 256, 0, (mods.band(0, None), mods.band(None, 200)), 0),
    ],
)
def test_a_bands_block_mask_is_create_block_masks(
    rand, eager, torch_native, q_len, k_len, offset, mask_mods, full
):
    """A call whose one mask is a band (causal, a window, after a cache's
    positions, an AND of bands) gets its `BlockMask` by arithmetic, block
    for block the one PyTorch's `create_block_mask` makes by evaluating
    the mod on every pair of positions: the partial and the full blocks
    of each row, ends cut by the lengths included. `full`, the full
    blocks counted by hand: causal over 300, block (1, 0) (block 2 is cut
    at 300); after 384 cached keys, the 3 and 4 key blocks before each
    query block's own."""
    from torch.nn.attention import flex_attention as torch_flex

    from keras_attention.ops import _call_mods
    from keras_attention.ops.mask_mods import keep

    q, kv = rand(1, q_len, 2, 8), rand(1, k_len, 2, 8)
    call = engine.AttentionCall(
        q,
        kv,
        kv,
        engine.ScaledDot(0.35),
        masks=attention_masks(mask_mods=mask_mods),
        query_offset=offset,
    )
    mask_mod = _call_mods.call_mods(call)[1]
    assert _call_mods.only_band(call) is not None
    compiled = torch_native._torch_function
    asked = []

    def spy(function):
        asked.append(function.__name__)
        return compiled(function)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch_native, "_torch_function", spy)
        got = torch_native.block_mask(call, mask_mod, "cpu")
    assert asked == []  # no create_block_mask: the band's blocks by arithmetic
    want = torch_flex.create_block_mask(
        lambda b, h, q_, kv_: keep(mask_mod, b, h, q_, kv_),
        None,
        None,
        q_len,
        k_len,
        device="cpu",
    )
    assert got.seq_lengths == want.seq_lengths == (q_len, k_len)
    for name in ("kv_num_blocks", "full_kv_num_blocks"):
        assert getattr(got, name).tolist() == getattr(want, name).tolist()
    for name, count in (
        ("kv_indices", "kv_num_blocks"),
        ("full_kv_indices", "full_kv_num_blocks"),
    ):
        counts = getattr(want, count)[0, 0].tolist()
        mine, theirs = getattr(got, name)[0, 0], getattr(want, name)[0, 0]
        assert mine.shape == theirs.shape
        for row, n in enumerate(counts):
            assert mine[row, :n].tolist() == theirs[row, :n].tolist(), name
    assert int(got.full_kv_num_blocks.sum()) == full
    _equal_to_ours(call, "torch_flex", atol=5e-6)


def test_only_a_band_at_known_positions_is_a_band(rand, rng):
    """A band, also as an AND of band mods after a cache's offset; the
    other masks keep `create_block_mask`: a band with padding or an
    explicit mask, documents, an OR of bands, a band at per-sequence
    positions."""
    from keras_attention.ops import _call_mods

    def band(masks, **fields):
        q = rand(2, 16, 4, 8)
        call = engine.AttentionCall(
            q, q, q, engine.ScaledDot(0.35), masks=masks, **fields
        )
        return _call_mods.only_band(call)

    causal = attention_masks(use_causal_mask=True)
    assert band(causal) == (None, 0)
    assert band(causal, query_offset=3) == (None, 3)
    window = and_masks(mods.causal(), mods.sliding_window(64))
    assert band(attention_masks(mask_mods=(window,)), query_offset=256) == (
        -193,
        256,
    )
    for tensor in (
        dict(key_mask=rng.random((2, 16)) > 0.5),
        dict(query_mask=rng.random((2, 16)) > 0.5),
        dict(attention_mask=rng.random((2, 16, 16)) > 0.5),
    ):
        both = attention_masks(use_causal_mask=True, **tensor)
        assert band(both) is None, tensor
    offsets = ops.convert_to_tensor(np.array([3, 4]))
    assert band(causal, query_offset=offsets) is None
    assert band(attention_masks(key_mask=rng.random((2, 16)) > 0.5)) is None
    either = and_masks(mods.causal(), mods.document(SEGMENTS))
    assert band(attention_masks(mask_mods=(either,))) is None
    wide = keras_attention.ops.or_masks(mods.causal(), mods.band(4, 4))
    assert band(attention_masks(mask_mods=(wide,))) is None
    assert band(attention_masks()) is None


def test_flex_takes_a_layer_call(rand, rng, eager):
    """Padding masks, an explicit mask, a band, a bias and the query
    offset of a cache (positions 1-5 of 6 keys); and sinks through the
    lse, which the GPU kernel returns."""
    masks = attention_masks(
        query_mask=rng.random((2, 5)) > 0.2,
        key_mask=rng.random((2, 6)) > 0.2,
        attention_mask=rng.random((2, 5, 6)) > 0.1,
        use_causal_mask=True,
        sliding_window=3,
    )
    kv = rand(2, 6, 2, 8)
    call = engine.AttentionCall(
        rand(2, 5, 4, 8),
        kv,
        kv,
        engine.ScaledDot(0.35),
        masks=masks,
        score_mod=mods.soft_cap(3.0),
        bias=rand(2, 1, 5, 6),
        query_offset=1,
        sinks=rand(4),
        lse=True,
    )
    _equal_to_ours(call, "torch_flex", lse=True)


def test_flex_keeps_float32_logits_under_mixed_precision(rand, eager):
    """bfloat16 heads: the CPU kernel computes in float32 and returns
    bfloat16, as ours."""
    score_mod, mask_mod = _cases(rand)["chain"]
    call = _flex_call(rand, score_mod, mask_mod)
    half = dataclasses.replace(
        call,
        **{
            n: ops.cast(getattr(call, n), "bfloat16")
            for n in "query key value".split()
        },
    )
    got = _equal_to_ours(half, "torch_flex", atol=2e-2)
    assert keras.backend.standardize_dtype(got.output.dtype) == "bfloat16"
    exact = engine.run(call, Plan("dense")).output
    np.testing.assert_allclose(
        ops.convert_to_numpy(ops.cast(got.output, "float32")),
        ops.convert_to_numpy(exact),
        atol=3e-2,
    )


def test_flex_is_compiled_once_per_shape(torch_native, monkeypatch):
    """`dynamic=False` for FlexAttention: a second length compiles its
    own kernel (its dynamic-shape kernel fails to build on the CPU);
    `create_block_mask` with PyTorch's defaults."""
    import torch
    from torch.nn.attention import flex_attention as torch_flex

    asked = {}

    def compile(function, **kwargs):
        asked[function.__name__] = kwargs
        return function

    monkeypatch.setattr(torch, "compile", compile)
    torch_native._compiled.cache_clear()
    try:
        torch_native._torch_function(torch_flex.flex_attention)
        torch_native._torch_function(torch_flex.create_block_mask)
    finally:
        torch_native._compiled.cache_clear()
    assert asked == {
        "flex_attention": {"dynamic": False},
        "create_block_mask": {},
    }


@pytest.mark.heavy
def test_compiled_flex_runs_inference_and_equals_ours(rand, plans):
    """The planner's CPU case: inference at N = 2048 with 8 documents, on
    `flex_attention` and on a layer in `predict`, compiled by PyTorch's
    inductor; and the kernel compiled on small calls of the gathering
    mods, a fully masked row included."""
    import torch

    n = 2048
    q = ops.convert_to_tensor(rand(1, n, 2, 16))
    segments = np.repeat(np.arange(8), n // 8)[None]
    document = mods.document(segments)
    with torch.no_grad():
        out = keras_attention.ops.flex_attention(q, q, q, mask_mod=document)
        assert plans[-1].path == "torch_flex", plans[-1].reason
        want = keras_attention.ops.flex_attention(
            q, q, q, mask_mod=document, chunk_size=0
        )
    np.testing.assert_allclose(
        ops.convert_to_numpy(out), ops.convert_to_numpy(want), atol=1e-5
    )
    # A causal window of 128 keys leaves 7 of the 16 pairs of blocks.
    x = ops.convert_to_tensor(rand(1, n, 16))
    layer = keras_attention.SelfAttention(2, attention_width=128)
    dense = keras_attention.SelfAttention(2, attention_width=128, chunk_size=0)
    dense(x[:, :4])
    layer(x[:, :4])
    dense.set_weights(layer.get_weights())
    with torch.no_grad():
        got = layer(x, use_causal_mask=True, training=False)
        assert plans[-1].path == "torch_flex", plans[-1].reason
        want = dense(x, use_causal_mask=True, training=False)
    np.testing.assert_allclose(
        ops.convert_to_numpy(got), ops.convert_to_numpy(want), atol=2e-5
    )
    for name in ("t5", "padding"):
        _equal_to_ours(_flex_call(rand, *_cases(rand)[name]), "torch_flex")


def test_flex_hands_pytorch_the_numbers_of_its_mods_as_tensors(
    rand, eager, torch_native, monkeypatch
):
    """A plain number in a mod is a guard of compiled FlexAttention: each
    new window or cap compiled it again (seconds each), and after 8 it
    ran uncompiled, 20x slower. The path hands PyTorch tensors."""
    from tests.ops.test_mods import plain_numbers

    handed = []
    block_mask, bound = torch_native.block_mask, torch_native.bound

    def spy_mask(call, mod, device):
        handed.append(mod)
        return block_mask(call, mod, device)

    def spy_score(mod):
        handed.append(mod)
        return bound(mod)

    monkeypatch.setattr(torch_native, "block_mask", spy_mask)
    monkeypatch.setattr(torch_native, "bound", spy_score)
    window = and_masks(mods.causal(), mods.sliding_window(3))
    _equal_to_ours(_flex_call(rand, mods.soft_cap(2.0), window), "torch_flex")
    assert len(handed) == 2
    assert not any(plain_numbers(mod) for mod in handed), handed
