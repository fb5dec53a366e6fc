"""GroupedQueryAttention: Keras's layer with copied weights, a NumPy
reference, dense against chunked, and cached decoding against the full
causal pass (with and without rotary embeddings)."""

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention.layers import grouped_query
from keras_attention.ops import plan as _plan
from tests.layer_basics import check_layer_basics
from tests.layer_basics import np_softmax
from tests.layer_basics import to_np

GQA = keras_attention.GroupedQueryAttention


def _layers(**kwargs):
    args = dict(head_dim=4, num_query_heads=4, num_key_value_heads=2)
    args.update(kwargs)
    return keras.layers.GroupQueryAttention(**args), GQA(**args)


def _copy(theirs, ours, query, value, rng):
    theirs(query, value)
    ours(query, value)
    names = [w.path.split("/", 1)[1] for w in ours.weights]
    assert names == [w.path.split("/", 1)[1] for w in theirs.weights]
    theirs.set_weights(
        [rng.normal(size=w.shape).astype("float32") for w in theirs.weights]
    )
    ours.set_weights(theirs.get_weights())


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"num_key_value_heads": 1, "use_gate": True, "sliding_window": 2},
        {"num_key_value_heads": 4, "use_bias": False},
    ],
)
def test_matches_keras_with_copied_weights(kwargs, rand, rng):
    theirs, ours = _layers(**kwargs)
    query, value = rand(2, 5, 8), rand(2, 5, 8)
    _copy(theirs, ours, query, value, rng)
    value_mask = np.ones((2, 5), bool)
    value_mask[0, 3:] = False
    for call in (
        {"value_mask": value_mask},
        {"use_causal_mask": True, "value_mask": value_mask},
    ):
        want = theirs(query, value, return_attention_scores=True, **call)
        got = ours(query, value, return_attention_scores=True, **call)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(to_np(g), to_np(w), atol=2e-5)
        np.testing.assert_allclose(
            to_np(ours(query, value, **call)), to_np(want[0]), atol=2e-5
        )


