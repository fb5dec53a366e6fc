"""Keras's override points of MultiHeadAttention, flash attention, and
the route of one call through the package."""

import os
import sys

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention.ops import plan as _plan
from keras_attention.ops.plan import fused_path
from tests.layer_basics import to_np

# The fused kernel the planner takes on this backend (Keras's on PyTorch).
FUSED = fused_path()


class _RecordingAttention(keras_attention.MultiHeadAttention):
    """Counts `_compute_attention` calls and halves its output."""

    calls = 0

    def _compute_attention(self, query, key, value, *args, **kwargs):
        type(self).calls += 1
        context, weights = super()._compute_attention(
            query, key, value, *args, **kwargs
        )
        return context * 0.5, weights


def test_an_overridden_compute_attention_is_called(rand, monkeypatch):
    # Even where the layer would otherwise take the chunked path by itself.
    monkeypatch.setattr(_plan, "AUTO_CHUNK_MIN_BYTES", 1)
    x = rand(2, 6, 8)
    plain = keras_attention.MultiHeadAttention(2, 4, use_bias=False)
    plain(x, x)
    layer = _RecordingAttention(2, 4, use_bias=False)
    layer(x, x)
    layer.set_weights(plain.get_weights())
    _RecordingAttention.calls = 0
    got = to_np(layer(x, x))
    assert _RecordingAttention.calls == 1
    # Without biases the output projection is linear: half the context,
    # half the output.
    np.testing.assert_allclose(got, 0.5 * to_np(plain(x, x)), atol=1e-5)


def test_an_overridden_compute_attention_keeps_the_fused_kernel(rand, plans):
    """A subclass's hook that calls the base's still runs the fused kernel
    the call was planned for (not the logits kept for a logits hook), and
    the weights when the call asks for them."""
    layer = _RecordingAttention(2, 4)
    x = rand(2, 6, 8)
    layer(x, x)
    plans.clear()
    layer(x, x)
    assert [p.path for p in plans] == [FUSED]
    plans.clear()
    _, weights = layer(x, x, return_attention_scores=True)
    assert [p.path for p in plans] == ["dense"] and weights is not None


def test_compute_attention_takes_keras_masks_and_the_causal_flag(rand):
    layer = keras_attention.MultiHeadAttention(3, 4)
    q, v = rand(2, 5, 8), rand(2, 5, 8)
    padding = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    expected, expected_w = layer(
        q,
        v,
        attention_mask=np.broadcast_to(padding[:, None], (2, 5, 5)),
        use_causal_mask=True,
        return_attention_scores=True,
    )
    query = layer.query_dense(q)
    key = layer.key_dense(v)
    value = layer.value_dense(v)
    # A `(B, Tq, Tk)` mask, as Keras documents for the hook, and the flag.
    context, weights = layer._compute_attention(
        query,
        key,
        value,
        attention_mask=np.broadcast_to(padding[:, None], (2, 5, 5)),
        return_attention_scores=True,
        use_causal_mask=True,
    )
    np.testing.assert_allclose(to_np(weights), to_np(expected_w), atol=1e-6)
    np.testing.assert_allclose(
        to_np(layer.output_dense(context)), to_np(expected), atol=1e-5
    )
    assert np.all(np.triu(to_np(weights)[1, 0], 1) == 0)


def test_sliding_window_is_kept_where_keras_keeps_it():
    layer = keras_attention.MultiHeadAttention(2, 4, sliding_window=3)
    assert layer._sliding_window == 3
    restored = keras_attention.MultiHeadAttention.from_config(
        layer.get_config()
    )
    assert restored._sliding_window == 3


def test_flash_attention_follows_the_argument_and_the_global_switch():
    assert not keras_attention.MultiHeadAttention(2, 4)._flash_attention
    layer = keras_attention.MultiHeadAttention(2, 4, flash_attention=True)
    assert layer._flash_attention is True
    assert layer.get_config()["flash_attention"] is True
    restored = keras_attention.MultiHeadAttention.from_config(
        layer.get_config()
    )
    assert restored._flash_attention is True
    keras.config.disable_flash_attention()
    try:
        layer = keras_attention.MultiHeadAttention(2, 4)
        assert layer._flash_attention is False
    finally:
        keras.config.enable_flash_attention()


def test_flash_attention_returns_no_scores(rand):
    layer = keras_attention.MultiHeadAttention(2, 4, flash_attention=True)
    with pytest.raises(ValueError, match="Returning attention scores is not"):
        layer(rand(1, 3, 8), rand(1, 3, 8), return_attention_scores=True)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"chunk_size": -1}, ValueError, "Received: chunk_size=-1"),
        ({"chunk_size": 1.5}, ValueError, "Received: chunk_size=1.5"),
        (
            {"chunk_size": 4, "score": keras_attention.scores.LocationScore(4)},
            ValueError,
            "Chunked attention needs a score",
        ),
        ({"chunk_size": 4, "dropout": 0.1}, ValueError, "cannot apply dropout"),
        (
            {"flash_attention": True, "dropout": 0.1},
            ValueError,
            "Dropout is not supported when flash attention is enabled",
        ),
        (
            {"flash_attention": True, "score": "additive"},
            ValueError,
            "Flash attention needs a score",
        ),
        (
            {"flash_attention": True, "attention_activation": "relu"},
            ValueError,
            "never forms the logits",
        ),
        ({"use_sinks": "yes"}, ValueError, "use_sinks='yes'"),
    ],
)
def test_the_constructors_refuse_what_the_planner_refuses(kwargs, error, match):
    """The refusals live in the planner; every layer asks it at once."""
    for make in (
        lambda **k: keras_attention.MultiHeadAttention(2, 4, **k),
        lambda **k: keras_attention.SelfAttention(2, **k),
        lambda **k: keras_attention.GroupedQueryAttention(4, 4, 2, **k),
    ):
        with pytest.raises(error, match=match):
            make(**kwargs)


