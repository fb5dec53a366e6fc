import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from keras import ops

import keras_attention
from keras_attention import scores
from tests.autodiff import gradients
from tests.layer_basics import check_layer_basics
from tests.layer_basics import to_np
from tests.profiles import examples

B, TQ, TV, DQ, DV, DK = 2, 4, 5, 6, 7, 3


@pytest.mark.parametrize(
    "init_kwargs, n_weights",
    [
        ({"score": "scaled_dot"}, 8),
        ({"score": "additive", "value_dim": 4, "use_bias": False}, 7),
    ],
)
def test_basics_with_key(init_kwargs, n_weights, rand):
    check_layer_basics(
        keras_attention.MultiHeadAttention,
        {"num_heads": 2, "key_dim": 3, **init_kwargs},
        [rand(B, TQ, DQ), rand(B, TV, DV), rand(B, TV, DK)],
        {"return_attention_scores": True},
        expected_output_shape=[(B, TQ, DQ), (B, 2, TQ, TV)],
        expected_num_trainable_weights=n_weights,
    )


def test_basics_with_output_shape_gate_and_dropout(rand):
    check_layer_basics(
        keras_attention.MultiHeadAttention,
        {
            "num_heads": 3,
            "key_dim": 2,
            "output_shape": (4, 2),
            "use_gate": True,
            "dropout": 0.3,
            "seed": 1,
            "sliding_window": 2,
        },
        [rand(B, TQ, DQ), rand(B, TV, DV)],
        {"use_causal_mask": True},
        expected_output_shape=(B, TQ, 4, 2),
        expected_num_trainable_weights=10,
    )


def test_pluggable_scores_run_and_save_load(tmp_path, rand):
    query = keras.Input((TQ, DQ))
    value = keras.Input((TV, DV))
    outputs = [
        keras_attention.MultiHeadAttention(num_heads=2, key_dim=3, score=score)(
            query, value, return_attention_scores=True
        )
        for score in ("additive", "cosine", "bilinear")
    ]
    model = keras.Model([query, value], outputs)
    inputs = [rand(B, TQ, DQ), rand(B, TV, DV)]
    want = model.predict(inputs, verbose=0)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras", safe_mode=True)
    got = loaded.predict(inputs, verbose=0)
    for g, w in zip(
        keras.tree.flatten(got), keras.tree.flatten(want), strict=True
    ):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    assert [layer.score.name for layer in loaded.layers[2:]] == [
        layer.score.name for layer in model.layers[2:]
    ]


ARGS = {
    "default": {},
    "no_bias": {"use_bias": False},
    "value_dim": {"value_dim": 4},
    "output_int": {"output_shape": 5},
    "output_tuple": {"output_shape": (3, 2)},
    "gate": {"use_gate": True},
    "window": {"sliding_window": 2},
}
MASKS = [
    "none",
    "value_mask",
    "key_mask",
    "attention_3d",
    "attention_2d",
    "attention_4d",
    "causal",
    "causal_and_value_mask",
]


def _masks(case, num_heads):
    """Call kwargs for `case` and the mask they amount to, `(B, H, Tq, Tv)`."""
    rng = np.random.default_rng(1)
    full = np.ones((B, num_heads, TQ, TV), bool)
    kwargs = {}
    padding = np.array([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1]], bool)
    if case in ("value_mask", "causal_and_value_mask"):
        kwargs["value_mask"] = padding
        full &= padding[:, None, None, :]
    if case == "key_mask":
        kwargs["key_mask"] = padding
        full &= padding[:, None, None, :]
    if case == "attention_3d":
        mask = rng.random((B, TQ, TV)) > 0.4
        kwargs["attention_mask"] = mask
        full &= mask[:, None]
    if case == "attention_2d":
        mask = rng.random((TQ, TV)) > 0.4
        kwargs["attention_mask"] = mask
        full &= mask
    if case == "attention_4d":
        mask = rng.random((B, num_heads, TQ, TV)) > 0.4
        kwargs["attention_mask"] = mask
        full &= mask
    if case.startswith("causal"):
        kwargs["use_causal_mask"] = True
        full &= np.tril(np.ones((TQ, TV), bool))
    return kwargs, full


