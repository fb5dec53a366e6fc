"""`keras_attention.ops.chunked_attention` against the dense path."""

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from keras import ops

from keras_attention import ops as ka_ops
from keras_attention.ops import _blocks as blocks_module
from tests.autodiff import assert_same_gradients
from tests.autodiff import gradients
from tests.profiles import examples


def dense(q, k, v, query_mask, key_mask, causal, scale=None, band=None, w=None):
    """Every logit at once: dot product, or additive with vector `w`, on
    `(B, T, H, D)` inputs (the key and value heads repeated for groups)."""
    groups = q.shape[2] // k.shape[2]
    q = ops.transpose(q, (0, 2, 1, 3))
    k, v = (
        ops.repeat(ops.transpose(t, (0, 2, 1, 3)), groups, 1) for t in (k, v)
    )
    mask = ka_ops.combine_masks(
        q.shape[2],
        k.shape[2],
        query_mask=query_mask,
        value_mask=key_mask,
        use_causal_mask=causal,
        band=band,
    )
    if mask is not None and len(mask.shape) == 3:
        mask = mask[:, None]  # broadcast over heads

    def score(a, b):
        if w is not None:
            pairs = ops.expand_dims(a, -2) + ops.expand_dims(b, -3)
            return ops.sum(ops.tanh(pairs) * w, axis=-1) * (scale or 1.0)
        factor = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
        return ka_ops.dot_product(a, b) * factor

    out = ka_ops.attention(q, k, v, score_fn=score, mask=mask)[0]
    return ops.transpose(out, (0, 2, 1, 3))


def outputs_and_grads(fn, q, k, v, upstream, *extra):
    """`fn(q, k, v, *extra)` and the gradients of `sum(fn(...) * upstream)`."""
    out = ops.convert_to_numpy(fn(q, k, v, *extra)).astype("float32")
    _, grads = gradients(
        lambda *t: ops.sum(ops.multiply(ops.cast(fn(*t), "float32"), upstream)),
        [q, k, v, *extra],
    )
    return [out, *(g.astype("float32") for g in grads)]


def check_against_dense(
    tq,
    tk,
    chunk,
    kv_heads,
    causal,
    masked,
    seed,
    dtype="float32",
    atol=2e-5,
    band=None,
    additive=False,
):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(2, tq, 6, 8)).astype(dtype)
    k = rng.normal(size=(2, tk, kv_heads, 8)).astype(dtype)
    v = rng.normal(size=(2, tk, kv_heads, 5)).astype(dtype)
    extra = [rng.normal(size=(8,)).astype(dtype)] if additive else []
    upstream = rng.normal(size=(2, tq, 6, 5)).astype("float32")
    query_mask = key_mask = None
    if masked:
        query_mask = rng.random((2, tq)) < 0.8
        key_mask = rng.random((2, tk)) < 0.7
        key_mask[1] = False  # a whole example without keys
    chunked = outputs_and_grads(
        lambda a, b, c, *w: ka_ops.chunked_attention(
            a,
            b,
            c,
            query_mask=query_mask,
            key_mask=key_mask,
            causal=causal,
            chunk_size=chunk,
            band=band,
            additive_v=w[0] if w else None,
        ),
        q,
        k,
        v,
        upstream,
        *extra,
    )
    reference = outputs_and_grads(
        lambda a, b, c, *w: dense(
            a,
            b,
            c,
            query_mask,
            key_mask,
            causal,
            band=band,
            w=w[0] if w else None,
        ),
        q,
        k,
        v,
        upstream,
        *extra,
    )
    names = ["output", "dq", "dk", "dv", "d additive_v"]
    names = names[: len(chunked)]
    for name, got, want in zip(names, chunked, reference, strict=True):
        assert np.all(np.isfinite(got)), name
        np.testing.assert_allclose(
            got, want, atol=atol, rtol=1e-3, err_msg=name
        )
    return chunked


@pytest.mark.parametrize(
    "tq, tk, chunk, kv_heads, causal, masked",
    [
        (8, 8, 4, 6, False, False),
        (7, 7, 3, 2, True, False),  # lengths not multiples of the blocks
        # Causal, no padding: the blocks below the diagonal run unmasked.
        (12, 12, 4, 2, True, False),
        (10, 13, 4, 3, True, True),
        (5, 11, 8, 1, False, True),  # block larger than a length
        (16, 16, 16, 6, True, True),  # a single block
    ],
)
def test_chunked_equals_dense_outputs_and_gradients(
    tq, tk, chunk, kv_heads, causal, masked
):
    check_against_dense(tq, tk, chunk, kv_heads, causal, masked, seed=tq * tk)


@pytest.mark.parametrize(
    "band, causal",
    [
        ((1, 1), False),  # sliding_window=2: whole blocks skipped both sides
        ((None, 2), True),  # causal wins over the right side
    ],
)
def test_band_equals_dense_band_mask(band, causal):
    # 12 positions in blocks of 2: most block pairs lie outside.
    check_against_dense(12, 12, 2, 3, causal, True, seed=5, band=band)


