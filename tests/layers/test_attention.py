import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import keras_attention
from keras_attention import scores
from tests.layer_basics import check_layer_basics
from tests.layer_basics import np_softmax
from tests.layer_basics import to_np
from tests.profiles import examples


@pytest.mark.parametrize(
    "score, n_weights",
    [
        ("scaled_dot", 0),
        ("dot", 0),
        ("cosine", 0),
        ("bilinear", 1),
        ("additive", 3),
        ("concat", 2),
        (scores.LocationScore(max_length=9), 1),
    ],
)
def test_basics_for_every_score(score, n_weights, rand):
    config = scores.serialize(scores.get(score))
    depth = 4 if n_weights == 0 else 6
    check_layer_basics(
        keras_attention.Attention,
        {"score": config},
        [rand(2, 3, 4), rand(2, 5, 6), rand(2, 5, depth)],
        {"return_attention_scores": True},
        expected_output_shape=[(2, 3, 6), (2, 3, 5)],
        expected_num_trainable_weights=n_weights,
    )


def test_basics_single_query_vector_with_dropout(rand):
    check_layer_basics(
        keras_attention.Attention,
        {"score": "additive", "dropout": 0.5, "seed": 3},
        [rand(2, 4), rand(2, 5, 6)],
        expected_output_shape=(2, 6),
        expected_num_trainable_weights=3,
    )


def test_single_query_matches_seed_formula(rand):
    # a_i = softmax(s(h_i, q)), context = sum a_i h_i with s = q·h / sqrt(D).
    q, h = rand(2, 4), rand(2, 5, 4)
    context, weights = keras_attention.Attention()(
        q, h, return_attention_scores=True
    )
    a = np_softmax(np.einsum("bd,btd->bt", q, h) / 2.0)
    np.testing.assert_allclose(to_np(weights), a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        to_np(context), np.einsum("bt,btd->bd", a, h), rtol=1e-5, atol=1e-5
    )


def test_key_value_attention_matches_seed_formula(rand):
    q, k, v = rand(2, 3, 4), rand(2, 5, 4), rand(2, 5, 7)
    layer = keras_attention.Attention(score="dot")
    context, weights = layer(q, v, key=k, return_attention_scores=True)
    a = np_softmax(q @ k.transpose(0, 2, 1))
    np.testing.assert_allclose(to_np(weights), a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(to_np(context), a @ v, rtol=1e-5, atol=1e-5)


def test_tiny_hand_computed_case():
    q = np.array([[1.0, 0.0]], "float32")
    v = np.array([[[np.log(3.0), 0.0], [0.0, 0.0]]], "float32")
    context, weights = keras_attention.Attention(score="dot")(
        q, v, return_attention_scores=True
    )
    np.testing.assert_allclose(to_np(weights), [[0.75, 0.25]], rtol=1e-6)
    np.testing.assert_allclose(
        to_np(context), [[0.75 * np.log(3.0), 0.0]], rtol=1e-6
    )


def test_matches_keras_attention_with_masks_and_causal(rand):
    q, v = rand(2, 5, 4), rand(2, 5, 4)
    v_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    ours, w = keras_attention.Attention(score="dot")(
        q,
        v,
        value_mask=v_mask,
        use_causal_mask=True,
        return_attention_scores=True,
    )
    theirs, tw = keras.layers.Attention()(
        [q, v],
        mask=[None, v_mask],
        use_causal_mask=True,
        return_attention_scores=True,
    )
    np.testing.assert_allclose(to_np(w), to_np(tw), atol=1e-6)
    np.testing.assert_allclose(to_np(ours), to_np(theirs), atol=1e-5)


def test_causal_flag_equals_explicit_lower_triangular_mask(rand):
    q, v = rand(2, 4, 6), rand(2, 4, 6)
    layer = keras_attention.Attention(score="bilinear")
    a = layer(q, v, use_causal_mask=True)
    tril = np.broadcast_to(np.tril(np.ones((4, 4), bool)), (2, 4, 4))
    b = layer(q, v, attention_mask=tril)
    np.testing.assert_allclose(to_np(a), to_np(b), rtol=1e-6)


@examples(15)
@given(
    length=st.integers(2, 6),
    valid=st.integers(1, 6),
    seed=st.integers(0, 1000),
    score=st.sampled_from(["dot", "additive", "cosine", "concat"]),
)
def test_padding_values_do_not_change_outputs(length, valid, seed, score):
    valid = min(valid, length)
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(1, 3, 4)).astype("float32")
    v = rng.normal(size=(1, length, 4)).astype("float32")
    mask = np.arange(length)[None] < valid
    noisy = v.copy()
    noisy[:, valid:] = rng.normal(size=noisy[:, valid:].shape) * 100
    layer = keras_attention.Attention(score=score)
    a, wa = layer(q, v, value_mask=mask, return_attention_scores=True)
    b, wb = layer(q, noisy, value_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(to_np(a), to_np(b), rtol=1e-5, atol=1e-5)
    wa = to_np(wa)
    assert np.all(wa[..., valid:] == 0)
    np.testing.assert_allclose(wa.sum(-1), 1.0, rtol=1e-5)


@examples(10)
@given(length=st.integers(2, 6), cut=st.integers(0, 5), seed=st.integers(0, 99))
def test_causal_outputs_do_not_see_the_future(length, cut, seed):
    cut = min(cut, length - 1)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(1, length, 4)).astype("float32")
    changed = x.copy()
    changed[:, cut + 1 :] += 10.0
    layer = keras_attention.Attention(score="scaled_dot")
    a = to_np(layer(x, x, use_causal_mask=True))
    b = to_np(layer(changed, changed, use_causal_mask=True))
    np.testing.assert_allclose(a[:, : cut + 1], b[:, : cut + 1], rtol=1e-5)


