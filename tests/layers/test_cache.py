"""The key/value cache and rotary embeddings of MultiHeadAttention,
SelfAttention and GroupedQueryAttention: keras-hub's cached layer step by
step, token-by-token decoding against the full causal pass, under XLA."""

import keras
import numpy as np
import pytest

import keras_attention
from tests.layer_basics import check_layer_basics
from tests.layer_basics import to_np

B, T, D = 2, 5, 8


def _index(i):
    """A tensor index: on JAX one compiled update for every position."""
    return keras.ops.convert_to_tensor(i, "int32")


def _mha(rotary):
    return keras_attention.MultiHeadAttention(
        num_heads=2, key_dim=4, rotary_embedding=rotary
    )


def _self(rotary):
    return keras_attention.SelfAttention(num_heads=2, rotary_embedding=rotary)


def _gqa(rotary):
    return keras_attention.GroupedQueryAttention(
        head_dim=4,
        num_query_heads=4,
        num_key_value_heads=2,
        rotary_embedding=rotary,
    )


def _gqa_chunked(rotary):
    """The cache attended in blocks of 2 (`flex_attention`'s chunked path)."""
    return keras_attention.GroupedQueryAttention(
        head_dim=4,
        num_query_heads=4,
        num_key_value_heads=2,
        rotary_embedding=rotary,
        chunk_size=2,
    )


def _gqa_window(rotary):
    """A causal window of 2 keys, also over the cache slots."""
    return keras_attention.GroupedQueryAttention(
        head_dim=4,
        num_query_heads=4,
        num_key_value_heads=2,
        rotary_embedding=rotary,
        sliding_window=2,
    )


def _call(layer, x, **kwargs):
    if isinstance(layer, keras_attention.SelfAttention):
        return layer(x, **kwargs)
    return layer(x, x, **kwargs)


def _kv_heads(layer):
    return getattr(layer, "num_key_value_heads", 2)


@pytest.mark.parametrize("make", [_mha, _self, _gqa, _gqa_window])
@pytest.mark.parametrize("rotary", [False, True])
def test_decoding_token_by_token_equals_the_full_causal_pass(
    make, rotary, rand
):
    layer = make(keras_attention.RotaryEmbedding() if rotary else None)
    x = rand(B, T, D)
    full, full_scores = _call(
        layer, x, use_causal_mask=True, return_attention_scores=True
    )
    cache = np.zeros((B, 2, T, _kv_heads(layer), 4), "float32")
    for i in range(T):
        out, scores, cache = _call(
            layer,
            x[:, i : i + 1],
            cache=cache,
            cache_update_index=_index(i),
            use_causal_mask=True,
            return_attention_scores=True,
        )
        np.testing.assert_allclose(
            to_np(out)[:, 0], to_np(full)[:, i], rtol=1e-5, atol=1e-5
        )
        np.testing.assert_allclose(
            to_np(scores)[:, :, 0],
            to_np(full_scores)[:, :, i],
            rtol=1e-5,
            atol=1e-6,
        )


@pytest.mark.tensorflow_lane
def test_chunked_cache_decoding_equals_the_dense_pass(rand):
    """TensorFlow lane; the other lanes: `test_chunked_equals_dense` of
    tests/layers/test_grouped_query.py runs the same blocks."""
    layer = _gqa_chunked(keras_attention.RotaryEmbedding())
    x = rand(B, T, D)
    dense = _gqa(keras_attention.RotaryEmbedding())
    dense(x, x)
    layer(x, x)
    layer.set_weights(dense.get_weights())
    full = to_np(dense(x, x, use_causal_mask=True))
    cache = np.zeros((B, 2, T, 2, 4), "float32")
    for i in range(T):
        token = x[:, i : i + 1]
        out, cache = layer(
            token,
            token,
            cache=cache,
            cache_update_index=_index(i),
            use_causal_mask=True,
        )
        np.testing.assert_allclose(to_np(out)[:, 0], full[:, i], atol=1e-5)


def _pair(kind, variant):
    """A dense (`chunk_size=0`) and a chunked (`chunk_size=2`) layer of
    `kind` with `variant`'s rotary embedding and mod, same weights."""
    heads = 4 if kind == "gqa" else 2
    rotary = variant != "alibi"
    kwargs = {
        "plain": {},
        "alibi": {"score_mod": keras_attention.ops.mods.alibi(heads)},
        "window": {"mask_mod": keras_attention.ops.mods.sliding_window(2)},
        # keras-self-attention's local window, a band over the cache slots.
        "width": {"attention_width": 3},
    }[variant]
    layers = []
    for chunk_size in (0, 2):
        rope = keras_attention.RotaryEmbedding() if rotary else None
        args = dict(chunk_size=chunk_size, rotary_embedding=rope, **kwargs)
        if kind == "mha":
            layer = keras_attention.MultiHeadAttention(2, 4, **args)
        elif kind == "self":
            layer = keras_attention.SelfAttention(2, **args)
        else:
            layer = keras_attention.GroupedQueryAttention(4, 4, 2, **args)
        layers.append(layer)
    return layers


