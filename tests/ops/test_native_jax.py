"""ops/_native_jax.py: JAX's kernels equal to this package's.

JAX lane only. The calls the planner sends to cuDNN run here through the
same `jax.nn.dot_product_attention` with `implementation="xla"` (cuDNN
needs a GPU), and those it sends to the Pallas kernel through the same
kernel in interpret mode, outputs and gradients against the dense kernel;
then the whole path with the device faked: `flex_attention` and a layer
under mixed precision, planned once, on the native kernel.
"""

import dataclasses

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention.ops import _native_plan
from keras_attention.ops import engine
from keras_attention.ops import mods
from keras_attention.ops.masks import attention_masks
from keras_attention.ops.plan import Plan
from tests.autodiff import gradients
from tests.conftest import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="JAX only")

SEGMENTS = np.repeat(np.arange(4), 32)[None].repeat(2, 0)
SEGMENTS[1, :40] = 9


@pytest.fixture
def on_cpu(monkeypatch):
    """The JAX kernels as they run on this CPU: XLA for cuDNN, the Pallas
    kernel interpreted."""
    from keras_attention.ops import _native_jax

    monkeypatch.setattr(_native_jax, "IMPLEMENTATION", "xla")
    monkeypatch.setattr(_native_jax, "INTERPRET", True)


def _call(rand, masks, kv_heads=2, length=16, **fields):
    q = rand(2, length, 4, 8)
    k, v = rand(2, length, kv_heads, 8), rand(2, length, kv_heads, 8)
    return engine.AttentionCall(
        q, k, v, engine.ScaledDot(0.35), masks=masks, **fields
    )


def _outputs_and_gradients(call, path):
    upstream = np.random.default_rng(1).normal(size=call.query.shape)

    def loss(q, k, v):
        new = dataclasses.replace(call, query=q, key=k, value=v)
        out = engine.run(new, Plan(path)).output
        return ops.sum(out * ops.cast(upstream, out.dtype))

    return gradients(loss, [call.query, call.key, call.value])


def _assert_equal(call, path, atol=2e-5):
    got = _outputs_and_gradients(call, path)
    want = _outputs_and_gradients(call, "dense")
    np.testing.assert_allclose(got[0], want[0], atol=atol, rtol=1e-5)
    for g, w in zip(got[1], want[1], strict=True):
        np.testing.assert_allclose(g, w, atol=atol)


CUDNN_CALLS = {
    "none": dict(),
    "causal": dict(use_causal_mask=True),
    "causal window": dict(use_causal_mask=True, sliding_window=3),
    "lengths": dict(mask_mods=(mods.padding([16, 5]),)),
    "causal lengths": dict(
        use_causal_mask=True, mask_mods=(mods.padding([9, 16]),)
    ),
}


@pytest.mark.parametrize("name", list(CUDNN_CALLS))
def test_cudnn_path_equals_ours(rand, on_cpu, name):
    _assert_equal(_call(rand, attention_masks(**CUDNN_CALLS[name])), "cudnn")


def test_cudnn_path_with_a_bias_and_equal_heads(rand, on_cpu):
    call = _call(
        rand,
        attention_masks(use_causal_mask=True),
        kv_heads=4,
        bias=rand(2, 1, 16, 16),
    )
    _assert_equal(call, "cudnn")


def test_keys_all_padding_give_zeros_not_the_mean(rand, on_cpu):
    """JAX's kernels give the mean of the values where an example has no
    key; the path gives zeros (the package's rule)."""
    import jax

    call = _call(rand, attention_masks(mask_mods=(mods.padding([0, 7]),)))
    out = ops.convert_to_numpy(engine.run(call, Plan("cudnn")).output)
    assert np.all(out[0] == 0) and np.all(np.isfinite(out))
    lengths = np.array([0, 7], "int32")
    jax_own = jax.nn.dot_product_attention(
        call.query,
        call.key,
        call.value,
        key_value_seq_lengths=lengths,
        implementation="xla",
    )
    assert np.abs(np.asarray(jax_own)[0]).max() > 0.01


@pytest.mark.parametrize("causal", [False, True])
def test_pallas_path_equals_ours(rand, on_cpu, causal):
    masks = attention_masks(
        use_causal_mask=causal, mask_mods=(mods.document(SEGMENTS),)
    )
    call = _call(rand, masks, kv_heads=4, length=128)
    _assert_equal(call, "pallas")


@pytest.fixture
def jax_gpu(monkeypatch, on_cpu):
    """The planner believes it has a GPU; the kernels run as on_cpu."""
    monkeypatch.setattr(_native_plan, "platform", lambda: ("jax", "gpu"))


def test_flex_attention_runs_cudnn_and_pallas(rand, plans, jax_gpu):
    q = ops.cast(rand(2, 128, 4, 16), "bfloat16")
    window = keras_attention.ops.and_masks(
        mods.causal(), mods.sliding_window(8)
    )
    cases = {
        "cudnn": dict(mask_mod=window),
        "pallas": dict(mask_mod=mods.document(SEGMENTS)),
        "dense": dict(score_mod=mods.alibi(4)),
    }
    for path, kwargs in cases.items():
        plans.clear()
        got = keras_attention.ops.flex_attention(q, q, q, **kwargs)
        assert [p.path for p in plans] == [path], plans[0].reason
        want = keras_attention.ops.flex_attention(
            q, q, q, chunk_size=0, **kwargs
        )
        assert keras.backend.standardize_dtype(got.dtype) == "bfloat16"
        np.testing.assert_allclose(
            ops.convert_to_numpy(ops.cast(got, "float32")),
            ops.convert_to_numpy(ops.cast(want, "float32")),
            atol=2e-2,
        )


def test_a_layer_under_mixed_precision_runs_cudnn(rand, plans, jax_gpu):
    """MultiHeadAttention causal under `mixed_bfloat16`: cuDNN (float32
    logits inside), the same outputs as the dense path; the weights and
    dropout keep this package's path."""
    keras.config.set_dtype_policy("mixed_bfloat16")
    x = rand(2, 32, 64)
    layer = keras_attention.MultiHeadAttention(4, 16, dropout=0.5)
    dense = keras_attention.MultiHeadAttention(4, 16, chunk_size=0)
    layer(x, x)
    dense(x, x)
    dense.set_weights(layer.get_weights())
    plans.clear()
    got = layer(x, x, use_causal_mask=True)
    assert [p.path for p in plans] == ["cudnn"]
    want = dense(x, x, use_causal_mask=True)
    np.testing.assert_allclose(
        ops.convert_to_numpy(ops.cast(got, "float32")),
        ops.convert_to_numpy(ops.cast(want, "float32")),
        atol=3e-2,
    )
    layer(x, x, use_causal_mask=True, return_attention_scores=True)
    layer(x, x, use_causal_mask=True, training=True)
    assert [p.path for p in plans[-2:]] == ["dense", "dense"]
