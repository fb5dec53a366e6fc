"""`keras_attention.ops.gated_delta_rule`: both forms against the NumPy
recurrence (tests/gated_delta_reference.py), against each other, against
keras-hub's functions, gradients against finite differences, documents,
grouped heads, extreme decays, bfloat16, the compiled graph's size and
the errors."""

import keras
import numpy as np
import pytest

from keras_attention import ops as ka_ops
from tests import gated_delta_reference as reference

BACKEND = keras.backend.backend()
TOLERANCE = reference.TOLERANCE


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


_run = reference.run


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("length", [1, 63, 64, 65, 257])
def test_both_forms_equal_the_numpy_recurrence(rng, length, with_state):
    # Grouped heads: two query/key heads over four value heads.
    args = reference.inputs(rng, 2, length, 2, 4, 8, 6)
    state = rng.normal(size=(2, 4, 8, 6)).astype("float32")
    state = state if with_state else None
    expected, expected_state = reference.gated_delta_rule(
        *args, initial_state=state
    )
    for form in ("chunk", "recurrent"):
        out, final = _run(args, initial_state=state, form=form)
        np.testing.assert_allclose(out, expected, atol=TOLERANCE)
        np.testing.assert_allclose(final, expected_state, atol=TOLERANCE)


def test_chunk_size_never_changes_the_result(rng):
    args = reference.inputs(rng, 1, 37, 1, 2, 4, 3)
    expected, expected_state = reference.gated_delta_rule(*args)
    for chunk_size in (1, 5, 64):
        out, state = _run(args, chunk_size=chunk_size, form="chunk")
        np.testing.assert_allclose(out, expected, atol=TOLERANCE)
        np.testing.assert_allclose(state, expected_state, atol=TOLERANCE)


def test_scale_and_the_default_form(rng):
    short = reference.inputs(rng, 1, 5, 1, 1, 4, 3)
    long = reference.inputs(rng, 1, 40, 1, 1, 4, 3)
    for args in (short, long):
        expected, _ = reference.gated_delta_rule(*args, scale=0.3)
        out = ka_ops.gated_delta_rule(*args, scale=0.3)
        np.testing.assert_allclose(_numpy(out), expected, atol=TOLERANCE)


def test_prefill_then_token_by_token_equals_one_call(rng):
    args = reference.inputs(rng, 2, 23, 1, 2, 4, 3)
    full, full_state = _run(args, form="chunk", chunk_size=8)
    out, state = _run([x[:, :15] for x in args], chunk_size=8)
    outs = [out]
    for t in range(15, 23):
        step = [x[:, t : t + 1] for x in args]
        out, state = _run(step, initial_state=state, form="recurrent")
        outs.append(out)
    np.testing.assert_allclose(
        np.concatenate(outs, axis=1), full, atol=TOLERANCE
    )
    np.testing.assert_allclose(state, full_state, atol=TOLERANCE)


def test_packed_documents_equal_each_document_alone(rng):
    lengths = (7, 1, 12, 4)
    args = reference.inputs(rng, 1, sum(lengths), 1, 2, 4, 3)
    initial = rng.normal(size=(1, 2, 4, 3)).astype("float32")
    segment_ids = np.repeat(np.arange(4), lengths)[None]
    starts = np.cumsum((0,) + lengths)
    alone = []
    for i, (a, b) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        state = initial if i == 0 else None
        out, last = _run([x[:, a:b] for x in args], initial_state=state)
        alone.append(out)
    for form in ("chunk", "recurrent"):
        out, final = _run(
            args,
            initial_state=initial,
            segment_ids=segment_ids,
            form=form,
            chunk_size=8,
        )
        np.testing.assert_allclose(
            out, np.concatenate(alone, axis=1), atol=TOLERANCE
        )
        np.testing.assert_allclose(final, last, atol=TOLERANCE)


def test_documents_that_begin_on_and_off_chunk_boundaries(rng):
    args = reference.inputs(rng, 2, 20, 1, 1, 4, 3)
    segment_ids = np.stack(
        [
            np.repeat([0, 1, 2], [8, 8, 4]),
            np.repeat([3, 5, 4, 6], [3, 6, 1, 10]),
        ]
    )
    expected, expected_state = reference.gated_delta_rule(
        *args, segment_ids=segment_ids
    )
    out, state = _run(args, segment_ids=segment_ids, chunk_size=4)
    np.testing.assert_allclose(out, expected, atol=TOLERANCE)
    np.testing.assert_allclose(state, expected_state, atol=TOLERANCE)


@pytest.mark.parametrize(
    "decays",
    [
        "zero",  # no decay at all
        "very_negative",  # the state forgotten at every step
        "mixed",  # one step that forgets, small decays around it
        "minus_infinity",  # the same, the forgetting step's decay -inf
    ],
)
def test_extreme_decays_stay_exact_and_finite(rng, decays):
    args = reference.inputs(rng, 1, 24, 1, 1, 4, 3)
    g = args[3]
    if decays == "zero":
        g[:] = 0.0
    elif decays == "very_negative":
        g[:] = -1e4
    else:
        g[:, 9] = -1e6 if decays == "mixed" else -np.inf
        g[:, 10:] *= 1e-3
    expected, expected_state = reference.gated_delta_rule(*args)
    reference.check_forms(args, (expected, expected_state), 16)