@pytest.mark.skipif(
    keras.backend.backend() == "jax",
    reason="JAX compiles every eager block loop (minutes in the lane); "
    "test_decoding_runs_under_jit_compile[mha_chunked_alibi] runs the "
    "chunked cache with a mod under jax.jit against the full pass",
)
@pytest.mark.parametrize(
    "kind, variant",
    [
        ("mha", "plain"),
        ("mha", "alibi"),
        ("self", "window"),
        ("self", "width"),
        ("gqa", "alibi"),
    ],
)
def test_chunked_cache_equals_the_dense_cache_and_the_full_pass(
    kind, variant, rand
):
    """Prefill 2, a chunk of 2 at index 2, one token at 4: in blocks of 2
    (and densely, with the scores) the mods and the causal mask read
    absolute positions. `plain`, `window` and `width` rotate (rotary
    embeddings), `alibi` does not."""
    dense, chunked = _pair(kind, variant)
    x = rand(B, T, D)
    _call(dense, x)
    _call(chunked, x)
    chunked.set_weights(dense.get_weights())
    full, full_scores = (
        to_np(t)
        for t in _call(
            dense, x, use_causal_mask=True, return_attention_scores=True
        )
    )
    cache, chunked_cache = [np.zeros((B, 2, T, 2, 4), "float32")] * 2
    for lo, hi in ((0, 2), (2, 4), (4, 5)):
        step = dict(cache_update_index=_index(lo), use_causal_mask=True)
        out, scores, cache = _call(
            dense,
            x[:, lo:hi],
            cache=cache,
            return_attention_scores=True,
            **step,
        )
        np.testing.assert_allclose(
            to_np(scores), full_scores[:, :, lo:hi], rtol=1e-5, atol=1e-6
        )
        np.testing.assert_allclose(
            to_np(out), full[:, lo:hi], rtol=1e-5, atol=1e-5
        )
        out, chunked_cache = _call(
            chunked, x[:, lo:hi], cache=chunked_cache, **step
        )
        np.testing.assert_allclose(
            to_np(out), full[:, lo:hi], rtol=1e-5, atol=1e-5
        )
    np.testing.assert_allclose(
        to_np(chunked_cache), to_np(cache), rtol=1e-6, atol=1e-6
    )


@pytest.mark.tensorflow_lane
def test_a_long_cache_takes_the_blocks_by_itself(rand, monkeypatch, plans):
    """`chunk_size=None`: a cache whose dense step passes the threshold
    (lowered here) is attended in blocks; asking for scores stays dense.
    TensorFlow lane: the choice is the same Python on every backend; the
    blocks run in the other lanes in
    `test_chunked_cache_equals_the_dense_cache_and_the_full_pass` (PyTorch)
    and `test_decoding_runs_under_jit_compile` (JAX)."""
    from keras_attention.ops import plan as _plan

    layer = _mha(None)
    x = rand(B, T, D)
    want = to_np(layer(x, x, use_causal_mask=True))
    monkeypatch.setattr(_plan, "AUTO_CHUNK_MIN_BYTES", 64)
    cache = np.zeros((B, 2, T, 2, 4), "float32")
    plans.clear()
    out, _ = layer(
        x, x, cache=cache, cache_update_index=0, use_causal_mask=True
    )
    np.testing.assert_allclose(to_np(out), want, rtol=1e-5, atol=1e-5)
    assert [p.block_size for p in plans] == [(_plan.auto_chunk_size(),) * 2]
    layer(x, x, cache=cache, return_attention_scores=True)
    assert plans[-1].path == "dense"


def test_prefill_then_decode_with_an_explicit_mask(rand):
    # No rotary here: a call without `cache_update_index` has no position.
    layer = _gqa(None)
    x = rand(B, T, D)
    full = to_np(_call(layer, x, use_causal_mask=True))
    cache = np.zeros((B, 2, T, 2, 4), "float32")
    causal = np.tril(np.ones((T, T), bool))[None].repeat(B, 0)
    prefix, cache = _call(
        layer,
        x[:, :3],
        cache=cache,
        cache_update_index=_index(0),
        attention_mask=causal[:, :3],
    )
    np.testing.assert_allclose(to_np(prefix), full[:, :3], atol=1e-5)
    out, cache = _call(
        layer,
        x[:, 3:4],
        cache=cache,
        cache_update_index=_index(3),
        attention_mask=causal[:, 3:4],
    )
    np.testing.assert_allclose(to_np(out)[:, 0], full[:, 3], atol=1e-5)
    # Without an update index the cache is attended as it is.
    again, same = _call(
        layer, x[:, 3:4], cache=cache, attention_mask=causal[:, 3:4]
    )
    np.testing.assert_allclose(to_np(again), to_np(out), atol=1e-6)
    np.testing.assert_array_equal(to_np(same), to_np(cache))


