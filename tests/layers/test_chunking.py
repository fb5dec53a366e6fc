"""`chunk_size` of MultiHeadAttention and SelfAttention: chunked == dense."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention import ops as ka_ops
from keras_attention.ops import _native_plan
from keras_attention.ops import plan as _plan
from keras_attention.ops.plan import fused_path
from tests.autodiff import gradients
from tests.layer_basics import to_np

# The fused kernel the planner takes on this backend (Keras's on PyTorch).
FUSED = fused_path()


@pytest.fixture
def ours_only(monkeypatch):
    """The planner with no backend kernel (SDPA takes these calls on
    PyTorch's CPU): this package's choice between dense and blocks."""
    monkeypatch.setattr(_native_plan, "KERNELS", {})


def outputs_and_grads(layer, inputs, **call_kwargs):
    """The output and the gradients of `sum(output ** 2)`: inputs, weights."""
    out = ops.convert_to_numpy(layer(*inputs, **call_kwargs))

    def loss(*sources):
        out = layer(*sources[: len(inputs)], **call_kwargs)
        return ops.sum(ops.cast(out, "float32") ** 2)

    _, grads = gradients(loss, list(inputs) + layer.trainable_variables)
    return [out.astype("float32"), *grads]


def assert_paths_agree(make, inputs, atol=1e-4, **call_kwargs):
    dense = make(chunk_size=0)
    chunked = make(chunk_size=3)
    dense(*inputs, **call_kwargs)
    chunked(*inputs, **call_kwargs)
    chunked.set_weights(dense.get_weights())
    want = outputs_and_grads(dense, inputs, **call_kwargs)
    got = outputs_and_grads(chunked, inputs, **call_kwargs)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert np.all(np.isfinite(g)), i
        np.testing.assert_allclose(g, w, atol=atol, rtol=1e-3, err_msg=str(i))


# The dot, cosine, bilinear and concat scores reach the chunked kernel
# through the same two forms as scaled_dot (dot_product_form) and additive
# (additive_form); they run in the TensorFlow lane only (about 7 s each on
# JAX), and the scaled_dot and additive cases cover both forms on JAX and
# PyTorch.
_TF_LANE = pytest.mark.tensorflow_lane


@pytest.mark.parametrize(
    "score, causal",
    [
        ("scaled_dot", False),
        ("scaled_dot", True),
        pytest.param("dot", True, marks=_TF_LANE),
        pytest.param("cosine", False, marks=_TF_LANE),
        pytest.param("bilinear", True, marks=_TF_LANE),
        ("additive", False),
        pytest.param("concat", True, marks=_TF_LANE),
    ],
)
def test_mha_chunked_equals_dense_with_masks(score, causal, rand):
    # Every chunkable score (every score but the location score), each
    # with or without a causal mask.
    q, v, k = rand(2, 7, 6), rand(2, 7, 5), rand(2, 7, 4)
    v_mask = np.ones((2, 7), bool)
    v_mask[0, 5:] = False
    v_mask[1] = False  # no key at all: zero weights
    q_mask = np.ones((2, 7), bool)
    q_mask[0, 6] = False
    assert_paths_agree(
        lambda chunk_size: keras_attention.MultiHeadAttention(
            2, 4, value_dim=3, score=score, chunk_size=chunk_size
        ),
        [q, v, k],
        query_mask=q_mask,
        value_mask=v_mask,
        use_causal_mask=causal,
    )


def test_mha_chunked_equals_dense_for_different_lengths(rand):
    assert_paths_agree(
        lambda chunk_size: keras_attention.MultiHeadAttention(
            3, 4, chunk_size=chunk_size
        ),
        [rand(2, 5, 6), rand(2, 11, 6)],
        key_mask=np.arange(11)[None].repeat(2, 0) < [[9], [4]],
    )


@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_chunked_equals_dense(causal, rand):
    x = rand(2, 10, 8)
    mask = np.arange(10)[None].repeat(2, 0) < [[10], [6]]
    assert_paths_agree(
        lambda chunk_size: keras_attention.SelfAttention(
            num_heads=2, chunk_size=chunk_size
        ),
        [x],
        mask=mask,
        use_causal_mask=causal,
    )


def test_keras_mask_is_used_by_the_chunked_path(rand):
    x = rand(2, 5, 8)
    x[0, 3:] = 0.0  # masked by keras.layers.Masking
    inputs = keras.Input((5, 8))
    masked = keras.layers.Masking(0.0)(inputs)
    layer = keras_attention.SelfAttention(num_heads=2, chunk_size=2)
    model = keras.Model(inputs, layer(masked))
    explicit = layer(x, mask=np.any(x != 0, axis=-1))
    unmasked = layer(x, mask=np.ones((2, 5), bool))
    got = model.predict(x, verbose=0)
    np.testing.assert_allclose(
        got, ops.convert_to_numpy(explicit), rtol=1e-5, atol=1e-6
    )
    assert not np.allclose(got[0, :3], ops.convert_to_numpy(unmasked)[0, :3])


def test_dynamic_length_model_with_chunks(rand):
    inputs = keras.Input((None, 8))
    layer = keras_attention.SelfAttention(num_heads=2, chunk_size=4)
    model = keras.Model(inputs, layer(inputs, use_causal_mask=True))
    x = rand(2, 9, 8)
    dense = keras_attention.SelfAttention(num_heads=2, chunk_size=0)
    dense(x)
    dense.set_weights(layer.get_weights())
    np.testing.assert_allclose(
        model.predict(x, verbose=0),
        ops.convert_to_numpy(dense(x, use_causal_mask=True)),
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.heavy
def test_xla_training_step_with_chunks(rand):
    if keras.backend.backend() == "torch":
        # `jit_compile=True` is `torch.compile` there, not XLA: it traced
        # the Python block loops for 199 s of the lane (load average 8).
        pytest.skip("XLA compiles TensorFlow and JAX, not torch")
    inputs = keras.Input((12, 8))
    out = keras_attention.SelfAttention(num_heads=2, chunk_size=5)(
        inputs, use_causal_mask=True
    )
    model = keras.Model(inputs, out)
    model.compile("adam", "mse", jit_compile=True)
    history = model.fit(rand(4, 12, 8), rand(4, 12, 8), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


def test_mixed_precision_chunked_is_finite_and_float16(rand):
    keras.config.set_dtype_policy("mixed_float16")
    layer = keras_attention.MultiHeadAttention(2, 8, chunk_size=4)
    out = layer(rand(2, 9, 16) * 50, rand(2, 9, 16) * 50)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    assert np.all(np.isfinite(ops.convert_to_numpy(out).astype("float32")))


def test_chunk_size_survives_save_and_load(tmp_path, rand):
    inputs = keras.Input((6, 8))
    layer = keras_attention.SelfAttention(num_heads=2, chunk_size=4)
    model = keras.Model(inputs, layer(inputs))
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.layers[1].chunk_size == 4
    x = rand(3, 6, 8)
    np.testing.assert_allclose(
        loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6
    )


def test_automatic_choice(monkeypatch, rand, plans, ours_only):
    # A training step of 64x64 logits for one example and one head holds
    # four such tensors: just past the bar.
    monkeypatch.setattr(_plan, "AUTO_CHUNK_MIN_BYTES", 4 * 4 * 64 * 64 - 1)
    layer = keras_attention.SelfAttention(num_heads=1)
    additive = keras_attention.SelfAttention(num_heads=1, score="additive")
    dense = keras_attention.SelfAttention(num_heads=1, chunk_size=0)
    short = keras_attention.SelfAttention(num_heads=1)

    def paths():
        return [p.path for p in plans]

    plans.clear()  # the constructors' checks
    layer(rand(1, 64, 8))
    assert paths() == ["blocks"]
    assert plans[-1].block_size == (_plan.auto_chunk_size(skips=False),) * 2
    # An inference step holds half: dense.
    layer(rand(1, 64, 8), training=False)
    # Two examples of 48 (2·48² > 64²) count the batch; 48 alone does not.
    layer(rand(2, 48, 8))
    layer(rand(1, 48, 8))
    assert paths() == ["blocks", FUSED, "blocks", FUSED]
    # Scores requested or chunk_size=0: dense; an explicit mask is read
    # in the blocks.
    long_x = rand(1, 64, 8)
    plans.clear()
    layer(long_x, return_attention_scores=True)
    dense(long_x)
    layer(long_x, attention_mask=np.ones((1, 64, 64), bool))
    assert paths() == ["dense", FUSED, "blocks"]
    # An additive score holds `units` values per pair: 32² pairs of 8
    # units pass the bar that 32² dot-product logits do not.
    plans.clear()
    short(rand(1, 32, 8))
    additive(rand(1, 32, 8))
    assert paths() == [FUSED, "blocks"]


def test_a_window_that_leaves_few_blocks_takes_them(
    monkeypatch, rand, plans, ours_only
):
    """The share of blocks a band keeps (`plan.band_share`) decides long
    calls below the byte bar: a causal window of 3 over 128 positions in
    blocks of 16 keeps 15 of 64 pairs."""
    monkeypatch.setattr(_plan, "auto_chunk_size", lambda skips=True: 16)
    monkeypatch.setattr(_plan, "SPARSE_MIN_LENGTH", 128)
    x = rand(1, 128, 8)
    windowed = keras_attention.SelfAttention(num_heads=2, attention_width=3)
    dense = keras_attention.SelfAttention(
        num_heads=2, attention_width=3, chunk_size=0
    )
    want = to_np(dense(x, use_causal_mask=True))
    windowed(x)
    windowed.set_weights(dense.get_weights())
    plans.clear()
    got = to_np(windowed(x, use_causal_mask=True))
    assert [p.path for p in plans] == ["blocks"]
    assert "skip 77%" in plans[0].reason
    np.testing.assert_allclose(got, want, atol=1e-5)
    # Without the window nor causality every pair is kept: dense.
    keras_attention.SelfAttention(num_heads=2)(x)
    assert plans[-1].path == FUSED


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"chunk_size": -1}, "chunk_size=-1"),
        ({"chunk_size": 2.5}, "chunk_size=2.5"),
        ({"chunk_size": True}, "chunk_size=True"),
        (
            {
                "chunk_size": 4,
                "score": keras_attention.scores.LocationScore(max_length=8),
            },
            "score='LocationScore'",
        ),
        ({"chunk_size": 4, "dropout": 0.1}, "cannot apply dropout"),
    ],
)
def test_bad_chunk_size_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_attention.MultiHeadAttention(2, 4, **kwargs)
    with pytest.raises(ValueError, match=match):
        keras_attention.SelfAttention(2, **kwargs)


def test_scores_with_explicit_chunks_raise(rand):
    layer = keras_attention.MultiHeadAttention(2, 4, chunk_size=2)
    with pytest.raises(ValueError, match="not `return_attention_scores`"):
        layer(rand(1, 4, 8), rand(1, 4, 8), return_attention_scores=True)


@pytest.mark.parametrize("heads_axis", [False, True])
def test_an_attention_mask_with_explicit_chunks_equals_dense(heads_axis, rng):
    """A dot-product score reads `attention_mask` in the blocks of
    `flex_attention` as a mask mod, with or without a heads axis."""
    query, value = (rng.normal(size=(2, 5, 8)).astype("float32") for _ in "qv")
    mask = rng.random((2, 2, 5, 5) if heads_axis else (2, 5, 5)) > 0.4
    chunked = keras_attention.MultiHeadAttention(2, 4, chunk_size=2)
    dense = keras_attention.MultiHeadAttention(2, 4, chunk_size=0)
    chunked(query, value)
    dense(query, value)
    dense.set_weights(chunked.get_weights())
    got = chunked(query, value, attention_mask=mask)
    want = dense(query, value, attention_mask=mask)
    np.testing.assert_allclose(to_np(got), to_np(want), atol=1e-5)


@pytest.mark.parametrize(
    "make",
    [
        lambda chunk: keras_attention.MultiHeadAttention(
            2, 4, chunk_size=chunk, sliding_window=2
        ),
        lambda chunk: keras_attention.SelfAttention(
            2, chunk_size=chunk, attention_width=4
        ),
        lambda chunk: keras_attention.SelfAttention(
            2, chunk_size=chunk, attention_width=3
        ),
    ],
    ids=["sliding_window", "attention_width_even", "attention_width_odd"],
)
@pytest.mark.parametrize("causal", [False, True])
def test_windowed_layers_chunked_equal_dense(make, causal, rand):
    """A window goes through the chunked path as a band, masks included."""
    x = rand(2, 9, 8)
    mask = np.arange(9)[None].repeat(2, 0) < [[9], [7]]
    chunked, dense = make(2), make(0)
    if isinstance(chunked, keras_attention.SelfAttention):
        call = {"mask": mask, "use_causal_mask": causal}
        args = (x,)
    else:
        call = {"query_mask": mask, "value_mask": mask}
        call["use_causal_mask"] = causal
        args = (x, x)
    dense(*args)
    chunked(*args)
    chunked.set_weights(dense.get_weights())
    got, want = chunked(*args, **call), dense(*args, **call)
    keep = mask[..., None]
    np.testing.assert_allclose(
        ops.convert_to_numpy(got) * keep,
        ops.convert_to_numpy(want) * keep,
        atol=1e-5,
    )


@pytest.mark.parametrize("window", [1, 2, 4])
def test_sliding_window_band_equals_dense_window(window, rand):
    q, k, v = rand(2, 9, 2, 4), rand(2, 9, 2, 4), rand(2, 9, 2, 3)
    key_mask = np.arange(9)[None].repeat(2, 0) < [[9], [6]]
    got = ka_ops.chunked_attention(
        q, k, v, key_mask=key_mask, band=(window - 1, window - 1), chunk_size=2
    )
    mask = ka_ops.combine_masks(
        9, 9, value_mask=key_mask, sliding_window=window, heads_axis=True
    )
    want = ka_ops.dot_product_attention(q, k, v, mask, scale=0.5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(got), ops.convert_to_numpy(want), atol=1e-5
    )


def test_chunked_sliding_window_matches_keras(rand):
    """The chunked path's window against Keras's own layer, not only
    against our dense path (both take the window from one place)."""
    x = rand(2, 7, 8)
    mask = np.arange(7)[None].repeat(2, 0) < [[7], [5]]
    theirs = keras.layers.MultiHeadAttention(2, 4, sliding_window=3)
    ours = keras_attention.MultiHeadAttention(
        2, 4, sliding_window=3, chunk_size=2
    )
    theirs(x, x)
    ours(x, x)
    ours.set_weights(theirs.get_weights())
    call = {"value_mask": mask, "use_causal_mask": True}
    np.testing.assert_allclose(
        ops.convert_to_numpy(ours(x, x, **call)),
        ops.convert_to_numpy(theirs(x, x, **call)),
        atol=1e-5,
    )