@pytest.mark.parametrize("form", ["chunk", "recurrent"])
def test_gradients_match_finite_differences(rng, form):
    """Query, key, value, g, beta and the initial state, through a loss of
    the output and the final state, with grouped heads and documents."""
    args = reference.inputs(rng, 1, 5, 1, 2, 3, 2)
    args.append(rng.normal(size=(1, 2, 3, 2)).astype("float32"))
    segment_ids = np.array([[0, 0, 0, 1, 1]])
    reference.check_gradients(
        rng, reference.gated_delta_rule, args, segment_ids, form
    )


def test_bfloat16_inputs_keep_a_float32_state(rng):
    args = reference.inputs(rng, 1, 70, 1, 1, 8, 8)
    low = [keras.ops.cast(x, "bfloat16") for x in args]
    out, state = ka_ops.gated_delta_rule(*low, output_final_state=True)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    assert keras.backend.standardize_dtype(state.dtype) == "float32"
    _, exact = _run(args)
    # The inputs' rounding to bfloat16 (8 bits), not the state's, sets
    # the error: the state of float32 math on the rounded inputs.
    rounded = [_numpy(keras.ops.cast(x, "float32")) for x in low]
    _, of_rounded = _run(rounded)
    np.testing.assert_allclose(_numpy(state), of_rounded, atol=TOLERANCE)
    assert np.abs(_numpy(state) - exact).max() < 0.05


def test_keras_hub_functions_agree(rng):
    hub = pytest.importorskip(
        "keras_hub.src.models.qwen3_5.qwen3_5_gated_delta_net"
    )
    args = reference.inputs(rng, 1, 11, 2, 2, 4, 4)
    state = rng.normal(size=(1, 2, 4, 4)).astype("float32")
    out, final = _run(args, initial_state=state)
    args = [keras.ops.convert_to_tensor(x) for x in args]
    state = keras.ops.convert_to_tensor(state)
    for fn, options in (
        (hub._recurrent_gated_delta_rule, {}),
        (hub._chunk_gated_delta_rule, {"chunk_size": 4}),
    ):
        theirs, their_state = fn(
            *args, initial_state=state, output_final_state=True, **options
        )
        np.testing.assert_allclose(out, _numpy(theirs), atol=TOLERANCE)
        np.testing.assert_allclose(final, _numpy(their_state), atol=TOLERANCE)


@pytest.mark.skipif(BACKEND != "jax", reason="counts a jaxpr's equations")
def test_the_compiled_graph_does_not_grow_with_the_length():
    import jax

    def equations(length):
        shape = (1, length, 1, 8)
        q = jax.ShapeDtypeStruct(shape, "float32")
        g = jax.ShapeDtypeStruct((1, length, 1), "float32")

        def fn(q, g):
            return ka_ops.gated_delta_rule(q, q, q, g, g, form="chunk")

        return len(jax.make_jaxpr(fn)(q, g).eqns)

    assert equations(4096) <= 1.2 * equations(256)


def _bad(**changes):
    args = {
        "query": np.zeros((1, 4, 2, 3), "float32"),
        "key": np.zeros((1, 4, 2, 3), "float32"),
        "value": np.zeros((1, 4, 4, 5), "float32"),
        "g": np.zeros((1, 4, 4), "float32"),
        "beta": np.zeros((1, 4, 4), "float32"),
    }
    args.update(changes)
    return args


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"query": np.zeros((1, 4, 3))}, r"of rank 4.*query.shape=\(1, 4, 3\)"),
        ({"key": np.zeros((1, 4, 2, 2))}, r"key.shape=\(1, 4, 2, 2\)"),
        ({"value": np.zeros((1, 5, 4, 5))}, r"value.shape=\(1, 5, 4, 5\)"),
        ({"value": np.zeros((1, 4, 3, 5))}, r"multiple.*value.shape"),
        (
            {"g": np.zeros((1, 4))},
            r"`g` of shape \(1, 4, 4\).*g.shape=\(1, 4\)",
        ),
        ({"beta": np.zeros((1, 4, 2))}, r"beta.shape=\(1, 4, 2\)"),
        (
            {"initial_state": np.zeros((1, 4, 5, 3))},
            r"initial_state.shape=\(1, 4, 5, 3\)",
        ),
        ({"segment_ids": np.zeros((1, 5))}, r"segment_ids.shape=\(1, 5\)"),
        ({"chunk_size": 0}, r"Received: chunk_size=0"),
        ({"form": "fused"}, r"Received: form='fused'"),
        ({"scale": "1"}, r"Received: scale='1'"),
    ],
)
def test_bad_inputs_name_the_argument_and_shape(changes, message):
    with pytest.raises(ValueError, match=message):
        ka_ops.gated_delta_rule(**_bad(**changes))