@pytest.mark.tensorflow_lane
def test_steps_equal_keras_hub_cached_attention(rand):
    """TensorFlow lane (the cache code is the same on every backend); the
    other lanes: the token-by-token tests against the full causal pass."""
    keras_hub = pytest.importorskip(
        "keras_hub",
        reason="keras-hub's CachedMultiHeadAttention is the reference",
    )
    theirs = keras_hub.layers.CachedMultiHeadAttention(num_heads=2, key_dim=4)
    ours = keras_attention.MultiHeadAttention(num_heads=2, key_dim=4)
    x = rand(B, T, D)
    theirs(x, x)
    ours(x, x)
    ours.set_weights(theirs.get_weights())
    mask = np.tril(np.ones((T, T), bool))[None].repeat(B, 0)
    mask[1, :, 0] = False  # a padded first token in the second example
    mask[1, 0, 0] = True
    cache_a = cache_b = np.zeros((B, 2, T, 2, 4), "float32")
    for i in range(T):
        step = dict(
            cache_update_index=_index(i),
            attention_mask=mask[:, i : i + 1],
            return_attention_scores=True,
        )
        want = theirs(x[:, i : i + 1], x[:, i : i + 1], cache=cache_a, **step)
        got = ours(x[:, i : i + 1], x[:, i : i + 1], cache=cache_b, **step)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(to_np(g), to_np(w), atol=1e-5)
        cache_a, cache_b = want[2], got[2]


class Decoder(keras.Model):
    """One decoding step: `(token, cache, index) -> (output, cache)`."""

    def __init__(self, attention):
        super().__init__()
        self.attention = attention

    def call(self, inputs):
        x, cache, index = inputs
        return self.attention(
            x, x, cache=cache, cache_update_index=index[0], use_causal_mask=True
        )


@pytest.mark.heavy
@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="jit_compile=True is Dynamo on PyTorch, not XLA",
)
@pytest.mark.parametrize("kind", ["gqa", "mha_chunked_alibi"])
def test_decoding_runs_under_jit_compile(kind, rand):
    """`jit_compile=True` (XLA on TensorFlow, `jax.jit` on JAX), a
    fixed-size cache and a traced index; the chunked MultiHeadAttention
    with ALiBi reads the index in its mods."""
    if kind == "gqa":
        layer = _gqa(keras_attention.RotaryEmbedding())
    else:
        layer = keras_attention.MultiHeadAttention(
            2,
            4,
            chunk_size=2,
            rotary_embedding=keras_attention.RotaryEmbedding(),
            score_mod=keras_attention.ops.mods.alibi(2),
        )
    x = rand(B, 3, D)
    full = to_np(layer(x, x, use_causal_mask=True))
    model = Decoder(layer)
    model.compile(jit_compile=True)
    cache = np.zeros((B, 2, 3, 2, 4), "float32")
    for i in range(3):
        index = np.full((B,), i, "int32")
        out, cache = model.predict_on_batch([x[:, i : i + 1], cache, index])
        np.testing.assert_allclose(out[:, 0], full[:, i], atol=1e-5)


@pytest.mark.tensorflow_lane
def test_rotary_changes_the_scores_and_saves_with_the_layer(rand):
    """TensorFlow lane; the other lanes: `test_basics` of
    tests/layers/test_grouped_query.py saves a rotary layer."""
    x = rand(B, T, D)
    plain, rotated = _mha(None), _mha(keras_attention.RotaryEmbedding())
    plain(x, x)
    rotated(x, x)
    rotated.set_weights(plain.get_weights())
    assert not np.allclose(to_np(plain(x, x)), to_np(rotated(x, x)))
    config = rotated.get_config()
    clone = keras_attention.MultiHeadAttention.from_config(config)
    assert clone.rotary_embedding.get_config() == (
        rotated.rotary_embedding.get_config()
    )
    check_layer_basics(
        keras_attention.SelfAttention,
        {"num_heads": 2, "rotary_embedding": keras_attention.RotaryEmbedding()},
        rand(2, 3, 4),
        expected_output_shape=(2, 3, 4),
        run_mixed_precision=False,
    )