def _window(full, window):
    i, j = np.arange(TQ)[:, None], np.arange(TV)[None]
    return full & (np.abs(i - j) < window)


def keras_output(layer, *inputs, **call_kwargs):
    """The output of a `keras.layers.MultiHeadAttention`, by its path with
    scores: on JAX its fused path (`jax.nn.dot_product_attention` and its
    fallback) fails when `value_dim != key_dim` (Keras 3.15)."""
    return layer(*inputs, return_attention_scores=True, **call_kwargs)[0]


def _pair(init_kwargs, inputs):
    """A Keras MHA and ours with Keras's weights copied over."""
    theirs = keras.layers.MultiHeadAttention(**init_kwargs)
    ours = keras_attention.MultiHeadAttention(**init_kwargs)
    keras_output(theirs, *inputs)
    ours(*inputs)
    ours.set_weights(theirs.get_weights())
    return theirs, ours


# Every argument with and without masks, and every mask kind.
GRID = [(args, "none", False) for args in ARGS]
GRID += [(args, "causal_and_value_mask", True) for args in ARGS]
GRID += [("default", mask, True) for mask in MASKS[1:-1]]
GRID += [("value_dim", mask, False) for mask in ("key_mask", "attention_4d")]


@pytest.mark.parametrize("args, mask_case, distinct_key", GRID)
def test_matches_keras_with_copied_weights(args, mask_case, distinct_key, rand):
    init_kwargs = {"num_heads": 2, "key_dim": 3, **ARGS[args]}
    inputs = [rand(B, TQ, DQ), rand(B, TV, DV)]
    if distinct_key:
        inputs.append(rand(B, TV, DK))
    theirs, ours = _pair(init_kwargs, inputs)
    if mask_case == "key_mask" and not distinct_key:
        inputs.append(inputs[1])
    call_kwargs, full = _masks(mask_case, 2)
    if "sliding_window" in init_kwargs:
        full = _window(full, init_kwargs["sliding_window"])
    want, want_w = theirs(*inputs, return_attention_scores=True, **call_kwargs)
    got, got_w = ours(*inputs, return_attention_scores=True, **call_kwargs)
    assert [w.path.split("/", 1)[1] for w in ours.weights] == [
        w.path.split("/", 1)[1] for w in theirs.weights
    ]
    # Keras spreads a fully masked query uniformly; we give it zeros.
    live = full.any(-1)
    np.testing.assert_allclose(
        to_np(got_w)[live], to_np(want_w)[live], rtol=1e-5, atol=1e-6
    )
    np.testing.assert_array_equal(to_np(got_w)[~live], 0.0)
    rows = live.all(1)
    np.testing.assert_allclose(
        to_np(got)[rows], to_np(want)[rows], rtol=1e-5, atol=1e-5
    )
    # The fast path without scores agrees too.
    np.testing.assert_allclose(
        to_np(ours(*inputs, **call_kwargs))[rows],
        to_np(keras_output(theirs, *inputs, **call_kwargs))[rows],
        rtol=1e-5,
        atol=1e-5,
    )


