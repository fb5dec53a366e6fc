"""`keras_attention.ops.gated_delta_rule` with a decay per key channel,
Kimi Delta Attention (KDA): both forms against a NumPy transcription of
fla's `naive_recurrent_kda` (tests/gated_delta_reference.py), against
each other and against the per-head decay it generalises; gradients
against finite differences; extreme decays; the errors."""

import keras
import numpy as np
import pytest

from keras_attention import ops as ka_ops
from tests import gated_delta_reference as reference

TOLERANCE = reference.TOLERANCE


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


_run = reference.run


def test_both_forms_equal_fla_naive_kda(rng):
    """Grouped heads (two over four), packed documents (one starting on a
    chunk boundary, one off it), an initial state; `Dk == Dv`, so a decay
    on the value axis instead of the key axis is a wrong number, not a
    shape error."""
    args = reference.inputs(rng, 2, 21, 2, 4, 4, 4, channels=True)
    state = rng.normal(size=(2, 4, 4, 4)).astype("float32")
    segment_ids = np.repeat([[0, 1, 2]], [8, 10, 3], axis=1).repeat(2, 0)
    expected, expected_state = reference.kimi_delta_rule(
        *args, initial_state=state, segment_ids=segment_ids
    )
    for form in ("chunk", "recurrent"):
        out, final = _run(
            args,
            initial_state=state,
            segment_ids=segment_ids,
            form=form,
            chunk_size=4,
        )
        np.testing.assert_allclose(out, expected, atol=TOLERANCE)
        np.testing.assert_allclose(final, expected_state, atol=TOLERANCE)


def test_one_position_by_hand():
    # One head, Dk = 2, Dv = 1: S = [[1], [2]] decays by (0.5, 0.25) per
    # row to [[0.5], [0.5]]; k = (1, 1) remembers 1, v' = 0.5 (3 - 1) = 1;
    # S = [[1.5], [1.5]]; o = Sᵀ q with q = (1, 0), scale 1: 1.5.
    q, k, v = [[[[1.0, 0.0]]]], [[[[1.0, 1.0]]]], [[[[3.0]]]]
    g, beta = [[[np.log([0.5, 0.25])]]], [[[0.5]]]
    state = np.array([[[[1.0], [2.0]]]], "float32")
    args = [np.asarray(x, "float32") for x in (q, k, v, g, beta)]
    for form in ("chunk", "recurrent"):
        out, final = _run(args, scale=1.0, initial_state=state, form=form)
        np.testing.assert_allclose(out, [[[[1.5]]]], rtol=1e-6)
        np.testing.assert_allclose(final, [[[[1.5], [1.5]]]], rtol=1e-6)


def test_one_decay_for_every_channel_is_the_per_head_decay(rng):
    args = reference.inputs(rng, 1, 9, 1, 2, 3, 2)
    per_channel = list(args)
    per_channel[3] = np.repeat(args[3][..., None], 3, axis=-1)
    for form in ("chunk", "recurrent"):
        want = _run(args, form=form, chunk_size=4)
        got = _run(per_channel, form=form, chunk_size=4)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, atol=TOLERANCE)


def test_extreme_decays_stay_exact_and_finite(rng):
    """Per channel: one channel never forgets (0), one forgets at every
    step (-1e4), one forgets once (-1e6) beside small decays."""
    args = reference.inputs(rng, 1, 12, 1, 1, 3, 2, channels=True)
    g = args[3]
    g[..., 0] = 0.0
    g[..., 1] = -1e4
    g[:, 5, :, 2] = -1e6
    g[:, 6:, :, 2] *= 1e-3
    expected, expected_state = reference.kimi_delta_rule(*args)
    reference.check_forms(args, (expected, expected_state), 8)


@pytest.mark.parametrize("form", ["chunk", "recurrent"])
def test_gradients_match_finite_differences(rng, form):
    """Query, key, value, the per-channel g, beta and the initial state,
    through the output and the final state, with a document boundary."""
    args = reference.inputs(rng, 1, 5, 1, 1, 3, 2, channels=True)
    args.append(rng.normal(size=(1, 1, 3, 2)).astype("float32"))
    segment_ids = np.array([[0, 0, 0, 1, 1]])
    reference.check_gradients(
        rng, reference.kimi_delta_rule, args, segment_ids, form
    )


@pytest.mark.parametrize("shape", [(1, 4, 4, 2), (1, 4, 2, 3), (1, 4, 4, 3, 1)])
def test_a_g_of_the_wrong_shape_names_g_and_its_shape(shape):
    query = np.zeros((1, 4, 2, 3), "float32")
    value = np.zeros((1, 4, 4, 5), "float32")
    beta = np.zeros((1, 4, 4), "float32")
    received = str(shape).replace("(", r"\(").replace(")", r"\)")
    with pytest.raises(
        ValueError,
        match=rf"`g` of shape \(1, 4, 4\) or \(1, 4, 4, 3\).*"
        rf"Received: g.shape={received}",
    ):
        ka_ops.gated_delta_rule(
            query, query, value, np.zeros(shape, "float32"), beta
        )
