"""Property tests for every layer (issue 7, item 5).

Hypothesis draws shapes, padding masks (including fully padded rows) and a
dtype policy (`float32`, `mixed_float16`, `mixed_bfloat16`) and checks, for
each layer of the library:

- the attention weights are a distribution over the unmasked keys: they
  sum to 1 there and are exactly 0 on masked keys;
- a row with no unmasked key gets zero weights and a zero context;
- values at masked (padded) positions do not change the outputs;
- with `use_causal_mask=True` (and in a decoder), outputs do not depend on
  future positions;
- output shapes and dtypes, and no NaN or inf anywhere, gradients included.

The per-layer test files check the numbers against references; this file
checks the invariants over many random cases.
"""

import dataclasses
from collections.abc import Callable

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import keras_attention
from keras_attention import scores
from keras_attention import seq2seq
from tests.autodiff import gradients
from tests.profiles import examples

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
# Tolerance of a sum of a few weights, and of two computations that should
# agree, by compute dtype.
ATOL = {"float32": 1e-5, "float16": 5e-3, "bfloat16": 3e-2}
MAX_LENGTH = 6
# JAX compiles every new shape eagerly, which costs seconds per example on
# 2 CPU cores; its lane draws fewer examples per test.
_FEW = keras.backend.backend() != "tensorflow"
EXAMPLES = examples(2 if _FEW else 6)


def to_np(x):
    return keras.ops.convert_to_numpy(x).astype("float32")


@st.composite
def padding_masks(draw, batch, length):
    """`(batch, length)` booleans; rows are often all kept or all padded."""
    rows = []
    for _ in range(batch):
        kind = draw(st.sampled_from(["all", "none", "some"]))
        if kind == "some":
            row = draw(
                st.lists(st.booleans(), min_size=length, max_size=length)
            )
        else:
            row = [kind == "all"] * length
        rows.append(row)
    return np.array(rows, dtype=bool)


def _start(policy):
    keras.config.set_dtype_policy(policy)
    return keras.config.dtype_policy().compute_dtype


def check_dtype(tensors, compute_dtype):
    for t in tensors:
        dtype = keras.backend.standardize_dtype(t.dtype)
        assert dtype == compute_dtype, f"{dtype} != {compute_dtype}"


def check_finite(*arrays):
    for a in arrays:
        assert np.all(np.isfinite(a)), "NaN or inf"


def check_distribution(weights, mask, atol, one_hot=False):
    """Weights `(B, [heads,] Tq, Tk)` against a boolean `(B, Tq, Tk)`."""
    check_finite(weights)
    if weights.ndim == 4:
        mask = mask[:, None]
    mask = np.broadcast_to(mask, weights.shape)
    assert np.all(weights[~mask] == 0), "weight on a masked key"
    assert np.all(weights >= 0) and np.all(weights <= 1 + atol)
    live = mask.any(-1)
    totals = weights.sum(-1)
    np.testing.assert_allclose(totals[live], 1.0, atol=atol)
    assert np.all(totals[~live] == 0), "fully masked row has weights"
    if one_hot:
        assert set(np.unique(weights)) <= {0.0, 1.0}
        assert np.all((weights == 1).sum(-1) == live)
    return live


def noisy_copy(rng, x, where, scale=50.0):
    """`x` with the rows `where` (a `(B, T)` mask) replaced by noise."""
    y = x.copy()
    y[where] = rng.normal(size=y[where].shape) * scale
    return y


# Layers that attend from a query to a value (and key).


@dataclasses.dataclass
class QueryValue:
    make: Callable[[], keras.layers.Layer]
    with_key: bool = True
    # Whether the layer takes a single query vector `(B, D)` as well.
    single_query: bool = False
    returns_weights: bool = True
    one_hot: bool = False
    # Sampling layers are called with training=True for the distribution
    # checks; comparisons between two calls use the deterministic path.
    sample: bool = False
    # A row with no key gets a zero context; after an output projection
    # that is the projection's bias.
    output_bias: bool = False
    value_depth: int | None = None


def _mha(**kwargs):
    return lambda: keras_attention.MultiHeadAttention(
        num_heads=2, key_dim=3, bias_initializer="random_normal", **kwargs
    )