def test_keras_masks_match_keras_on_unpadded_rows():
    ids = np.array([[3, 1, 4, 0, 0], [2, 7, 1, 8, 0]])
    outputs = {}
    embedding = keras.layers.Embedding(10, 6, mask_zero=True)
    tokens = keras.Input((None,), dtype="int32")
    x = embedding(tokens)
    for name, cls in [
        ("keras", keras.layers.MultiHeadAttention),
        ("ours", keras_attention.MultiHeadAttention),
    ]:
        layer = cls(num_heads=2, key_dim=3, name=name)
        outputs[name] = layer(x, x, return_attention_scores=True)
    model = keras.Model(tokens, outputs)
    model.get_layer("ours").set_weights(model.get_layer("keras").get_weights())
    result = model.predict(ids, verbose=0)
    padded = ids == 0
    want, want_w = result["keras"]
    got, got_w = result["ours"]
    np.testing.assert_allclose(got[~padded], want[~padded], atol=1e-5)
    keep = ~padded[:, None, :, None] & np.ones_like(got_w, bool)
    np.testing.assert_allclose(got_w[keep], want_w[keep], atol=1e-6)
    # Padded queries attend to nothing, and nobody attends to padding.
    np.testing.assert_array_equal(got_w[np.broadcast_to(~keep, got_w.shape)], 0)
    np.testing.assert_array_equal(
        got_w * padded[:, None, None, :], np.zeros_like(got_w)
    )


def test_output_carries_the_query_mask():
    ids = np.array([[3, 1, 0], [2, 0, 0]])
    x = keras.layers.Embedding(10, 6, mask_zero=True)(ids)
    layer = keras_attention.MultiHeadAttention(num_heads=2, key_dim=3)
    mask = layer.compute_mask(x, ids != 0)
    np.testing.assert_array_equal(to_np(mask), ids != 0)
    out = layer(x, x)
    np.testing.assert_array_equal(to_np(out._keras_mask), ids != 0)


def test_bilinear_weights_are_shared_and_follow_keras_weights(rand):
    # q W kᵀ with W = I / sqrt(key_dim) is the scaled dot product, so with
    # Keras's weights first and that W last we reproduce Keras.
    inputs = [rand(B, TQ, DQ), rand(B, TV, DV)]
    theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3)
    ours = keras_attention.MultiHeadAttention(
        num_heads=2, key_dim=3, score="bilinear"
    )
    theirs(*inputs)
    ours(*inputs)
    assert ours.weights[-1].path.endswith("bilinear_score/kernel")
    assert ours.weights[-1].shape == (3, 3)
    ours.set_weights(theirs.get_weights() + [np.eye(3) / np.sqrt(3.0)])
    np.testing.assert_allclose(
        to_np(ours(*inputs)), to_np(theirs(*inputs)), rtol=1e-5, atol=1e-5
    )


@examples(12)
@given(st.integers(0, 2**31 - 1))
def test_weights_sum_to_one_over_unmasked_keys(seed):
    rng = np.random.default_rng(seed)
    mask = rng.random((B, TQ, TV)) > 0.5
    layer = keras_attention.MultiHeadAttention(num_heads=2, key_dim=3)
    _, weights = layer(
        rng.normal(size=(B, TQ, DQ)).astype("float32"),
        rng.normal(size=(B, TV, DV)).astype("float32"),
        attention_mask=mask,
        return_attention_scores=True,
    )
    weights = to_np(weights)
    np.testing.assert_array_equal(
        weights[~np.broadcast_to(mask[:, None], weights.shape)], 0
    )
    sums = weights.sum(-1)
    live = np.broadcast_to(mask.any(-1)[:, None], sums.shape)
    np.testing.assert_allclose(sums[live], 1.0, rtol=1e-5)
    np.testing.assert_array_equal(sums[~live], 0.0)


def test_padding_values_do_not_change_outputs(rand):
    layer = keras_attention.MultiHeadAttention(num_heads=2, key_dim=3)
    query, value = rand(B, TQ, DQ), rand(B, TV, DV)
    padding = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], bool)
    before = to_np(layer(query, value, value_mask=padding))
    noisy = np.where(padding[..., None], value, rand(B, TV, DV, scale=1e3))
    after = to_np(layer(query, noisy, value_mask=padding))
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)