def test_matches_numpy_reference(rand):
    layer = GQA(head_dim=4, num_query_heads=6, num_key_value_heads=2)
    query, value, key = rand(2, 5, 8), rand(2, 5, 8), rand(2, 5, 8)
    out, scores = layer(query, value, key, return_attention_scores=True)
    wq, bq, wk, bk, wv, bv, wo, bo = (to_np(w) for w in layer.weights)
    q = np.einsum("bqm,muh->bquh", query, wq) + bq
    k = np.einsum("bkm,mvh->bkvh", key, wk) + bk
    v = np.einsum("bkm,mvh->bkvh", value, wv) + bv
    # Query head h uses key/value head h // 3.
    k, v = np.repeat(k, 3, axis=2), np.repeat(v, 3, axis=2)
    w = np_softmax(np.einsum("bquh,bkuh->buqk", q, k) / np.sqrt(4.0))
    context = np.einsum("buqk,bkuh->bquh", w, v)
    want = np.einsum("bquh,uhm->bqm", context, wo) + bo
    np.testing.assert_allclose(to_np(scores), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(to_np(out), want, rtol=1e-5, atol=1e-5)


def test_hook_sees_unrepeated_key_value_heads(rand):
    seen = {}

    class Spy(GQA):
        def _compute_attention(
            self, query, key, value, attention_mask=None, training=None
        ):
            seen["heads"] = (query.shape[2], key.shape[2], value.shape[2])
            return super()._compute_attention(
                query, key, value, attention_mask, training
            )

    x = rand(2, 5, 8)
    Spy(head_dim=4, num_query_heads=4, num_key_value_heads=2)(x, x)
    assert seen["heads"] == (4, 2, 2)


def test_chunked_equals_dense(rand):
    x = rand(2, 9, 8)
    mask = np.ones((2, 9), bool)
    mask[1, 6:] = False
    dense = GQA(
        head_dim=4, num_query_heads=4, num_key_value_heads=2, chunk_size=0
    )
    chunked = GQA(
        head_dim=4, num_query_heads=4, num_key_value_heads=2, chunk_size=4
    )
    dense(x, x)
    chunked(x, x)
    chunked.set_weights(dense.get_weights())
    call = dict(value_mask=mask, use_causal_mask=True)
    np.testing.assert_allclose(
        to_np(chunked(x, x, **call)), to_np(dense(x, x, **call)), atol=1e-5
    )


def test_fully_masked_query_gets_zero_weights(rand):
    layer = GQA(head_dim=4, num_query_heads=4, num_key_value_heads=2)
    x = rand(2, 5, 8)
    attention_mask = np.ones((2, 5, 5), bool)
    attention_mask[0, 1] = False
    _, scores = layer(
        x, x, attention_mask=attention_mask, return_attention_scores=True
    )
    np.testing.assert_array_equal(to_np(scores)[0, :, 1], 0.0)
    assert np.all(np.isfinite(to_np(scores)))


def test_basics(rand):
    check_layer_basics(
        GQA,
        {
            "head_dim": 4,
            "num_query_heads": 4,
            "num_key_value_heads": 2,
            "use_gate": True,
            "rotary_embedding": keras_attention.RotaryEmbedding(),
        },
        [rand(2, 5, 8), rand(2, 5, 8)],
        {"return_attention_scores": True},
        expected_output_shape=[(2, 5, 8), (2, 4, 5, 5)],
        expected_num_trainable_weights=10,
    )


def test_alias_is_the_same_class():
    assert keras_attention.GroupQueryAttention is GQA


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            {"num_key_value_heads": 3},
            "num_query_heads=4, num_key_value_heads=3",
        ),
        ({"head_dim": 0}, "head_dim=0"),
        ({"sliding_window": -1}, "sliding_window=-1"),
        ({"dropout": 0.5, "flash_attention": True}, "Dropout is not supported"),
        ({"rotary_embedding": "rope"}, "rotary_embedding='rope'"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    args = dict(head_dim=2, num_query_heads=4, num_key_value_heads=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        GQA(**args)


def test_shape_errors_name_both_shapes(rand):
    layer = GQA(head_dim=2, num_query_heads=2, num_key_value_heads=1)
    with pytest.raises(ValueError, match=r"query_shape=\(2, 3, 4\)"):
        layer(rand(2, 3, 4), rand(2, 3, 5))


def test_constructor_mods_equal_the_keras_window_and_round_trip(rand):
    from keras_attention.ops import mods

    x = rand(2, 5, 8)
    window = GQA(
        head_dim=4, num_query_heads=4, num_key_value_heads=2, sliding_window=2
    )
    modded = GQA(
        head_dim=4,
        num_query_heads=4,
        num_key_value_heads=2,
        mask_mod=mods.sliding_window(2),
    )
    window(x, x)
    modded(x, x)
    modded.set_weights(window.get_weights())
    want = to_np(window(x, x, return_attention_scores=True)[1])
    got = to_np(modded(x, x, return_attention_scores=True)[1])
    np.testing.assert_allclose(got, want, atol=1e-6)
    clone = GQA.from_config(modded.get_config())
    assert clone.mask_mod == modded.mask_mod
    # The call's mod is ANDed with the constructor's.
    both = to_np(
        modded(x, x, mask_mod=mods.causal(), return_attention_scores=True)[1]
    )
    np.testing.assert_array_equal(
        both[..., np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]], 0.0
    )


# The pluggable score. cosine (a dot-product form) and additive (no
# dot-product form: the folded dense path) run on every lane; dot and
# bilinear take cosine's dot-product path, concat additive's dense path,
# and scaled_dot (the default) is `test_matches_keras_with_copied_weights`
# on the other lanes, so these run in the TensorFlow lane only (JAX
# compiles each case anew: several seconds each).
_TF_LANE = pytest.mark.tensorflow_lane
_SCORES = [
    "cosine",
    "additive",
    pytest.param("scaled_dot", marks=_TF_LANE),
    pytest.param("dot", marks=_TF_LANE),
    pytest.param("bilinear", marks=_TF_LANE),
    pytest.param("concat", marks=_TF_LANE),
]


def _random_weights(layer, rng):
    layer.set_weights(
        [rng.normal(size=w.shape).astype("float32") for w in layer.weights]
    )


def _masked_calls():
    value_mask = np.ones((2, 6), bool)
    value_mask[0, 4:] = False
    value_mask[1] = False  # no key at all: zero weights, zero context
    return ({"value_mask": value_mask}, {"use_causal_mask": True})


def _assert_same(ours, want, query, value, key, call):
    got = ours(query, value, key, return_attention_scores=True, **call)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(to_np(g), to_np(w), atol=2e-5, rtol=1e-4)
    # Without the weights, the fused / folded path: the same output.
    np.testing.assert_allclose(
        to_np(ours(query, value, key, **call)),
        to_np(want[0]),
        atol=2e-5,
        rtol=1e-4,
    )


@pytest.mark.parametrize("score", _SCORES)
def test_score_equals_multi_head_attention_with_copied_weights(
    score, rand, rng
):
    # As many K/V heads as query heads: MultiHeadAttention with the score.
    query, value, key = rand(2, 6, 8), rand(2, 6, 8), rand(2, 6, 8)
    ours = GQA(
        head_dim=4, num_query_heads=2, num_key_value_heads=2, score=score
    )
    mha = keras_attention.MultiHeadAttention(
        num_heads=2, key_dim=4, score=score
    )
    ours(query, value, key)
    mha(query, value, key)
    _random_weights(ours, rng)
    mha.set_weights(ours.get_weights())
    for call in _masked_calls():
        want = mha(query, value, key, return_attention_scores=True, **call)
        _assert_same(ours, want, query, value, key, call)


# Grouped cosine: the folded dot-product path, whose group index
# `test_matches_numpy_reference` checks on the other lanes.
@pytest.mark.parametrize(
    "score", [pytest.param("cosine", marks=_TF_LANE), "additive"]
)
def test_grouped_score_equals_mha_with_the_kv_heads_repeated(score, rand, rng):
    # Query head h uses K/V head h // 2: MultiHeadAttention whose key and
    # value projections are the K/V heads repeated by hand.
    query, value = rand(2, 5, 8), rand(2, 6, 8)
    ours = GQA(
        head_dim=4, num_query_heads=4, num_key_value_heads=2, score=score
    )
    mha = keras_attention.MultiHeadAttention(
        num_heads=4, key_dim=4, score=score
    )
    ours(query, value)
    mha(query, value)
    _random_weights(ours, rng)
    weights = ours.get_weights()
    for i in (2, 3, 4, 5):  # key kernel, bias; value kernel, bias
        weights[i] = np.repeat(weights[i], 2, axis=weights[i].ndim - 2)
    mha.set_weights(weights)
    want = mha(query, value, return_attention_scores=True)
    _assert_same(ours, want, query, value, None, {})


@pytest.mark.tensorflow_lane
def test_grouped_bilinear_chunked_equals_dense(rand, rng):
    """TensorFlow lane; the other lanes: `test_chunked_equals_dense` runs
    the same blocks with the scaled dot score's form."""
    x = rand(2, 9, 8)
    layers = [
        GQA(
            head_dim=4,
            num_query_heads=4,
            num_key_value_heads=2,
            score="bilinear",
            chunk_size=c,
        )
        for c in (0, 4)
    ]
    for layer in layers:
        layer(x, x)
    _random_weights(layers[0], rng)
    layers[1].set_weights(layers[0].get_weights())
    dense, chunked = (
        to_np(layer(x, x, use_causal_mask=True)) for layer in layers
    )
    np.testing.assert_allclose(chunked, dense, atol=1e-4, rtol=1e-4)


def _chunked_and_dense(score, rng, **kwargs):
    args = dict(head_dim=4, num_query_heads=4, num_key_value_heads=2)
    layers = [GQA(**args, score=score, chunk_size=c, **kwargs) for c in (0, 4)]
    x = np.zeros((2, 9, 8), "float32")
    for layer in layers:
        layer(x, x)
    _random_weights(layers[0], rng)
    layers[1].set_weights(layers[0].get_weights())
    return layers


def _output_and_grads(layer, query, value, call):
    import tensorflow as tf  # noqa: F401 (TensorFlow lane only)

    query, value = (tf.Variable(t) for t in (query, value))
    with tf.GradientTape() as tape:
        out = layer(query, value, **call)
        loss = tf.reduce_sum(out * tf.cos(out))
    grads = tape.gradient(loss, [query, value, *layer.trainable_weights])
    return [to_np(out)] + [to_np(g) for g in grads]


_CHUNKED_CALLS = [
    {"use_causal_mask": True},
    {"query_mask": "q", "value_mask": "v"},
    {"value_mask": "v", "use_causal_mask": True},
]


def _call(call, rng):
    masks = {"q": rng.random((2, 9)) > 0.3, "v": rng.random((2, 7)) > 0.3}
    masks["v"][1] = False  # a batch row with no key: zero context
    return {k: masks.get(v, v) for k, v in call.items()}


# Additive on every lane (the other lanes' form of the blocks); concat,
# the same blocks with its own projections, on TensorFlow.
@pytest.mark.parametrize(
    "score", ["additive", pytest.param("concat", marks=_TF_LANE)]
)
def test_non_dot_score_chunked_equals_dense(score, rand, rng):
    """A positive `chunk_size` on an additive score: blocks of 4 over 9
    queries and 7 keys, each group position a call of its own, against
    the dense folded path with the same weights, under every mask."""
    dense, chunked = _chunked_and_dense(score, rng, sliding_window=3)
    query, value = rand(2, 9, 8), rand(2, 7, 8)
    for call in _CHUNKED_CALLS:
        call = _call(call, rng)
        np.testing.assert_allclose(
            to_np(chunked(query, value, **call)),
            to_np(dense(query, value, **call)),
            atol=1e-5,
            rtol=1e-4,
        )


@pytest.mark.tensorflow_lane
@pytest.mark.parametrize("score", ["additive", "concat"])
def test_non_dot_score_chunked_gradients_equal_dense(score, rand, rng):
    """Every K/V head's gradient sums over its query heads' calls: the
    inputs' and every weight's gradients equal the dense path's.
    TensorFlow lane (a tape); the other lanes check the forward pass in
    `test_non_dot_score_chunked_equals_dense`, and the kernel's gradients
    on every backend in tests/ops/test_chunked.py."""
    dense, chunked = _chunked_and_dense(score, rng)
    query, value = rand(2, 9, 8), rand(2, 7, 8)
    call = _call({"value_mask": "v", "use_causal_mask": True}, rng)
    want = _output_and_grads(dense, query, value, call)
    got = _output_and_grads(chunked, query, value, call)
    assert len(got) == len(want) == 3 + len(dense.trainable_weights)
    # Tolerance scaled to each gradient: query rows with one unmasked key
    # have a zero gradient (the softmax of one logit is constant), and both
    # paths give rounding noise there of ~1e-5 of the array's largest
    # entries (~20), which an absolute 1e-4 failed on an AVX2-only CPU.
    for g, w in zip(got, want, strict=True):
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g, w, atol=1e-4 * scale, rtol=1e-4)


