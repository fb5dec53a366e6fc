"""Integer inputs are refused by name before any computation.

Attention weighs its inputs by a softmax of their scores: token ids are
not embeddings, so every layer that attends over its inputs raises a
`TypeError` naming the argument and the dtype received, rather than
using them silently (MultiHeadAttention and SelfAttention cast them on
TensorFlow and JAX, StructuredSelfAttention returned integers) or failing
inside the backend (Attention's softmax, AttentionPooling). Masks may
still be integers.

The TensorFlow lane runs every layer and argument (`tensorflow_lane`: on
JAX each layer built costs its initializers' compiles); the other lanes
run docs/errors.md's integer-input rows, one for each call site of the
shared check, eager and symbolic.
"""

import keras
import numpy as np
import pytest

import keras_attention as ka

QUERY, VALUE = (2, 3, 4), (2, 5, 4)


def _cases():
    """`{name: (make, {argument: shape}, the integer argument)}`."""
    query_value = {"query": QUERY, "value": VALUE}
    with_key = {**query_value, "key": VALUE}
    inputs = {"inputs": VALUE}
    layers = {
        "Attention": (ka.Attention, with_key, ("query", "value", "key")),
        "Attention(additive)": (
            lambda: ka.Attention(score="additive"),
            query_value,
            ("value",),
        ),
        "HardAttention": (ka.HardAttention, query_value, ("query",)),
        "MultiHeadAttention": (
            lambda: ka.MultiHeadAttention(2, 2),
            with_key,
            ("query", "value", "key"),
        ),
        "SelfAttention": (lambda: ka.SelfAttention(2), inputs, ("inputs",)),
        "StructuredSelfAttention": (
            lambda: ka.StructuredSelfAttention(2, 2, 0.0),
            inputs,
            ("inputs",),
        ),
        "AttentionPooling": (ka.AttentionPooling, inputs, ("inputs",)),
        "MultiHead(SelfAttention)": (
            lambda: ka.MultiHead(ka.SelfAttention(), 2),
            inputs,
            ("inputs",),
        ),
        "seq2seq.BahdanauAttention": (
            lambda: ka.seq2seq.BahdanauAttention(4),
            {"query": (2, 4), "memory": VALUE},
            ("query", "memory"),
        ),
        "seq2seq.LuongMonotonicAttention": (
            lambda: ka.seq2seq.LuongMonotonicAttention(),
            {"query": (2, 4), "memory": VALUE},
            ("memory",),
        ),
        "scores.DotScore": (
            ka.scores.DotScore,
            {"query": QUERY, "key": VALUE},
            ("query", "key"),
        ),
        "scores.AdditiveScore": (
            ka.scores.AdditiveScore,
            {"query": QUERY, "key": VALUE},
            ("key",),
        ),
    }
    return {
        f"{name}-{bad}": (make, shapes, bad)
        for name, (make, shapes, bads) in layers.items()
        for bad in bads
    }


def _call(layer, shapes, values):
    """Positional for the first argument (Keras's rule), keywords after."""
    first, *rest = shapes
    return layer(values[first], **{name: values[name] for name in rest})


@pytest.mark.tensorflow_lane
@pytest.mark.parametrize("case", sorted(_cases()))
def test_an_integer_input_is_a_type_error_naming_it(case, rand):
    make, shapes, bad = _cases()[case]
    message = rf"`{bad}`.*Received: {bad}\.dtype=int32"
    eager = {name: rand(*shape) for name, shape in shapes.items()}
    eager[bad] = np.ones(shapes[bad], "int32")
    with pytest.raises(TypeError, match=message):
        _call(make(), shapes, eager)
    symbolic = {
        name: keras.Input(shape[1:], dtype="int32" if name == bad else None)
        for name, shape in shapes.items()
    }
    with pytest.raises(TypeError, match=message):
        _call(make(), shapes, symbolic)


@pytest.mark.parametrize(
    "make, masks",
    [
        (ka.Attention, ("query_mask", "value_mask")),
        (lambda: ka.MultiHeadAttention(2, 2), ("value_mask",)),
    ],
    ids=["Attention", "MultiHeadAttention"],
)
def test_integer_masks_still_work_as_booleans(make, masks, rand):
    tensors = [rand(*QUERY), rand(*VALUE)]
    shape_of = {"query_mask": QUERY[:2], "value_mask": VALUE[:2]}
    # 0, 1, 2, 0, ...: some positions masked, the others kept by a 1 or a 2.
    padded = {
        name: np.arange(np.prod(shape_of[name]), dtype="int32").reshape(
            shape_of[name]
        )
        % 3
        for name in masks
    }
    layer = make()
    with_ints = layer(*tensors, **padded)
    with_bools = layer(*tensors, **{k: v != 0 for k, v in padded.items()})
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(with_ints),
        keras.ops.convert_to_numpy(with_bools),
        rtol=1e-6,
        atol=1e-6,
    )