def test_causal_outputs_do_not_depend_on_future_positions(rand):
    layer = keras_attention.MultiHeadAttention(num_heads=2, key_dim=3)
    x = rand(B, TV, DQ)
    before = to_np(layer(x, x, use_causal_mask=True))
    changed = x.copy()
    changed[:, 3:] = rand(B, TV - 3, DQ)
    after = to_np(layer(changed, changed, use_causal_mask=True))
    np.testing.assert_allclose(after[:, :3], before[:, :3], atol=1e-6)
    assert not np.allclose(after[:, 3:], before[:, 3:])


def test_causal_flag_equals_lower_triangular_attention_mask(rand):
    layer = keras_attention.MultiHeadAttention(num_heads=2, key_dim=3)
    query, value = rand(B, TQ, DQ), rand(B, TV, DV)
    flag = layer(
        query, value, use_causal_mask=True, return_attention_scores=True
    )
    tril = np.tril(np.ones((TQ, TV), bool))
    explicit = layer(
        query,
        value,
        attention_mask=np.broadcast_to(tril, (B, TQ, TV)),
        return_attention_scores=True,
    )
    for a, b in zip(flag, explicit, strict=True):
        np.testing.assert_allclose(to_np(a), to_np(b), rtol=1e-6, atol=1e-6)


def test_fully_masked_rows_give_zero_weights_and_zero_context(rand):
    layer = keras_attention.MultiHeadAttention(num_heads=2, key_dim=3)
    query, value = rand(B, TQ, DQ), rand(B, TV, DV)
    mask = np.ones((B, TQ, TV), bool)
    mask[0, 1] = False
    query_mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
    call_kwargs = {"query_mask": query_mask, "attention_mask": mask}
    out, weights = layer(
        query, value, return_attention_scores=True, **call_kwargs
    )
    _, grads = gradients(
        lambda q, *_: ops.sum(layer(q, value, **call_kwargs)),
        [query] + layer.trainable_weights,
    )
    out, weights = to_np(out), to_np(weights)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(weights))
    assert all(np.all(np.isfinite(g)) for g in grads)
    np.testing.assert_array_equal(weights[0, :, 1], 0.0)
    np.testing.assert_array_equal(weights[0, :, 3], 0.0)
    # A zero context projects to the output bias alone.
    bias = to_np(layer.output_dense.bias)
    np.testing.assert_allclose(out[0, 1], bias, atol=1e-6)
    np.testing.assert_allclose(out[0, 3], bias, atol=1e-6)