QUERY_VALUE = {
    **{
        f"attention_{name}": QueryValue(
            lambda name=name: keras_attention.Attention(score=name),
            value_depth=5,
        )
        for name in (
            "dot",
            "scaled_dot",
            "cosine",
            "bilinear",
            "additive",
            "concat",
        )
    },
    "attention_location": QueryValue(
        lambda: keras_attention.Attention(
            score=scores.LocationScore(max_length=MAX_LENGTH)
        ),
        with_key=False,
        single_query=True,
    ),
    "attention_without_key": QueryValue(
        lambda: keras_attention.Attention(score="scaled_dot"),
        with_key=False,
        single_query=True,
    ),
    "attention_single_query_additive": QueryValue(
        lambda: keras_attention.Attention(score="additive"),
        single_query=True,
        value_depth=5,
    ),
    "hard_argmax_straight_through": QueryValue(
        lambda: keras_attention.HardAttention(score="bilinear"),
        single_query=True,
        one_hot=True,
    ),
    "hard_sample_straight_through": QueryValue(
        lambda: keras_attention.HardAttention(
            score="bilinear", mode="sample", seed=1
        ),
        one_hot=True,
        sample=True,
    ),
    "hard_argmax_reinforce": QueryValue(
        lambda: keras_attention.HardAttention(estimator="reinforce"),
        with_key=False,
        one_hot=True,
    ),
    "hard_sample_reinforce": QueryValue(
        lambda: keras_attention.HardAttention(
            score="additive", mode="sample", estimator="reinforce", seed=2
        ),
        single_query=True,
        one_hot=True,
        sample=True,
    ),
    "multi_head_dense": QueryValue(_mha(chunk_size=0), output_bias=True),
    "multi_head_chunked": QueryValue(
        _mha(chunk_size=2), returns_weights=False, output_bias=True
    ),
    "multi_head_cosine_chunked": QueryValue(
        _mha(chunk_size=3, score="cosine"),
        with_key=False,
        returns_weights=False,
        output_bias=True,
    ),
    "multi_head_additive": QueryValue(
        _mha(chunk_size=0, score="additive"), with_key=False, output_bias=True
    ),
    # keras-self-attention's options (issue 16): an activation on the
    # logits, their bias, and the penalty.
    "attention_activation_penalty": QueryValue(
        lambda: keras_attention.Attention(
            score="bilinear",
            attention_activation="tanh",
            use_attention_bias=True,
            penalty_coefficient=0.1,
        ),
        value_depth=5,
    ),
    "multi_head_activation_penalty": QueryValue(
        _mha(attention_activation="sigmoid", penalty_coefficient=0.1),
        output_bias=True,
    ),
}


def _output_bias(layer):
    return to_np(layer.output_dense.bias)


@EXAMPLES
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(QUERY_VALUE))
def test_query_value_layers_mask_properties(name, data):
    spec = QUERY_VALUE[name]
    policy = data.draw(st.sampled_from(POLICIES), label="policy")
    compute_dtype = _start(policy)
    batch = data.draw(st.integers(1, 3), label="batch")
    tq = data.draw(st.integers(1, 4), label="tq")
    tv = data.draw(st.integers(1, MAX_LENGTH), label="tv")
    depth = data.draw(st.sampled_from([2, 4]), label="depth")
    single = spec.single_query and data.draw(st.booleans(), label="single")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    value_depth = spec.value_depth if spec.with_key else depth
    value_depth = value_depth or depth

    query = rng.normal(size=(batch, tq, depth)).astype("float32")
    value = rng.normal(size=(batch, tv, value_depth)).astype("float32")
    key = rng.normal(size=(batch, tv, depth)).astype("float32")
    value_mask = data.draw(padding_masks(batch, tv), label="value_mask")
    query_mask = data.draw(padding_masks(batch, tq), label="query_mask")
    if single:
        query, query_mask, tq = query[:, 0], query_mask[:, 0], 1

    layer = spec.make()

    def call(query, value, key, training):
        kwargs = {"query_mask": query_mask, "value_mask": value_mask}
        if spec.with_key:
            kwargs["key"] = key
        if spec.returns_weights:
            kwargs["return_attention_scores"] = True
        if spec.sample:
            kwargs["training"] = training
        outputs = layer(query, value, **kwargs)
        if not spec.returns_weights:
            return outputs, None
        return outputs

    output, weights = call(query, value, key, training=True)
    tensors = [output] if weights is None else [output, weights]
    check_dtype(tensors, compute_dtype)
    out_shape = query.shape[:-1] + (
        query.shape[-1] if spec.output_bias else value_depth,
    )
    assert tuple(output.shape) == out_shape
    output = to_np(output).reshape(batch, tq, -1)
    check_finite(output)
    atol = ATOL[compute_dtype]

    full_mask = query_mask.reshape(batch, tq, 1) & value_mask[:, None, :]
    live = full_mask.any(-1)
    if weights is not None:
        heads = (2,) if spec.output_bias else ()
        assert tuple(weights.shape) == (
            (batch,) + heads + query.shape[1:-1] + (tv,)
        )
        weights = to_np(weights).reshape((batch,) + heads + (tq, tv))
        check_distribution(weights, full_mask, atol, spec.one_hot)
        if spec.one_hot:
            # The output is exactly the selected value.
            selected = np.einsum("bqk,bkd->bqd", weights, to_np(value))
            np.testing.assert_allclose(output, selected, atol=atol, rtol=atol)
    dead_rows = output[~live]
    expected = _output_bias(layer) if spec.output_bias else 0.0
    np.testing.assert_allclose(
        dead_rows, np.broadcast_to(expected, dead_rows.shape), atol=atol
    )

    # Padded values (and keys, and queries) do not change the outputs.
    reference, _ = call(query, value, key, training=False)
    noisy_value = noisy_copy(rng, value, ~value_mask)
    noisy_key = noisy_copy(rng, key, ~value_mask)
    noisy_query = query.copy()
    noisy_query[~query_mask] = 50.0
    changed, _ = call(noisy_query, noisy_value, noisy_key, training=False)
    np.testing.assert_allclose(
        to_np(changed), to_np(reference), atol=atol, rtol=atol
    )