def test_additive_logits_equal_dense():
    check_against_dense(7, 9, 3, 2, True, True, seed=7, additive=True)


def _bands():
    side = st.one_of(st.none(), st.integers(0, 6))
    return st.one_of(st.none(), st.tuples(side, side))


# Outside jax.jit every new shape compiles each loop body on JAX: fewer
# cases there (the TensorFlow lane draws twelve).
@examples(12 if keras.backend.backend() == "tensorflow" else 4)
@given(
    tq=st.integers(1, 12),
    tk=st.integers(1, 12),
    chunk=st.integers(1, 6),
    kv_heads=st.sampled_from([1, 2, 3, 6]),
    causal=st.booleans(),
    masked=st.booleans(),
    seed=st.integers(0, 1000),
    band=_bands(),
    additive=st.booleans(),
)
def test_chunked_equals_dense_for_random_shapes(
    tq, tk, chunk, kv_heads, causal, masked, seed, band, additive
):
    check_against_dense(
        tq,
        tk,
        chunk,
        kv_heads,
        causal,
        masked,
        seed,
        band=band,
        additive=additive,
    )


@pytest.mark.tensorflow_only
def test_eager_tape_keeps_no_block_weights(monkeypatch, rng):
    """TensorFlow eager: a recording tape keeps none of the blocks' weights.

    `tf.custom_gradient` runs its function under the caller's tape in eager
    mode; a tape that recorded the block loops would keep every block's
    weights alive until the gradient (memory quadratic in the length: 8.1
    GiB at N = 8192 before the inputs' gradient was stopped inside).
    """
    import gc
    import weakref

    import tensorflow as tf

    kept = []
    block_softmax = blocks_module.block_softmax

    def spy(s):
        weights, lse = block_softmax(s)
        kept.append(weakref.ref(weights))
        return weights, lse

    monkeypatch.setattr(blocks_module, "block_softmax", spy)
    q, k, v = (
        tf.constant(rng.normal(size=(1, 6, 1, 4)), "float32") for _ in "qkv"
    )
    with tf.GradientTape() as tape:
        tape.watch([q, k, v])
        out = ka_ops.chunked_attention(q, k, v, chunk_size=2)
        gc.collect()
        alive = sum(ref() is not None for ref in kept)
    assert len(kept) == 9 and alive == 0
    assert all(g is not None for g in tape.gradient(out, [q, k, v]))


def test_band_mask_matches_window_and_causal_masks():
    window = ka_ops.sliding_window_mask(5, 7, 3, query_offset=2)
    band = ka_ops.band_mask(5, 7, 2, 2, query_offset=2)
    np.testing.assert_array_equal(ops.convert_to_numpy(band), window)
    causal = ka_ops.band_mask(4, 6, right=0, key_offset=-1)
    want = ka_ops.causal_mask(4, 6, key_offset=-1)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(causal), ops.convert_to_numpy(want)
    )
    # A window of w keys centred on the query: i - w//2 <= j < i - w//2 + w.
    centred = ops.convert_to_numpy(ka_ops.band_mask(6, 6, 2, 1))
    i, j = np.indices((6, 6))
    np.testing.assert_array_equal(centred, (j >= i - 2) & (j < i - 2 + 4))


def test_fully_masked_rows_give_zero_output_and_gradient():
    out, dq, dk, dv = check_against_dense(6, 6, 2, 3, False, True, seed=3)
    assert np.all(out[1] == 0)
    assert np.all(dk[1] == 0) and np.all(dv[1] == 0)


def test_peaked_logits_without_a_mask_equal_dense():
    # Logits hundreds apart: in some blocks the first key's weight
    # underflows, and the block's log-sum-exp cannot come from it.
    rng = np.random.default_rng(7)
    q = (rng.normal(size=(1, 12, 2, 8)) * 30).astype("float32")
    k = rng.normal(size=(1, 12, 2, 8)).astype("float32")
    v = rng.normal(size=(1, 12, 2, 3)).astype("float32")
    upstream = rng.normal(size=(1, 12, 2, 3)).astype("float32")
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(8)
    blocks = logits.reshape(1, 2, 12, 3, 4)
    top = blocks.max(-1)
    block_lse = top + np.log(np.exp(blocks - top[..., None]).sum(-1))
    assert np.any(block_lse - blocks[..., 0] > 100)  # the case under test
    got = outputs_and_grads(
        lambda a, b, c: ka_ops.chunked_attention(a, b, c, chunk_size=4),
        q,
        k,
        v,
        upstream,
    )
    want = outputs_and_grads(
        lambda a, b, c: dense(a, b, c, None, None, False), q, k, v, upstream
    )
    for name, a, b in zip(["output", "dq", "dk", "dv"], got, want, strict=True):
        assert np.all(np.isfinite(a)), name
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-3, err_msg=name)