def test_non_dot_score_chunk_size_none_chunks_large_weights(
    rand, rng, monkeypatch, plans
):
    """`chunk_size=None` takes the blocks where the dense step would pass
    the threshold (lowered here), and gives the dense result."""
    dense, auto = _chunked_and_dense("additive", rng)
    auto.chunk_size = None
    query, value = rand(2, 9, 8), rand(2, 7, 8)
    want = to_np(dense(query, value, use_causal_mask=True))
    plans.clear()
    np.testing.assert_allclose(
        to_np(auto(query, value, use_causal_mask=True)), want, atol=1e-5
    )
    assert [p.path for p in plans] == ["dense"]  # small: dense
    monkeypatch.setattr(_plan, "AUTO_CHUNK_MIN_BYTES", 1)
    np.testing.assert_allclose(
        to_np(auto(query, value, use_causal_mask=True)),
        want,
        atol=1e-5,
        rtol=1e-4,
    )
    # One block holds the whole causal mask: no pair is skipped.
    size = _plan.auto_chunk_size(skips=False)
    assert plans[-1].path == "blocks" and plans[-1].block_size == (size, size)


@pytest.mark.parametrize("score", ["additive", "scaled_dot"])
def test_chunked_scores_are_refused_as_on_every_layer(score, rand, rng):
    # The planner's one rule: the blocks never hold the weights.
    _, chunked = _chunked_and_dense(score, rng)
    query, value = rand(2, 9, 8), rand(2, 7, 8)
    with pytest.raises(ValueError, match="not `return_attention_scores`"):
        chunked(query, value, return_attention_scores=True)