@pytest.mark.tensorflow_lane
@EXAMPLES
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(QUERY_VALUE))
def test_query_value_layers_are_causal(name, data):
    """TensorFlow lane only (35 s of JAX test time). On JAX and PyTorch,
    tests/layers/test_multi_head.py checks causal outputs against Keras's
    layer (`causal`, `causal_and_value_mask`) and against future changes
    (test_causal_outputs_do_not_depend_on_future_positions), and
    tests/ops/test_masks.py the one mask every layer's causal flag becomes."""
    spec = QUERY_VALUE[name]
    compute_dtype = _start(data.draw(st.sampled_from(POLICIES)))
    batch = data.draw(st.integers(1, 3), label="batch")
    length = data.draw(st.integers(1, MAX_LENGTH), label="length")
    cut = data.draw(st.integers(0, length - 1), label="cut")
    depth = 4
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.normal(size=(batch, length, depth)).astype("float32")
    mask = data.draw(padding_masks(batch, length), label="mask")
    future = x.copy()
    future[:, cut + 1 :] += rng.normal(size=future[:, cut + 1 :].shape) * 10

    layer = spec.make()

    def call(x):
        kwargs = {"value_mask": mask, "use_causal_mask": True}
        if spec.with_key:
            kwargs["key"] = x
        return to_np(layer(x, x, **kwargs))

    a, b = call(x), call(future)
    check_finite(a, b)
    atol = ATOL[compute_dtype]
    np.testing.assert_allclose(
        a[:, : cut + 1], b[:, : cut + 1], atol=atol, rtol=atol
    )
    # Query 0 sees key 0 only; where that key is padded the row is empty.
    empty = ~mask[:, 0]
    expected = _output_bias(layer) if spec.output_bias else 0.0
    np.testing.assert_allclose(
        a[empty, 0], np.broadcast_to(expected, a[empty, 0].shape), atol=atol
    )


@examples(2 if _FEW else 4)
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(QUERY_VALUE))
def test_query_value_gradients_are_finite_and_zero_on_padding(name, data):
    spec = QUERY_VALUE[name]
    compute_dtype = _start(data.draw(st.sampled_from(POLICIES)))
    batch = data.draw(st.integers(1, 3), label="batch")
    tq = data.draw(st.integers(1, 4), label="tq")
    tv = data.draw(st.integers(1, MAX_LENGTH), label="tv")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    query = rng.normal(size=(batch, tq, 4)).astype("float32")
    value = rng.normal(size=(batch, tv, 4)).astype("float32")
    key = rng.normal(size=(batch, tv, 4)).astype("float32")
    value_mask = data.draw(padding_masks(batch, tv), label="value_mask")
    cotangent = rng.normal(size=(batch, tq, 4)).astype("float32")

    layer = spec.make()
    layer(query, value, key=key if spec.with_key else None)

    def loss(query, value, key):
        output = layer(
            query,
            value,
            key=key if spec.with_key else None,
            value_mask=value_mask,
            training=True,
        )
        output = keras.ops.cast(output, "float32")
        return keras.ops.sum(output * keras.ops.convert_to_tensor(cotangent))

    _, grads = gradients(loss, [query, value, key])
    check_finite(*grads)
    for grad in grads[1:]:
        assert np.all(grad[~value_mask] == 0), "gradient reaches padding"
    del compute_dtype