def test_fully_masked_row_gives_zero_context(rand):
    q, v = rand(2, 3, 4), rand(2, 5, 4)
    mask = np.ones((2, 5), bool)
    mask[1] = False
    context, weights = keras_attention.Attention()(
        q, v, value_mask=mask, return_attention_scores=True
    )
    assert np.all(to_np(weights)[1] == 0)
    assert np.all(to_np(context)[1] == 0)
    assert np.all(np.isfinite(to_np(context)))


def test_masked_query_gets_zero_weights_and_context(rand):
    q, v = rand(2, 3, 4), rand(2, 5, 4)
    q_mask = np.array([[1, 1, 0], [1, 1, 1]], bool)
    context, weights = keras_attention.Attention()(
        q, v, query_mask=q_mask, return_attention_scores=True
    )
    assert np.all(to_np(weights)[0, 2] == 0)
    assert np.all(to_np(context)[0, 2] == 0)
    np.testing.assert_allclose(to_np(weights)[1].sum(-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize(
    ("layer", "inputs"),
    [
        (keras_attention.Attention, 2),
        (keras_attention.Attention, 1),
        (keras_attention.HardAttention, 1),
    ],
    ids=["two-inputs", "one-input", "hard-one-input"],
)
def test_keras_masks_are_picked_up_and_propagated(layer, inputs):
    """`layer(x, x)` and the one-input self-attention `layer(x)`, whose
    Keras mask Keras passes as `mask` (not `query_mask`)."""
    tokens = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(10, 4, mask_zero=True)(tokens)
    context, weights = layer()(
        *[embedded] * inputs, return_attention_scores=True
    )
    pooled = keras.layers.GlobalAveragePooling1D()(context)
    model = keras.Model(tokens, [context, weights, pooled])
    x = np.array([[3, 4, 5, 0, 0]])
    ctx, w, pooled = model.predict(x, verbose=0)
    assert np.all(w[0, :, 3:] == 0)
    assert np.all(w[0, 3:] == 0) and np.all(ctx[0, 3:] == 0)
    # The mask reaches the pooling layer: only 3 positions are averaged.
    np.testing.assert_allclose(pooled[0], ctx[0, :3].mean(0), rtol=1e-5)


@pytest.mark.parametrize(
    "layer", [keras_attention.Attention, keras_attention.HardAttention]
)
def test_keras_attention_mask_list_form(layer, rand):
    # keras.layers.Attention takes mask=[query_mask, value_mask]; ours
    # failed on it with NumPy's "inhomogeneous shape" error.
    q, v = rand(2, 3, 4), rand(2, 5, 4)
    query_mask = np.array([[1, 1, 0]] * 2, bool)
    value_mask = np.array([[1, 1, 1, 0, 0]] * 2, bool)
    instance = layer()
    want = instance(
        q,
        v,
        query_mask=query_mask,
        value_mask=value_mask,
        return_attention_scores=True,
    )
    got = instance(
        q, v, mask=[query_mask, value_mask], return_attention_scores=True
    )
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(to_np(g), to_np(w))
    w = to_np(got[1])
    assert np.all(w[:, :, 3:] == 0) and np.all(w[:, 2] == 0)
    # [query_mask] alone, and explicit masks win over the list's.
    alone = instance(q, v, mask=[query_mask], return_attention_scores=True)
    assert np.all(to_np(alone[1])[:, 2] == 0)
    assert np.all(to_np(alone[1])[:, :2].sum(-1) > 0.99)
    everything = np.ones((2, 5), bool)
    explicit = instance(
        q,
        v,
        mask=[query_mask, value_mask],
        value_mask=everything,
        return_attention_scores=True,
    )
    unmasked = instance(
        q,
        v,
        query_mask=query_mask,
        value_mask=everything,
        return_attention_scores=True,
    )
    np.testing.assert_array_equal(to_np(explicit[1]), to_np(unmasked[1]))


def test_single_query_vector_masks(rand):
    q, v = rand(2, 4), rand(2, 5, 4)
    context, weights = keras_attention.Attention()(
        q,
        v,
        query_mask=np.array([True, False]),
        attention_mask=np.array([[1, 1, 0, 1, 1]] * 2, bool),
        return_attention_scores=True,
    )
    w = to_np(weights)
    assert w.shape == (2, 5) and w[0, 2] == 0
    assert np.all(w[1] == 0) and np.all(to_np(context)[1] == 0)


def test_multi_query_concatenation_as_in_the_seeds(rand):
    # att((K, V), Q) = att(q_1) ⊕ ... ⊕ att(q_M): a query sequence, then a
    # reshape, equals attending with each query on its own.
    queries, v = rand(2, 3, 4), rand(2, 5, 4)
    layer = keras_attention.Attention()
    joined = keras.layers.Reshape((12,))(layer(queries, v))
    parts = [layer(queries[:, m], v) for m in range(3)]
    np.testing.assert_allclose(
        to_np(joined),
        np.concatenate([to_np(p) for p in parts], -1),
        rtol=1e-5,
        atol=1e-6,
    )


def test_dropout_is_seeded_and_only_active_in_training(rand):
    q, v = rand(2, 3, 4), rand(2, 5, 4)
    layer = keras_attention.Attention(dropout=0.5, seed=1)
    inference = to_np(layer(q, v, training=False))
    np.testing.assert_allclose(
        inference, to_np(keras_attention.Attention()(q, v)), rtol=1e-6
    )
    train = to_np(layer(q, v, training=True))
    assert not np.allclose(train, inference)


def test_mixed_precision_with_large_logits_is_finite(rng):
    keras.config.set_dtype_policy("mixed_float16")
    q = np.full((1, 2, 64), 100.0, "float32")
    v = rng.normal(size=(1, 5, 64)).astype("float32") * 100
    context, weights = keras_attention.Attention(score="dot")(
        q, v, return_attention_scores=True
    )
    assert keras.backend.standardize_dtype(context.dtype) == "float16"
    assert np.all(np.isfinite(to_np(context).astype("float32")))
    np.testing.assert_allclose(
        to_np(weights).astype("float32").sum(-1), 1.0, atol=1e-3
    )


# On PyTorch `jit_compile=True` is Dynamo, not XLA: 50 s (MultiHeadAttention)
# and 18 s (Attention) of that lane, which leaves out the XLA training
# tests (docs/testing.md); every layer trains one step there in its
# basics (`tests/layer_basics.py`).
@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="jit_compile=True is Dynamo on PyTorch, not XLA",
)
def test_xla_training_step(rand):
    q_in, v_in = keras.Input((3, 4)), keras.Input((5, 4))
    out = keras_attention.Attention(score="additive")(q_in, v_in)
    model = keras.Model([q_in, v_in], out)
    model.compile("sgd", "mse", jit_compile=True)
    history = model.fit(
        [rand(4, 3, 4), rand(4, 5, 4)], rand(4, 3, 4), verbose=0
    )
    assert np.isfinite(history.history["loss"][0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dropout": 1.0}, "dropout=1.0"),
        ({"dropout": -0.1}, "dropout=-0.1"),
        ({"score": "nope"}, "score='nope'"),
        ({"score": "location"}, "needs `max_length`"),
    ],
)
def test_bad_constructor_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_attention.Attention(**kwargs)


@pytest.mark.parametrize(
    "shapes, match",
    [
        (
            ((2, 3, 4), (2, 5)),
            r"expects `value` of shape.*value.shape=\(2, 5\)",
        ),
        (((3,), (2, 5, 4)), "expects `query` of shape"),
        (((2, 3, 4, 1), (2, 5, 4)), r"query of rank 4.*value.shape=\(2, 5"),
        (((2, 3, 4), (2, 5, 4), (2, 6, 4)), "same number of positions"),
        (((2, 3, 4), (2, 5, 4), (2, 5)), "expects `key` of shape"),
        (((2, 3, 4), (3, 5, 4)), "same batch size"),
    ],
)
def test_bad_shapes_name_every_shape(shapes, match):
    arrays = [np.zeros(s, "float32") for s in shapes]
    key = {"key": arrays[2]} if len(arrays) == 3 else {}
    with pytest.raises(ValueError, match=match):
        keras_attention.Attention()(arrays[0], arrays[1], **key)


def test_causal_mask_with_single_query_vector_raises(rand):
    with pytest.raises(ValueError, match="needs a query sequence"):
        keras_attention.Attention()(
            rand(2, 4), rand(2, 5, 4), use_causal_mask=True
        )


def test_attention_mask_of_wrong_rank_raises(rand):
    with pytest.raises(ValueError, match=r"attention_mask.shape=\(2, 5\)"):
        keras_attention.Attention()(
            rand(2, 3, 4), rand(2, 5, 4), attention_mask=np.ones((2, 5), bool)
        )
    with pytest.raises(ValueError, match=r"`\(batch_size, Tv\)` for a single"):
        keras_attention.Attention()(
            rand(2, 4), rand(2, 5, 4), attention_mask=np.ones((2, 1, 5), bool)
        )


def test_mismatched_depth_for_dot_score_raises_value_error(rand):
    with pytest.raises(ValueError, match="same depth"):
        keras_attention.Attention(score="dot")(rand(2, 3, 4), rand(2, 5, 6))


@pytest.mark.parametrize(
    "make_layer",
    [
        lambda: keras_attention.Attention(score="dot"),
        lambda: keras_attention.HardAttention(score="dot"),
        lambda: keras_attention.MultiHeadAttention(2, 4),
    ],
)
def test_keras_mask_combines_with_an_attention_mask(make_layer, rng):
    # With several tensor arguments Keras fills `value_mask` from the
    # value's mask; the layer must still apply it with `attention_mask`.
    ids = np.array([[3, 1, 4, 0, 0], [2, 7, 1, 8, 5]])
    value = keras.layers.Embedding(10, 8, mask_zero=True)(ids)
    query = rng.normal(size=(2, 3, 8)).astype("float32")
    allowed = np.ones((2, 3, 5), bool)
    allowed[:, :, 1] = False
    _, weights = make_layer()(
        query, value, attention_mask=allowed, return_attention_scores=True
    )
    weights = to_np(weights)
    assert np.all(weights[..., 1] == 0)
    assert np.all(weights[0, ..., 3:] == 0)