def test_non_dot_score_blocks_take_attention_masks_and_mods(rand, rng):
    """The blocks read an explicit mask and mods for any score: an
    additive score in blocks equals its dense path with them."""
    dense, chunked = _chunked_and_dense("additive", rng)
    query, value = rand(2, 9, 8), rand(2, 7, 8)
    mask = rng.random((2, 9, 7)) < 0.7
    call = dict(attention_mask=mask, mask_mod=keras_attention.ops.mods.causal())
    np.testing.assert_allclose(
        to_np(chunked(query, value, **call)),
        to_np(dense(query, value, **call)),
        atol=1e-5,
    )


@pytest.mark.tensorflow_lane
def test_additive_cached_decoding_equals_the_full_causal_pass(rand):
    """TensorFlow lane; the other lanes: the cache's masks are
    `test_decoding_token_by_token_equals_the_full_causal_pass` of
    tests/layers/test_cache.py, the additive score's path
    `test_score_equals_multi_head_attention_with_copied_weights`."""
    layer = GQA(
        head_dim=4, num_query_heads=4, num_key_value_heads=2, score="additive"
    )
    x = rand(2, 4, 8)
    full, full_scores = layer(
        x, x, use_causal_mask=True, return_attention_scores=True
    )
    cache = np.zeros((2, 2, 4, 2, 4), "float32")
    for i in range(4):
        out, scores, cache = layer(
            x[:, i : i + 1],
            x[:, i : i + 1],
            cache=cache,
            # A tensor index: on JAX one compiled update for every step.
            cache_update_index=keras.ops.convert_to_tensor(i, "int32"),
            use_causal_mask=True,
            return_attention_scores=True,
        )
        np.testing.assert_allclose(
            to_np(out)[:, 0], to_np(full)[:, i], atol=1e-5
        )
        np.testing.assert_allclose(
            to_np(scores)[:, :, 0], to_np(full_scores)[:, :, i], atol=1e-6
        )