# SelfAttention: one sequence, its padding masks queries and keys alike.

SELF_ATTENTION = {
    "self_attention_dense": 0,
    "self_attention_chunked": 2,
}


def _self_attention(chunk_size):
    return keras_attention.SelfAttention(
        num_heads=2, chunk_size=chunk_size, bias_initializer="random_normal"
    )


@EXAMPLES
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(SELF_ATTENTION))
def test_self_attention_mask_and_causal_properties(name, data):
    chunk_size = SELF_ATTENTION[name]
    compute_dtype = _start(data.draw(st.sampled_from(POLICIES)))
    batch = data.draw(st.integers(1, 3), label="batch")
    length = data.draw(st.integers(1, MAX_LENGTH), label="length")
    causal = data.draw(st.booleans(), label="causal")
    cut = data.draw(st.integers(0, length - 1), label="cut")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.normal(size=(batch, length, 4)).astype("float32")
    mask = data.draw(padding_masks(batch, length), label="mask")
    atol = ATOL[compute_dtype]
    layer = _self_attention(chunk_size)

    def call(x, **kwargs):
        return layer(x, mask=mask, use_causal_mask=causal, **kwargs)

    output = call(x)
    check_dtype([output], compute_dtype)
    assert tuple(output.shape) == x.shape
    output = to_np(output)
    check_finite(output)
    full_mask = mask[:, :, None] & mask[:, None, :]
    if causal:
        full_mask = full_mask & np.tril(np.ones((length, length), bool))
    if chunk_size == 0:
        _, weights = call(x, return_attention_scores=True)
        check_dtype([weights], compute_dtype)
        assert tuple(weights.shape) == (batch, 2, length, length)
        check_distribution(to_np(weights), full_mask, atol)
    dead = output[~full_mask.any(-1)]
    np.testing.assert_allclose(
        dead, np.broadcast_to(_output_bias(layer), dead.shape), atol=atol
    )

    changed = noisy_copy(rng, x, ~mask)
    if causal:
        changed[:, cut + 1 :] += 10.0
    np.testing.assert_allclose(
        to_np(call(changed))[:, : cut + 1] if causal else to_np(call(changed)),
        output[:, : cut + 1] if causal else output,
        atol=atol,
        rtol=atol,
    )


# StructuredSelfAttention: hops of weights over time.


@EXAMPLES
@given(data=st.data())
def test_structured_self_attention_mask_properties(data):
    compute_dtype = _start(data.draw(st.sampled_from(POLICIES)))
    batch = data.draw(st.integers(1, 3), label="batch")
    length = data.draw(st.integers(1, MAX_LENGTH), label="length")
    hops = data.draw(st.integers(1, 3), label="hops")
    flatten = data.draw(st.booleans(), label="flatten")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.normal(size=(batch, length, 4)).astype("float32")
    mask = data.draw(padding_masks(batch, length), label="mask")
    atol = ATOL[compute_dtype]
    layer = keras_attention.StructuredSelfAttention(
        units=5, num_hops=hops, penalty_coefficient=1.0, flatten=flatten
    )

    embedding, weights = layer(x, mask=mask, return_attention_scores=True)
    check_dtype([embedding, weights], compute_dtype)
    assert tuple(weights.shape) == (batch, hops, length)
    assert tuple(embedding.shape) == (
        (batch, hops * 4) if flatten else (batch, hops, 4)
    )
    penalty = to_np(layer.losses[-1])
    check_finite(penalty)
    weights = to_np(weights)
    hop_mask = np.broadcast_to(mask[:, None, :], weights.shape)
    live = check_distribution(weights, hop_mask, atol)
    embedding = to_np(embedding).reshape(batch, hops, 4)
    check_finite(embedding)
    assert np.all(embedding[~live] == 0)

    changed = noisy_copy(rng, x, ~mask)
    np.testing.assert_allclose(
        to_np(layer(changed, mask=mask)).reshape(batch, hops, 4),
        embedding,
        atol=atol,
        rtol=atol,
    )


