"""ops/_kernel.py: the one block kernel of the engine's blocks (the
blocks' layout, the backend's vjp, additive logits with grouped heads and
a score mod against dense, band and block-mask skipping, the log-sum-exp
and its gradient)."""

import numpy as np
import pytest
from keras import ops

from keras_attention.ops import MASKED_LOGIT
from keras_attention.ops import _blocks
from keras_attention.ops import _kernel
from keras_attention.ops import create_block_mask
from keras_attention.ops import masked_softmax
from keras_attention.ops import mods
from keras_attention.ops._layout import index_tensors
from tests.autodiff import gradients


def test_blocks_hold_the_grouped_heads(rng):
    query = rng.normal(size=(2, 2, 2, 5, 3)).astype("float32")
    key = rng.normal(size=(2, 2, 1, 6, 3)).astype("float32")
    tensors = [ops.convert_to_tensor(t) for t in (query, key, key)]
    blocks = _kernel.Blocks(tensors, _kernel.Spec(1.0, (2, 4)))
    assert (blocks.nq, blocks.nk, blocks.groups) == (3, 2, 2)
    assert tuple(blocks.q.shape) == (3, 2, 2, 2, 2, 3)
    assert tuple(blocks.k_t.shape) == (2, 2, 2, 1, 3, 4)
    assert blocks.k_valid is not None and blocks.q_valid is None


def test_vjp_gives_the_gradient_of_a_cotangent():
    x = ops.convert_to_tensor(np.array([1.0, 2.0, 3.0], "float32"))
    grads = _blocks.vjp(
        lambda a: a * a, [x], lambda out: ops.ones_like(out) * 2.0
    )
    np.testing.assert_allclose(ops.convert_to_numpy(grads[0]), [4, 8, 12])


def _dense_kernel(tensors, spec, masks):
    """Every logit at once in the kernel's layout, differentiable by the
    backend: the reference of `_kernel.attend`, `(output, lse)`."""
    q, k, v, w, table = tensors
    if spec.additive:
        pairs = ops.expand_dims(q, -2) + ops.expand_dims(k, -3)
        s = ops.sum(ops.tanh(pairs) * w, axis=-1) * spec.scale
    else:
        s = ops.matmul(q * spec.scale, ops.swapaxes(k, -1, -2))
    batch, kv_heads, groups, q_len, _ = q.shape
    idx = index_tensors(
        batch, kv_heads, groups, ops.arange(q_len), ops.arange(k.shape[3])
    )
    s = spec.bind([table])(s, *idx)
    keep = ops.cast(spec.mask_mod(*idx), "bool")
    query_mask, key_mask = masks
    if query_mask is not None:
        keep = ops.logical_and(keep, query_mask[:, None, None, :, None])
        keep = ops.logical_and(keep, key_mask[:, None, None, None, :])
    lse = ops.logsumexp(ops.where(keep, s, MASKED_LOGIT), -1, keepdims=True)
    return ops.matmul(masked_softmax(s, keep), v), lse


@pytest.mark.parametrize("additive", [True, False])
@pytest.mark.parametrize("skipping", ["band", "block_mask"])
def test_kernel_equals_dense_with_grouped_heads_and_a_score_mod(
    additive, skipping, rng
):
    """Both forms of logits, grouped heads, a score mod's tensor (its
    gradient too), and both ways of skipping blocks: a band's limits (with
    padding masks) or a `BlockMask`'s plan (whose full blocks are not
    masked)."""
    q_len, k_len, sizes = 7, 9, (3, 2)
    q = rng.normal(size=(2, 2, 2, q_len, 4)).astype("float32")
    k, v = (
        rng.normal(size=(2, 2, 1, k_len, 4)).astype("float32") for _ in "kv"
    )
    w = rng.normal(size=(4,)).astype("float32")
    bias = rng.normal(size=(1, 4, q_len, k_len)).astype("float32")
    upstream = rng.normal(size=(2, 2, 2, q_len, 4)).astype("float32")
    masks = (None, None)
    if skipping == "band":
        mask_mod, kinds, limits = mods.band(2, 1), None, (2, 1)
        masks = (rng.random((2, q_len)) < 0.8, rng.random((2, k_len)) < 0.8)
        masks[1][1] = False  # an example without keys
    else:
        mask_mod, limits = mods.causal(), (None, None)
        kinds = create_block_mask(mask_mod, None, None, q_len, k_len, sizes)
        kinds = kinds.kinds
        assert np.any(ops.convert_to_numpy(kinds) == 0)  # blocks to skip
    bias_mod = mods.bias(bias)
    spec = _kernel.Spec(
        scale=0.7,
        sizes=sizes,
        additive=additive,
        score_mod=bias_mod,
        bind=bias_mod.with_tensors,
        mask_mod=mask_mod,
        query_mask=masks[0],
        key_mask=masks[1],
        limits=limits,
        kinds=kinds,
    )

    def kernel(q, k, v, w, table):
        # Copies: TensorFlow's custom gradient takes tensors, not variables.
        tensors = [q, k, v, *([w] if additive else []), table]
        out, lse = _kernel.attend([ops.copy(t) for t in tensors], spec)
        return ops.sum(ops.multiply(out, upstream)) + ops.sum(ops.cos(lse))

    def dense(*tensors):
        out, lse = _dense_kernel(tensors, spec, masks)
        return ops.sum(ops.multiply(out, upstream)) + ops.sum(ops.cos(lse))

    got = gradients(kernel, [q, k, v, w, bias])
    want = gradients(dense, [q, k, v, w, bias])
    names = ["value", "dq", "dk", "dv", "d additive_v", "d bias"]
    for name, a, b in zip(
        names, [got[0], *got[1]], [want[0], *want[1]], strict=True
    ):
        assert np.all(np.isfinite(a)), name
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4, err_msg=name)
    assert np.abs(got[1][4]).max() > 1e-3  # the bias gets a gradient