@pytest.mark.parametrize("score", ["bilinear", "additive"])
def test_score_saves_and_loads(score, rand, rng, tmp_path):
    x = rand(2, 5, 8)
    inputs = keras.Input((5, 8))
    layer = GQA(
        head_dim=4, num_query_heads=4, num_key_value_heads=2, score=score
    )
    model = keras.Model(inputs, layer(inputs, inputs))
    _random_weights(layer, rng)
    assert layer.get_config()["score"]["class_name"] != "ScaledDotScore"
    path = str(tmp_path / "gqa.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(
        to_np(loaded(x)), to_np(model(x)), atol=1e-6, rtol=1e-6
    )
    clone = GQA.from_config(layer.get_config())
    assert type(clone.score) is type(layer.score)


def test_default_score_is_the_scaled_dot():
    layer = GQA(head_dim=4, num_query_heads=4, num_key_value_heads=2)
    assert type(layer.score).__name__ == "ScaledDotScore"
    assert layer.get_config()["score"]["class_name"] == "ScaledDotScore"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"score": "nope"}, "score='nope'"),
        (
            {"score": keras_attention.scores.LocationScore(6), "chunk_size": 4},
            "Chunked attention needs",
        ),
        (
            {"score": "concat", "flash_attention": True},
            "Flash attention needs a score",
        ),
    ],
)
def test_bad_score_arguments_are_named(kwargs, match):
    args = dict(head_dim=4, num_query_heads=4, num_key_value_heads=2)
    with pytest.raises(ValueError, match=match):
        GQA(**args, **kwargs)


def test_non_dot_score_weights_are_in_the_layers_dtype(rand):
    layer = GQA(
        head_dim=4,
        num_query_heads=4,
        num_key_value_heads=2,
        score="additive",
        dtype="mixed_float16",
    )
    out, scores = layer(
        rand(2, 5, 8), rand(2, 5, 8), return_attention_scores=True
    )
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    assert keras.backend.standardize_dtype(scores.dtype) == "float16"


def test_check_shapes_names_the_shapes():
    grouped_query._check_shapes((2, 3, 4), (2, 5, 4), (2, 5, 6))
    for shapes, match in [
        (((2, 3, 4), (2, 5, 6), (2, 5, 6)), "last dimension"),
        (((2, 3, 4), (2, 5, 4), (2, 6, 4)), "except the last one"),
        (((2, 3, 1, 4), (2, 5, 1, 4), (2, 5, 1, 4)), "time, dim"),
    ]:
        with pytest.raises(ValueError, match=match):
            grouped_query._check_shapes(*shapes)