# seq2seq: mechanisms on their own, and inside AttentionDecoder.

MECHANISMS = {
    "bahdanau": lambda: seq2seq.BahdanauAttention(5),
    "bahdanau_normalized": lambda: seq2seq.BahdanauAttention(5, normalize=True),
    "luong_dot": lambda: seq2seq.LuongAttention("dot"),
    "luong_general": lambda: seq2seq.LuongAttention("general"),
    "luong_concat": lambda: seq2seq.LuongAttention("concat", units=5),
    "luong_location": lambda: seq2seq.LuongAttention(
        "location", max_length=MAX_LENGTH
    ),
}


@EXAMPLES
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_mechanism_mask_properties(name, data):
    compute_dtype = _start(data.draw(st.sampled_from(POLICIES)))
    batch = data.draw(st.integers(1, 3), label="batch")
    source = data.draw(st.integers(1, MAX_LENGTH), label="source")
    steps = data.draw(st.sampled_from([None, 1, 3]), label="steps")
    depth = 4
    query_depth = depth if name == "luong_dot" else 3
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    lead = (batch,) if steps is None else (batch, steps)
    query = rng.normal(size=lead + (query_depth,)).astype("float32")
    memory = rng.normal(size=(batch, source, depth)).astype("float32")
    mask = data.draw(padding_masks(batch, source), label="memory_mask")
    atol = ATOL[compute_dtype]
    layer = MECHANISMS[name]()

    context, weights = layer(query, memory, memory_mask=mask)
    check_dtype([context, weights], compute_dtype)
    assert tuple(context.shape) == lead + (depth,)
    assert tuple(weights.shape) == lead + (source,)
    rows = steps or 1
    weights = to_np(weights).reshape(batch, rows, source)
    live = check_distribution(
        weights, np.broadcast_to(mask[:, None], weights.shape), atol
    )
    context = to_np(context).reshape(batch, rows, depth)
    check_finite(context)
    assert np.all(context[~live] == 0)

    changed = noisy_copy(rng, memory, ~mask)
    context2, _ = layer(query, changed, memory_mask=mask)
    np.testing.assert_allclose(
        to_np(context2).reshape(batch, rows, depth),
        context,
        atol=atol,
        rtol=atol,
    )


DECODERS = {
    # Without an attentional layer the output is the context itself.
    "bahdanau_context_output": (MECHANISMS["bahdanau"], None),
    "luong_general_attention_layer": (MECHANISMS["luong_general"], 6),
    "luong_location_attention_layer": (MECHANISMS["luong_location"], 6),
}


@EXAMPLES
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(DECODERS))
def test_attention_decoder_mask_and_causal_properties(name, data):
    make_mechanism, units = DECODERS[name]
    compute_dtype = _start(data.draw(st.sampled_from(POLICIES)))
    batch = data.draw(st.integers(1, 3), label="batch")
    source = data.draw(st.integers(1, MAX_LENGTH), label="source")
    steps = data.draw(st.integers(1, 4), label="steps")
    cut = data.draw(st.integers(0, steps - 1), label="cut")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    inputs = rng.normal(size=(batch, steps, 3)).astype("float32")
    memory = rng.normal(size=(batch, source, 4)).astype("float32")
    mask = data.draw(padding_masks(batch, source), label="memory_mask")
    atol = ATOL[compute_dtype]
    cell = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(4), make_mechanism(), attention_layer_units=units
    )
    decoder = seq2seq.AttentionDecoder(cell, return_alignments=True)

    outputs, alignments = decoder(inputs, memory, memory_mask=mask)
    check_dtype([outputs, alignments], compute_dtype)
    depth = units or 4
    assert tuple(outputs.shape) == (batch, steps, depth)
    assert tuple(alignments.shape) == (batch, steps, source)
    outputs, alignments = to_np(outputs), to_np(alignments)
    check_finite(outputs)
    live = check_distribution(
        alignments, np.broadcast_to(mask[:, None], alignments.shape), atol
    )
    if units is None:
        assert np.all(outputs[~live] == 0)

    # Padded memory does not matter, and step t does not see inputs after t.
    changed_memory = noisy_copy(rng, memory, ~mask)
    changed_inputs = inputs.copy()
    changed_inputs[:, cut + 1 :] += 10.0
    outputs2, alignments2 = decoder(
        changed_inputs, changed_memory, memory_mask=mask
    )
    keep = slice(0, cut + 1)
    np.testing.assert_allclose(
        to_np(outputs2)[:, keep], outputs[:, keep], atol=atol, rtol=atol
    )
    np.testing.assert_allclose(
        to_np(alignments2)[:, keep], alignments[:, keep], atol=atol, rtol=atol
    )