@pytest.mark.parametrize("make", [_mha, _gqa])
def test_cache_errors_are_named(make, rand):
    layer = make(None)
    x = rand(B, 1, D)
    with pytest.raises(ValueError, match="cache_update_index=0"):
        _call(layer, x, cache_update_index=0)
    with pytest.raises(ValueError, match=r"cache.shape=\(2, 3, 4\)"):
        _call(layer, x, cache=np.zeros((2, 3, 4), "float32"))


@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="PyTorch runs the step eagerly: its index has a value and is "
    "refused (test_an_index_outside_the_cache_is_refused)",
)
@pytest.mark.parametrize(
    "jit",
    # JAX without `jit` runs eagerly, its index then refused as PyTorch's.
    [True, False] if keras.backend.backend() == "tensorflow" else [True],
)
def test_a_traced_index_outside_the_cache_is_clamped_into_it(jit, rand):
    """Traced (`jax.jit`, `tf.function` with or without XLA), an index
    has no value to check: it is clamped into `[0, max_length - Tq]` on
    every backend, the call then the call at the clamped index."""
    layer = _gqa(keras_attention.RotaryEmbedding())
    x = rand(B, 1, D)
    cache = rand(B, 2, 3, 2, 4)
    model = Decoder(layer)
    model.compile(jit_compile=jit)
    # Built by a first batch (JAX builds it eagerly, index and all).
    model.predict_on_batch([x, cache, np.zeros((B,), "int32")])
    for index, clamped in ((3, 2), (10, 2), (-1, 0)):
        got = model.predict_on_batch([x, cache, np.full((B,), index, "int32")])
        want = _call(
            layer,
            x,
            cache=cache,
            cache_update_index=clamped,
            use_causal_mask=True,
        )
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, to_np(w), atol=1e-6)


def test_keras_hub_tensor_and_the_cache_object_agree(rand):
    """`KeyValueCache.allocate` is the zeros keras-hub allocates; a layer
    returns the kind it was given: a tensor for a tensor."""
    layer = _gqa(keras_attention.RotaryEmbedding())
    x = rand(B, 3, D)
    _call(layer, x)
    cache = keras_attention.KeyValueCache.allocate(layer, B, 4)
    assert tuple(cache.tensor.shape) == (B, 2, 4, 2, 4)
    assert cache.nbytes == B * 2 * 4 * 2 * 4 * 4
    tensor = np.zeros((B, 2, 4, 2, 4), "float32")
    for i in range(3):
        step = dict(cache_update_index=i, use_causal_mask=True)
        a, cache = _call(layer, x[:, i : i + 1], cache=cache, **step)
        b, tensor = _call(layer, x[:, i : i + 1], cache=tensor, **step)
        assert isinstance(cache, keras_attention.KeyValueCache)
        assert not isinstance(tensor, keras_attention.AttentionCache)
        np.testing.assert_array_equal(to_np(a), to_np(b))
    np.testing.assert_array_equal(to_np(cache.tensor), to_np(tensor))


def test_an_additive_score_decodes_with_a_cache_in_blocks(rand):
    """The blocks read the cache's offsets for any score: an additive
    score decodes in blocks as densely."""
    x = rand(B, 3, D)
    dense = keras_attention.MultiHeadAttention(2, 4, score="additive")
    chunked = keras_attention.MultiHeadAttention(
        2, 4, score="additive", chunk_size=2
    )
    dense(x, x)
    chunked(x, x)
    chunked.set_weights(dense.get_weights())
    want = to_np(dense(x, x, use_causal_mask=True))
    cache = np.zeros((B, 2, 3, 2, 4), "float32")
    for i in range(3):
        step = x[:, i : i + 1]
        out, cache = chunked(
            step, step, cache=cache, cache_update_index=i, use_causal_mask=True
        )
        np.testing.assert_allclose(to_np(out)[:, 0], want[:, i], atol=1e-5)


@pytest.mark.tensorflow_only
def test_a_cache_of_unknown_length_is_read_in_a_traced_call(rand):
    """Traced with the cache's length unknown (a cross-attention's cache
    of the source under `model.predict`, whose batches differ in
    length), the call reads the cache: its length is checked only where
    it is known (the beam search of the Multi30k Transformer failed here
    comparing `None < 1`)."""
    import tensorflow as tf

    layer = _mha(None)
    x, cache = rand(B, 1, D), rand(B, 2, 4, 2, 4)
    want, _ = _call(layer, x, cache=cache)
    traced = tf.function(
        lambda q, c: _call(layer, q, cache=c)[0],
        input_signature=[
            tf.TensorSpec((None, 1, D)),
            tf.TensorSpec((None, 2, None, 2, 4)),
        ],
    )
    np.testing.assert_allclose(to_np(traced(x, cache)), to_np(want), atol=1e-6)