@pytest.mark.tensorflow_only
def test_flash_attention_is_never_silently_ignored(rand):
    # TensorFlow has no fused kernel: Keras's own error, not dense math.
    layer = keras_attention.MultiHeadAttention(2, 4, flash_attention=True)
    with pytest.raises(ValueError, match="not supported in tensorflow"):
        layer(rand(1, 3, 8), rand(1, 3, 8))


def _keras_style_subclass(base):
    """A subclass written against Keras's layer, as keras-hub writes them.

    Its `build` makes the projections from Keras's private attributes (the
    key projection without a bias, as Whisper's) and `_build_attention`;
    its `call` is Keras's recipe on the attributes `_build_attention` sets.
    """

    class KerasStyle(base):
        def build(self, query_shape, value_shape):
            common = self._get_common_kwargs_for_sublayer
            bias = "de" if self._use_bias else None
            for name, depth, b, shape in (
                ("query", self._key_dim, bias, query_shape),
                ("key", self._key_dim, None, value_shape),
                ("value", self._value_dim, bias, value_shape),
            ):
                dense = keras.layers.EinsumDense(
                    "abc,cde->abde",
                    output_shape=(None, self._num_heads, depth),
                    bias_axes=b,
                    name=name,
                    **common(),
                )
                dense.build(shape)
                setattr(self, f"_{name}_dense", dense)
            self._build_attention(len(query_shape) + 1)
            self._output_dense = keras.layers.EinsumDense(
                "abcd,cde->abe",
                output_shape=(None, query_shape[-1]),
                bias_axes="e",
                name="attention_output",
                **common(),
            )
            self._output_dense.build(
                tuple(query_shape[:-1]) + (self._num_heads, self._value_dim)
            )

        def call(self, query, value, attention_mask=None):
            q = self._query_dense(query) * self._inverse_sqrt_key_dim
            k, v = self._key_dense(value), self._value_dense(value)
            scores = keras.ops.einsum(self._dot_product_equation, k, q)
            weights = self._masked_softmax(scores, attention_mask)
            weights = self._dropout_layer(weights)
            context = keras.ops.einsum(self._combine_equation, weights, v)
            return self._output_dense(context), weights

    return KerasStyle


def test_a_subclass_written_for_keras_runs_on_ours(rand):
    # keras-hub's CachedMultiHeadAttention, Whisper's and XLNet's
    # attention subclass Keras's layer this way (docs/testing.md).
    q, v = rand(2, 3, 8), rand(2, 4, 8)
    mask = np.ones((2, 3, 4), bool)
    mask[0, :, 2:] = False
    mask[1, 0] = False
    args = {"num_heads": 2, "key_dim": 4, "dropout": 0.5}
    theirs = _keras_style_subclass(keras.layers.MultiHeadAttention)(**args)
    ours = _keras_style_subclass(keras_attention.MultiHeadAttention)(**args)
    expected, expected_w = theirs(q, v, attention_mask=mask)
    ours(q, v, attention_mask=mask)
    ours.set_weights(theirs.get_weights())
    got, got_w = ours(q, v, attention_mask=mask)
    # Query 0 of batch 1 sees no key: zero weights, in Keras's too.
    assert np.all(to_np(got_w)[1, :, 0] == 0)
    np.testing.assert_allclose(to_np(got_w), to_np(expected_w), atol=1e-6)
    np.testing.assert_allclose(to_np(got), to_np(expected), atol=1e-5)
    assert ours.key_dense.bias is None and ours.query_dense.bias is not None