# Local windows (issue 16): keras-self-attention's `attention_width`.


def window_mask(length, width, causal):
    """`(T, T)`: centred `t - w // 2 <= s < t - w // 2 + w`, or with
    `causal` `t - w < s <= t` (keras-self-attention's definitions)."""
    t = np.arange(length)[:, None]
    s = np.arange(length)[None, :]
    lower = t - (width - 1 if causal else width // 2)
    return (lower <= s) & (s < lower + width)


LOCAL = {
    "attention_single_input": lambda width: keras_attention.Attention(
        score="additive",
        attention_width=width,
        attention_activation="sigmoid",
    ),
    "self_attention": lambda width: keras_attention.SelfAttention(
        num_heads=2,
        attention_width=width,
        bias_initializer="random_normal",
    ),
}


@EXAMPLES
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(LOCAL))
def test_local_window_properties(name, data):
    compute_dtype = _start(data.draw(st.sampled_from(POLICIES)))
    batch = data.draw(st.integers(1, 3), label="batch")
    length = data.draw(st.integers(1, MAX_LENGTH), label="length")
    width = data.draw(st.integers(1, MAX_LENGTH + 1), label="width")
    causal = data.draw(st.booleans(), label="causal")
    cut = data.draw(st.integers(0, length - 1), label="cut")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.normal(size=(batch, length, 4)).astype("float32")
    mask = data.draw(padding_masks(batch, length), label="mask")
    atol = ATOL[compute_dtype]
    layer = LOCAL[name](width)
    kwargs = {"use_causal_mask": causal}
    if name == "self_attention":
        kwargs["mask"] = mask
    else:
        kwargs["query_mask"] = mask

    output, weights = layer(x, return_attention_scores=True, **kwargs)
    check_dtype([output, weights], compute_dtype)
    assert tuple(output.shape) == x.shape
    full_mask = mask[:, :, None] & mask[:, None, :]
    full_mask = full_mask & window_mask(length, width, causal)
    check_distribution(to_np(weights), full_mask, atol)
    output = to_np(output)
    check_finite(output)

    # Padding and, with the causal window, the future do not matter.
    changed = noisy_copy(rng, x, ~mask)
    if causal:
        changed[:, cut + 1 :] += 10.0
    keep = slice(0, cut + 1) if causal else slice(None)
    np.testing.assert_allclose(
        to_np(layer(changed, **kwargs))[:, keep],
        output[:, keep],
        atol=atol,
        rtol=atol,
    )


# AttentionPooling (issue 16): one distribution over time per example.


@EXAMPLES
@given(data=st.data())
@pytest.mark.parametrize("query", ["learned", "last"])
def test_attention_pooling_properties(query, data):
    compute_dtype = _start(data.draw(st.sampled_from(POLICIES)))
    batch = data.draw(st.integers(1, 3), label="batch")
    length = data.draw(st.integers(1, MAX_LENGTH), label="length")
    score = data.draw(st.sampled_from(["dot", "additive"]), label="score")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.normal(size=(batch, length, 4)).astype("float32")
    mask = data.draw(padding_masks(batch, length), label="mask")
    atol = ATOL[compute_dtype]
    layer = keras_attention.AttentionPooling(query=query, score=score)

    pooled, weights = layer(x, mask=mask, return_attention_scores=True)
    check_dtype([pooled, weights], compute_dtype)
    assert tuple(pooled.shape) == (batch, 4)
    assert tuple(weights.shape) == (batch, length)
    weights = to_np(weights)[:, None]
    live = check_distribution(weights, mask[:, None], atol)[:, 0]
    pooled = to_np(pooled)
    check_finite(pooled)
    assert np.all(pooled[~live] == 0)

    changed = noisy_copy(rng, x, ~mask)
    np.testing.assert_allclose(
        to_np(layer(changed, mask=mask)), pooled, atol=atol, rtol=atol
    )