@pytest.mark.parametrize("score", ["scaled_dot", "dot"])
def test_hand_written_gradient_matches_autodiff(score, rand, rng):
    # Without scores returned, dot scores take the path with a hand-written
    # backward pass; with them, plain autodiff. Both must agree.
    layer = keras_attention.MultiHeadAttention(
        num_heads=2, key_dim=3, score=score
    )
    inputs = [rand(B, TQ, DQ), rand(B, TV, DV)]
    mask = rng.random((B, TQ, TV)) > 0.3
    mask[1, 2] = False
    query_mask = np.array([[1, 1, 0, 1], [1, 1, 1, 1]], bool)
    target = rand(B, TQ, DQ)
    layer(*inputs)

    def grads(return_attention_scores):
        def loss(query, value, *_):
            out = layer(
                query,
                value,
                attention_mask=mask,
                query_mask=query_mask,
                return_attention_scores=return_attention_scores,
            )
            if return_attention_scores:
                out = out[0]
            return ops.sum(ops.multiply(out, target))

        return gradients(loss, inputs + layer.trainable_weights)[1]

    for got, want in zip(grads(False), grads(True), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_scores_are_pre_dropout_and_dropout_only_in_training(rand):
    layer = keras_attention.MultiHeadAttention(
        num_heads=2, key_dim=3, dropout=0.5, seed=0
    )
    query, value = rand(B, TQ, DQ), rand(B, TV, DV)
    out, weights = layer(
        query, value, return_attention_scores=True, training=True
    )
    np.testing.assert_allclose(to_np(weights).sum(-1), 1.0, rtol=1e-5)
    inference = to_np(layer(query, value))
    np.testing.assert_allclose(to_np(layer(query, value)), inference)
    assert not np.allclose(to_np(out), inference)


def test_regularization_losses_match_keras(rand):
    regs = {"kernel_regularizer": "l2", "activity_regularizer": "l1"}
    inputs = [rand(B, TQ, DQ), rand(B, TV, DV)]
    theirs, ours = _pair({"num_heads": 2, "key_dim": 3, **regs}, inputs)
    theirs(*inputs)
    ours(*inputs)
    assert len(ours.losses) == len(theirs.losses) == 8
    np.testing.assert_allclose(
        sorted(float(to_np(x)) for x in ours.losses),
        sorted(float(to_np(x)) for x in theirs.losses),
        rtol=1e-5,
    )


def test_mixed_float16_with_large_inputs_stays_finite(rand):
    # Logits of about 1e5 overflow float16; they are computed in float32.
    inputs = [rand(B, TQ, 32, scale=200.0), rand(B, TV, 32, scale=200.0)]
    reference = keras_attention.MultiHeadAttention(num_heads=2, key_dim=16)
    want = to_np(reference(*inputs))
    keras.config.set_dtype_policy("mixed_float16")
    layer = keras_attention.MultiHeadAttention(num_heads=2, key_dim=16)
    layer(*inputs)
    layer.set_weights(reference.get_weights())
    out, weights = layer(*inputs, return_attention_scores=True)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    assert keras.backend.standardize_dtype(weights.dtype) == "float16"
    assert np.all(np.isfinite(to_np(weights)))
    # Without scores the dot score takes the hand-written-gradient path;
    # with them, autodiff. Where the weights are one-hot the true gradient
    # of the query and key kernels is 0, and a float16 rounding in the
    # hand-written one used to overflow it to inf.
    fast = layer(*inputs)

    def grads(return_attention_scores):
        def loss(*_):
            out = layer(
                *inputs, return_attention_scores=return_attention_scores
            )
            if return_attention_scores:
                out = out[0]
            return ops.sum(ops.cast(out, "float32"))

        return gradients(loss, layer.trainable_weights)[1]

    fast_grads, autodiff_grads = grads(False), grads(True)
    scale = max(np.abs(g).max() for g in autodiff_grads)
    for got, want_grad in zip(fast_grads, autodiff_grads, strict=True):
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want_grad, atol=0.01 * scale)
    for got in (out, fast):
        got = to_np(got).astype("float32")
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, atol=0.02 * np.abs(want).max())