@pytest.mark.tensorflow_lane
def test_build_attention_sets_keras_equations_and_softmax(rand):
    """Keras's equations, and `_masked_softmax` over two attention axes.

    On the other backends `test_a_subclass_written_for_keras_runs_on_ours`
    runs the equations and `_masked_softmax` (one axis) against Keras's.
    """
    for shape, axes in (
        ((2, 3, 8), None),
        ((2, 3, 2, 8), (2,)),
        ((2, 3, 2, 8), (1, 2)),
    ):
        theirs = keras.layers.MultiHeadAttention(2, 4, attention_axes=axes)
        ours = keras_attention.MultiHeadAttention(2, 4, attention_axes=axes)
        theirs.build(shape, shape)
        ours.build(shape, shape)
        for name in (
            "_attention_axes",
            "_dot_product_equation",
            "_combine_equation",
        ):
            assert getattr(ours, name) == getattr(theirs, name), (name, axes)
    # Over two attention axes: `(B, heads, 3, 2, 3, 2)` scores.
    scores = rand(2, 2, 3, 2, 3, 2)
    mask = np.ones((2, 3, 2, 3, 2), bool)
    mask[0, 0] = False
    mask[1, ..., 0] = False
    got = to_np(ours._masked_softmax(scores, mask))
    expected = to_np(theirs._masked_softmax(scores, mask))
    # Fully masked queries get zeros, masked keys 0, as in Keras's.
    assert np.all(got[0, :, 0] == 0) and np.all(got[1, ..., 0] == 0)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    np.testing.assert_allclose(
        to_np(ours._softmax(scores)), to_np(theirs._softmax(scores)), atol=1e-6
    )


def test_keras_private_argument_attributes_match_keras():
    args = {
        "num_heads": 2,
        "key_dim": 3,
        "dropout": 0.25,
        "use_bias": False,
        "use_gate": True,
        "kernel_initializer": "he_normal",
        "bias_regularizer": "l2",
        "activity_regularizer": "l1",
        "kernel_constraint": "non_neg",
    }
    theirs = keras.layers.MultiHeadAttention(**args)
    ours = keras_attention.MultiHeadAttention(**args)
    for name in (
        "_num_heads _key_dim _value_dim _dropout _use_bias _use_gate "
        "_inverse_sqrt_key_dim _kernel_initializer _bias_initializer "
        "_kernel_regularizer _bias_regularizer _activity_regularizer "
        "_kernel_constraint _bias_constraint"
    ).split():
        got, expected = getattr(ours, name), getattr(theirs, name)
        if hasattr(expected, "get_config"):
            got, expected = got.get_config(), expected.get_config()
        assert got == expected, name
    # Set, as XLNet's `build` sets `_use_bias`: the config follows.
    for layer in (ours, theirs):
        layer._use_bias, layer._value_dim = True, 5
    for key in ("use_bias", "value_dim"):
        assert ours.get_config()[key] == theirs.get_config()[key], key
    # The sublayer arguments too, with a fresh initializer per call.
    common = ours._get_common_kwargs_for_sublayer()
    assert common.keys() == theirs._get_common_kwargs_for_sublayer().keys()
    again = ours._get_common_kwargs_for_sublayer()
    assert common["kernel_initializer"] is not again["kernel_initializer"]


# The modules of the package whose code one `MultiHeadAttention`
# self-attention call with a causal mask runs, on each backend
# (docs/architecture.md, "How a call flows", says why each one): issue 59
# counted 28 (27 on PyTorch) before per-call work moved to the class and
# to `build`, and the forwarding steps went (22 and 21); 19 and 18 since a
# call without a cache opens none and the ring's scope is read, not asked;
# 16, 12 and 13 since the inputs' checks are one module, a score's form is
# an attribute of its class and the band one object of its limits; 13 on
# TensorFlow since the fused kernel registers itself (`ops/_fused.py`),
# its softmax is the logits' (`ops/logits.py`) and the band is evaluated
# on its grid by its own class, in `ops/masks.py`.
CROSSED_AT_MOST = {"tensorflow": 13, "jax": 12, "torch": 13}
# The floors, lowest first (docs/architecture.md): a call goes down them.
_FLOORS = ("ops", "scores", "layers")
_PACKAGE = os.path.dirname(keras_attention.__file__)


def _floor(module):
    top = module.split(os.sep)[0]
    return _FLOORS.index(top) + 1 if top in _FLOORS else 0


def _route(call):
    """The package's modules `call()` runs code of, and its calls that
    go up a floor `(caller, callee, function)`."""
    crossed, upward = set(), []

    def profile(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.startswith(_PACKAGE):
            return
        module = os.path.relpath(frame.f_code.co_filename, _PACKAGE)
        crossed.add(module)
        caller = frame.f_back
        if caller is None or not caller.f_code.co_filename.startswith(_PACKAGE):
            return
        source = os.path.relpath(caller.f_code.co_filename, _PACKAGE)
        # The score the call's record carries is asked for its form by
        # the planner and the kernel (a value handed down, as flax hands
        # its layer the `attention_fn`).
        by_record = source.startswith("ops") and module.startswith("scores")
        if _floor(module) > _floor(source) and not by_record:
            upward.append((source, module, frame.f_code.co_name))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(previous)
    return crossed, upward


def test_a_causal_self_attention_call_crosses_few_modules_downwards(rand):
    layer = keras_attention.MultiHeadAttention(2, 4)
    x = rand(1, 6, 8)
    layer(x, x, use_causal_mask=True)  # built; first-call imports done
    crossed, upward = _route(lambda: layer(x, x, use_causal_mask=True))
    bound = CROSSED_AT_MOST[keras.backend.backend()]
    assert len(crossed) <= bound, sorted(crossed)
    assert "layers/_multi_head_base.py" in crossed, sorted(crossed)
    assert not upward, upward