def test_float16_inputs_are_computed_in_float32(rng):
    # Logits of ~1e5 overflow float16 if they were formed in float16.
    q = (rng.normal(size=(1, 9, 2, 16)) * 80).astype("float16")
    k = (rng.normal(size=(1, 9, 2, 16)) * 80).astype("float16")
    v = rng.normal(size=(1, 9, 2, 4)).astype("float16")
    out = ka_ops.chunked_attention(q, k, v, causal=True, chunk_size=4)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    want = dense(*(x.astype("float32") for x in (q, k, v)), None, None, True)
    np.testing.assert_allclose(
        ops.convert_to_numpy(out).astype("float32"),
        ops.convert_to_numpy(want),
        atol=2e-2,
    )


def _compiled_outputs_and_grads(fn):
    """`fn` and the gradients of `sum(fn(q, k, v) ** 2)`, compiled by XLA."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        @tf.function(jit_compile=True)
        def compiled(q, k, v):
            with tf.GradientTape() as tape:
                tape.watch([q, k, v])
                out = fn(q, k, v)
                loss = tf.reduce_sum(out**2)
            return [out, *tape.gradient(loss, [q, k, v])]

        return compiled
    if backend == "jax":
        import jax

        def loss(q, k, v):
            out = fn(q, k, v)
            return ops.sum(out**2), out

        @jax.jit
        def compiled(q, k, v):
            (_, out), grads = jax.value_and_grad(
                loss, argnums=(0, 1, 2), has_aux=True
            )(q, k, v)
            return [out, *grads]

        return compiled
    pytest.skip(f"XLA compiles TensorFlow and JAX, not {backend}")


@pytest.mark.heavy
@pytest.mark.parametrize("causal", [False, True])
def test_custom_scale_and_xla_gradient(causal, rng):
    q, k, v = (rng.normal(size=(1, 10, 2, 4)).astype("float32") for _ in "qkv")
    compiled = _compiled_outputs_and_grads(
        lambda a, b, c: ka_ops.chunked_attention(
            a, b, c, scale=0.3, causal=causal, chunk_size=3
        )
    )
    got = compiled(*(ops.convert_to_tensor(x) for x in (q, k, v)))
    reference = dense(q, k, v, None, None, causal, scale=0.3)
    want = outputs_and_grads(
        lambda a, b, c: dense(a, b, c, None, None, causal, scale=0.3),
        q,
        k,
        v,
        2 * ops.convert_to_numpy(reference),
    )
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(
            ops.convert_to_numpy(g), w, atol=2e-5, rtol=1e-4
        )


def _numpy_lse(q, k, mask, scale):
    """Each row's log-sum-exp of the kept scaled logits, `(B, H, Tq)`:
    `-inf` where no key is kept."""
    groups = q.shape[2] // k.shape[2]
    logits = np.einsum("bqhd,bkhd->bhqk", q, np.repeat(k, groups, 2)) * scale
    logits = np.where(mask, logits, -np.inf)
    top = np.max(logits, -1, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return (np.log(np.exp(logits - safe).sum(-1)) + safe[..., 0]).astype(
            "float32"
        )


def test_lse_is_each_rows_log_sum_exp_with_its_gradient(rng):
    """The blocks' log-sum-exp: a NumPy reference, `-inf` for a row with no
    kept key, and its gradient the dense one's (autodiff of a masked
    logsumexp), alone and beside the output's."""
    q = rng.normal(size=(2, 7, 4, 8)).astype("float32")
    k = rng.normal(size=(2, 9, 2, 8)).astype("float32")
    v = rng.normal(size=(2, 9, 2, 3)).astype("float32")
    key_mask = rng.random((2, 9)) < 0.7
    key_mask[1] = False
    out, lse = ka_ops.chunked_attention(
        q, k, v, key_mask=key_mask, causal=True, chunk_size=3, return_lse=True
    )
    mask = np.tril(np.ones((7, 9), bool)) & key_mask[:, None, None, :]
    want = _numpy_lse(q, k, mask, 8**-0.5)
    got = ops.convert_to_numpy(lse)
    assert got.shape == (2, 4, 7)
    assert np.all(np.isneginf(got[1])) and np.all(np.isneginf(want[1]))
    np.testing.assert_allclose(got[0], want[0], atol=1e-5)

    def through_lse(a, b, c):
        out, lse = ka_ops.chunked_attention(
            a, b, c, key_mask=key_mask[:1], chunk_size=3, return_lse=True
        )
        return ops.sum(out) + ops.sum(ops.sin(lse))

    def dense_lse(a, b, c):
        logits = ops.einsum("bqhd,bkhd->bhqk", a, ops.repeat(b, 2, axis=2)) * (
            8**-0.5
        )
        logits = ops.where(key_mask[:1, None, None, :], logits, -1e30)
        out = ka_ops.attention(
            ops.transpose(a, (0, 2, 1, 3)),
            ops.transpose(ops.repeat(b, 2, axis=2), (0, 2, 1, 3)),
            ops.transpose(ops.repeat(c, 2, axis=2), (0, 2, 1, 3)),
            mask=key_mask[:1, None, None, :],
        )[0]
        return ops.sum(out) + ops.sum(ops.sin(ops.logsumexp(logits, -1)))

    inputs = [q[:1], k[:1], v[:1]]
    assert_same_gradients(through_lse, dense_lse, inputs)