# On PyTorch `jit_compile=True` is Dynamo, not XLA: 50 s (MultiHeadAttention)
# and 18 s (Attention) of that lane, which leaves out the XLA training
# tests (docs/testing.md); every layer trains one step there in its
# basics (`tests/layer_basics.py`).
@pytest.mark.heavy
@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="jit_compile=True is Dynamo on PyTorch, not XLA",
)
def test_xla_training_step(rand):
    tokens = keras.Input((6,), dtype="int32")
    x = keras.layers.Embedding(20, 8, mask_zero=True)(tokens)
    x = keras_attention.SelfAttention(num_heads=2)(x, use_causal_mask=True)
    x = keras_attention.MultiHeadAttention(
        num_heads=2, key_dim=4, score="additive", dropout=0.1
    )(x, x)
    outputs = keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(x))
    model = keras.Model(tokens, outputs)
    model.compile(optimizer="adam", loss="mse", jit_compile=True)
    ids = np.array([[1, 2, 3, 0, 0, 0], [4, 5, 6, 7, 8, 9]] * 2)
    before = model.get_weights()
    history = model.fit(ids, rand(4, 1), batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    # Exact comparison: with some draws of the data the additive score's
    # query kernel gets gradients of ~1e-10, and Adam's step is then below
    # allclose's tolerance although the weight did get a gradient.
    changed = [
        not np.array_equal(a, b)
        for a, b in zip(before, model.get_weights(), strict=True)
    ]
    # Key biases get no gradient: they shift a query's logits uniformly.
    key_bias = ["key/bias" in w.path for w in model.weights]
    assert all(c or k for c, k in zip(changed, key_bias, strict=True))


def test_loads_the_config_of_a_keras_layer(rand):
    inputs = [rand(B, TQ, DQ), rand(B, TV, DV)]
    theirs = keras.layers.MultiHeadAttention(
        num_heads=2, key_dim=3, value_dim=4, output_shape=5, use_gate=True
    )
    want = to_np(keras_output(theirs, *inputs))
    ours = keras_attention.MultiHeadAttention.from_config(theirs.get_config())
    ours(*inputs)
    ours.set_weights(theirs.get_weights())
    np.testing.assert_allclose(to_np(ours(*inputs)), want, rtol=1e-5, atol=1e-5)


def test_attention_axes_of_the_sequence_axis_is_accepted(rand):
    inputs = [rand(B, TQ, DQ), rand(B, TV, DV)]
    theirs, ours = _pair(
        {"num_heads": 2, "key_dim": 3, "attention_axes": 1}, inputs
    )
    np.testing.assert_allclose(
        to_np(ours(*inputs)), to_np(theirs(*inputs)), rtol=1e-5, atol=1e-5
    )
    assert ours.get_config()["attention_axes"] == (1,)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_heads": 0}, "num_heads=0"),
        ({"key_dim": 2.5}, "key_dim=2.5"),
        ({"value_dim": -1}, "value_dim=-1"),
        ({"dropout": 1.5}, "dropout=1.5"),
        ({"output_shape": "wide"}, "output_shape='wide'"),
        ({"output_shape": (4, 0)}, r"output_shape=\(4, 0\)"),
        ({"attention_axes": "1"}, "must be an int, list, or tuple"),
        ({"attention_axes": (1, 2.0)}, r"attention_axes=\(1, 2.0\)"),
        ({"sliding_window": 0}, "sliding_window=0"),
        (
            {"flash_attention": True, "dropout": 0.1},
            "Dropout is not supported when flash attention is enabled",
        ),
        (
            {"flash_attention": True, "score": "additive"},
            "flash_attention=True, score='AdditiveScore'",
        ),
        ({"score": "nope"}, "score='nope'"),
    ],
)
def test_invalid_constructor_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_attention.MultiHeadAttention(
            **{"num_heads": 2, "key_dim": 3, **kwargs}
        )


@pytest.mark.parametrize(
    "shapes, match",
    [
        (((B, DQ), (B, TV, DV), None), r"query.shape=\(2, 6\)"),
        (
            ((B, TQ, DQ), (B, TV, DV), (B, TV + 1, DK)),
            r"must be equal. Received: value_shape=\(2, 5, 7\) and "
            r"key_shape=\(2, 6, 3\)",
        ),
        (((B, TQ, None), (B, TV, DV), None), r"query.shape=\(2, 4, None\)"),
    ],
)
def test_incompatible_shapes_raise_naming_them(shapes, match):
    layer = keras_attention.MultiHeadAttention(num_heads=2, key_dim=3)
    with pytest.raises(ValueError, match=match):
        layer.build(*shapes)


def test_attention_mask_of_bad_rank_raises(rand):
    layer = keras_attention.MultiHeadAttention(num_heads=2, key_dim=3)
    with pytest.raises(ValueError, match=r"attention_mask.shape=\(5,\)"):
        layer(rand(B, TQ, DQ), rand(B, TV, DV), attention_mask=np.ones(5))


def test_score_instance_is_kept_and_serialized(rand):
    score = scores.AdditiveScore(units=5)
    layer = keras_attention.MultiHeadAttention(
        num_heads=2, key_dim=3, score=score
    )
    assert layer.score is score
    layer(rand(B, TQ, DQ), rand(B, TV, DV))
    clone = keras_attention.MultiHeadAttention.from_config(layer.get_config())
    assert isinstance(clone.score, scores.AdditiveScore)
    assert clone.score.units == 5
