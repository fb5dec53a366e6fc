"""keras-self-attention 0.51.0's own layers against their ports.

Each test builds the old layer on `tf_keras` with random weights (biases
included), copies `get_weights()` into the `keras_attention` layer that
docs/migration/keras-self-attention.md names, with the guide's own
`set_weights` expression (`_cyberzhg.port`), and compares outputs and
attention weights on the same inputs, padded batches included. Where the
guide says the numbers differ, the test checks that difference as the
guide states it.
"""

import keras
import numpy as np
import pytest
from keras_self_attention import ScaledDotProductAttention
from keras_self_attention import SeqSelfAttention
from keras_self_attention import SeqWeightedAttention
from tensorflow import keras as tf_keras

import keras_attention
from tests.legacy import _cyberzhg as cz

GUIDE = cz.SELF_ATTENTION_GUIDE
UNITS, DIM, LENGTH = 5, 8, 6


def _old_self_attention(**options):
    return SeqSelfAttention(units=UNITS, return_attention=True, **options)


def _ours_for(options, attention_bias, **extra):
    """The `Attention` the guide's argument table gives for `options`."""
    if options.get("attention_type", "additive") == "additive":
        score = keras_attention.scores.AdditiveScore(
            units=UNITS, use_bias=options.get("use_additive_bias", True)
        )
    else:
        score = "bilinear"
    return keras_attention.Attention(
        score=score,
        use_attention_bias=attention_bias,
        attention_activation=options.get("attention_activation"),
        attention_width=options.get("attention_width"),
        **extra,
    )


def _port_self_attention(old, ours, options):
    """The guide's block for this configuration, else its stated order.

    The full additive layer uses the `seq_self_attention_weights` (or,
    with an activation, `seq_self_attention_activation`) block and the
    multiplicative one without activation `seq_self_attention_multiplicative`
    (dropping `ba`); the others follow the order the guide states:
    `attention_bias`, then `query_kernel, key_kernel, v, bias` (additive)
    or `kernel` (bilinear).
    """
    w = cz.by_suffix(old)
    additive = options.get("attention_type", "additive") == "additive"
    full = options.get("use_additive_bias", True) and options.get(
        "use_attention_bias", True
    )
    if additive and full and ours.use_attention_bias:
        check = "seq_self_attention_weights"
        if options.get("attention_activation"):
            check = "seq_self_attention_activation"
        return cz.port(ours, GUIDE, check, **w)
    if not additive and not ours.use_attention_bias:
        return cz.port(ours, GUIDE, "seq_self_attention_multiplicative", **w)
    values = [w["ba"][0]] if ours.use_attention_bias else []
    if additive:
        values += [w["Wt"], w["Wx"], w["Wa"][:, 0]]
        values += [w["bh"]] if "bh" in w else []
    else:
        values += [w["Wa"]]
    ours.set_weights(values)
    return values


SELF_ATTENTION_CASES = {
    "additive": {},
    "additive-no-biases": {
        "use_additive_bias": False,
        "use_attention_bias": False,
    },
    "additive-sigmoid": {"attention_activation": "sigmoid"},
    "additive-sigmoid-no-additive-bias": {
        "attention_activation": "sigmoid",
        "use_additive_bias": False,
    },
    "width-3": {"attention_width": 3},
    "width-4": {"attention_width": 4},
    "history": {"history_only": True},
    "history-width-3": {"history_only": True, "attention_width": 3},
    "multiplicative": {"attention_type": "multiplicative"},
    "multiplicative-tanh": {
        "attention_type": "multiplicative",
        "attention_activation": "tanh",
        "attention_width": 3,
    },
    "multiplicative-no-bias-sigmoid": {
        "attention_type": "multiplicative",
        "attention_activation": "sigmoid",
        "use_attention_bias": False,
    },
}


def _attention_bias(options):
    """The guide drops `ba` only where it cancels: no activation, and
    for the multiplicative form (its block); the additive block keeps it."""
    if not options.get("use_attention_bias", True):
        return False
    if options.get("attention_type") == "multiplicative":
        return options.get("attention_activation") is not None
    return True


@pytest.mark.parametrize(
    "options", SELF_ATTENTION_CASES.values(), ids=SELF_ATTENTION_CASES.keys()
)
def test_seq_self_attention_ports_exactly(options, rng):
    x = rng.normal(size=(3, LENGTH, DIM)).astype("float32")
    old = _old_self_attention(**options)
    old(x)
    cz.randomize(old, seed=1)
    old_output, old_weights = cz.numpy(*old(x))

    ours = _ours_for(options, _attention_bias(options))
    ours(x)
    _port_self_attention(old, ours, options)
    output, weights = ours(
        x,
        use_causal_mask=options.get("history_only", False),
        return_attention_scores=True,
    )
    cz.close(weights, old_weights)
    cz.close(output, old_output)
    if options.get("attention_width") or options.get("history_only"):
        # Keys outside the window: exactly 0 here, exp(-1e4) = 0 there.
        assert np.all((np.asarray(weights) == 0) == (old_weights == 0))


def test_dropping_ba_without_activation_changes_nothing(rng):
    """The table's `use_attention_bias` default: `b_a` cancels."""
    x = rng.normal(size=(2, LENGTH, DIM)).astype("float32")
    old = _old_self_attention()
    old(x)
    cz.randomize(old, seed=2)
    old_output, old_weights = cz.numpy(*old(x))
    w = cz.by_suffix(old)
    ours = _ours_for({}, attention_bias=False)
    ours(x)
    ours.set_weights([w["Wt"], w["Wx"], w["Wa"][:, 0], w["bh"]])
    output, weights = ours(x, return_attention_scores=True)
    cz.close(weights, old_weights)
    cz.close(output, old_output)


def _embedded(rng, ids, options):
    """The old layer after a tf_keras `Embedding(mask_zero=True)`."""
    embedding = tf_keras.layers.Embedding(20, DIM, mask_zero=True)
    old = _old_self_attention(**options)
    vectors = embedding(ids)
    old(vectors, mask=embedding.compute_mask(ids))
    cz.randomize(old, seed=3)
    table = rng.normal(size=(20, DIM)).astype("float32")
    embedding.set_weights([table])
    vectors = embedding(ids)
    old_output, old_weights = cz.numpy(
        *old(vectors, mask=embedding.compute_mask(ids))
    )
    return old, table, old_output, old_weights


MASK_CASES = {
    "additive": {},
    "multiplicative-sigmoid": {
        "attention_type": "multiplicative",
        "attention_activation": "sigmoid",
    },
    "history": {"history_only": True},
}


@pytest.mark.parametrize("options", MASK_CASES.values(), ids=MASK_CASES.keys())
def test_seq_self_attention_masks_from_embedding(options, rng):
    """`Embedding(mask_zero=True)` then the layer: the two rules of the
    guide's "Masks: what changes"."""
    ids = cz.padded_ids(rng, batch=4)
    ids[3] = 0  # all padding
    valid = ids != 0
    old, table, old_output, old_weights = _embedded(rng, ids, options)
    causal = options.get("history_only", False)

    # The guide's model: a Keras mask, padded keys weight 0.
    tokens = keras.Input(shape=(None,), dtype="int32")
    embedding = keras.layers.Embedding(20, DIM, mask_zero=True)
    ours = _ours_for(options, _attention_bias(options))
    outputs = ours(
        embedding(tokens), use_causal_mask=causal, return_attention_scores=True
    )
    model = keras.Model(tokens, outputs)
    embedding.set_weights([table])
    _port_self_attention(old, ours, options)
    output, weights = model.predict(ids, verbose=0)
    assert np.all(weights[~valid] == 0) and np.all(output[~valid] == 0)
    assert np.all(weights.transpose(0, 2, 1)[~valid] == 0)
    full = valid.all(axis=1)  # unpadded sequences: the same numbers
    cz.close(weights[full], old_weights[full])
    cz.close(output[full], old_output[full])
    real = valid & ~full[:, None]
    if causal:
        # Right padding lies in every real token's future: no difference.
        cz.close(weights[real], old_weights[real])
        cz.close(output[real], old_output[real])
    else:
        # The old layer: real tokens attend to padding too (issue #41),
        # so padded sequences differ at their real tokens as well.
        old_on_padding = old_weights.transpose(0, 2, 1)[~valid].sum(axis=-1)
        assert np.all(old_on_padding > 1e-3)
        assert np.abs(output[real] - old_output[real]).max() > 1e-3

    # The guide's recipe for the old numbers: its `old_rule` mask.
    old_rule = valid[:, :, None] | valid[:, None, :]
    output, weights = cz.numpy(
        *ours(
            table[ids],
            attention_mask=old_rule,
            use_causal_mask=causal,
            return_attention_scores=True,
        )
    )
    cz.close(weights[:3], old_weights[:3])
    cz.close(output[:3], old_output[:3])
    # All padding: zero weights here; there every logit is 1e4 down, so
    # the old layer keeps their softmax (to float32 rounding at 1e4).
    assert np.all(weights[3] == 0)
    _, unmasked = cz.numpy(*old(table[ids]))
    np.testing.assert_allclose(old_weights[3], unmasked[3], atol=5e-3)


@pytest.mark.parametrize("history_only", [False, True])
def test_seq_self_attention_window_with_padding(history_only, rng):
    """`attention_width` with padding: the `old_rule` recipe and the
    queries it does not reproduce (see the guide)."""
    ids = cz.padded_ids(rng, length=7)
    ids[1, 2:] = 0  # a long run of padding
    valid = ids != 0
    options = {"attention_width": 3, "history_only": history_only}
    old, table, old_output, old_weights = _embedded(rng, ids, options)
    ours = _ours_for(options, True)
    ours(table[ids])
    _port_self_attention(old, ours, options)
    old_rule = valid[:, :, None] | valid[:, None, :]
    output, weights = cz.numpy(
        *ours(
            table[ids],
            attention_mask=old_rule,
            use_causal_mask=history_only,
            return_attention_scores=True,
        )
    )
    # Queries with a real key in their window: the same numbers.
    window = keras.ops.convert_to_numpy(
        keras_attention.ops.band_mask(
            7, 7, *((2, 0) if history_only else (1, 1))
        )
    )
    reachable = (old_rule & window).any(axis=-1)
    cz.close(weights[reachable], old_weights[reachable])
    cz.close(output[reachable], old_output[reachable])
    # The others (padded queries whose window holds only padding): zero
    # here; the old layer, every logit there 1e4 down, spreads them.
    assert (~reachable).any()
    assert np.all(weights[~reachable] == 0)
    np.testing.assert_allclose(old_weights[~reachable].sum(-1), 1, rtol=1e-5)


@pytest.mark.parametrize(
    "options",
    [
        {"attention_type": "multiplicative"},
        {"history_only": True},
    ],
    ids=["multiplicative", "additive-history"],
)
def test_attention_regularizer_weight_is_penalty_coefficient(options, rng):
    c = 0.01
    ids = cz.padded_ids(rng)
    valid = ids != 0
    old = _old_self_attention(attention_regularizer_weight=c, **options)
    table = rng.normal(size=(20, DIM)).astype("float32")
    x = table[ids]
    old(x, mask=valid)
    cz.randomize(old, seed=4)
    old(x, mask=valid)
    [old_penalty] = cz.numpy(*old.losses)

    ours = _ours_for(options, _attention_bias(options), penalty_coefficient=c)
    old_rule = valid[:, :, None] | valid[:, None, :]
    call = {
        "attention_mask": old_rule,
        "use_causal_mask": "history_only" in options,
    }
    ours(x, **call)
    _port_self_attention(old, ours, options)
    ours(x, **call)
    [penalty] = cz.numpy(*ours.losses)
    assert penalty > 0
    cz.close(penalty, old_penalty)


# SeqWeightedAttention.


@pytest.mark.parametrize("use_bias", [True, False])
def test_seq_weighted_attention_ports_exactly(use_bias, rng):
    ids = cz.padded_ids(rng)
    table = rng.normal(size=(20, DIM)).astype("float32")
    old = SeqWeightedAttention(use_bias=use_bias, return_attention=True)
    x, valid = table[ids], ids != 0
    old(x, mask=valid)
    cz.randomize(old, seed=5, scale=1.0)
    old_pooled, old_weights = cz.numpy(*old(x, mask=valid))
    old_unmasked = cz.numpy(*old(x))

    # The guide's model: Embedding(mask_zero=True), then AttentionPooling.
    tokens = keras.Input(shape=(None,), dtype="int32")
    embedding = keras.layers.Embedding(20, DIM, mask_zero=True)
    pooling = keras_attention.AttentionPooling()
    outputs = pooling(embedding(tokens), return_attention_scores=True)
    model = keras.Model(tokens, outputs)
    embedding.set_weights([table])
    cz.port(pooling, GUIDE, "seq_weighted_attention", **cz.by_suffix(old))
    pooled, weights = model.predict(ids, verbose=0)
    cz.close(weights, old_weights)
    cz.close(pooled, old_pooled)
    assert np.all(weights[~valid] == 0) and np.all(old_weights[~valid] == 0)
    unmasked = pooling(x, return_attention_scores=True)
    for value, expected in zip(unmasked, old_unmasked, strict=True):
        cz.close(value, expected)


def test_seq_weighted_attention_all_padding(rng):
    """A sequence with no real step: zero weights here; the old layer
    shifts every logit by the same 1e4 and so keeps their softmax."""
    x = rng.normal(size=(2, 4, DIM)).astype("float32")
    valid = np.array([[True, True, False, False], [False] * 4])
    old = SeqWeightedAttention(return_attention=True)
    old(x)
    cz.randomize(old, seed=6, scale=1.0)
    _, old_weights = cz.numpy(*old(x, mask=valid))
    _, unmasked = cz.numpy(*old(x))
    pooling = keras_attention.AttentionPooling()
    pooling(x)
    cz.port(pooling, GUIDE, "seq_weighted_attention", **cz.by_suffix(old))
    _, weights = cz.numpy(*pooling(x, mask=valid, return_attention_scores=True))
    cz.close(weights[0], old_weights[0])
    assert np.all(weights[1] == 0)
    # float32 at 1e4 keeps logits to ~1e-3: the softmax to about that.
    np.testing.assert_allclose(old_weights[1], unmasked[1], atol=5e-3)
    assert old_weights[1].sum() > 0.99


# ScaledDotProductAttention.


@pytest.mark.parametrize("history_only", [False, True])
def test_scaled_dot_product_attention_ports_exactly(history_only, rng):
    query = rng.normal(size=(3, 5, DIM)).astype("float32")
    key = rng.normal(size=(3, 7, DIM)).astype("float32")
    value = rng.normal(size=(3, 7, 3)).astype("float32")
    key_valid = np.ones((3, 7), dtype=bool)
    key_valid[0, 4:] = False
    key_valid[1, 1:] = False
    key_valid[2, :] = False  # every key masked
    old = ScaledDotProductAttention(
        return_attention=True, history_only=history_only
    )
    old_output, old_weights = cz.numpy(
        *old([query, key, value], mask=[None, key_valid, None])
    )
    layer = keras_attention.Attention()
    output, weights = cz.numpy(
        *layer(
            query,
            value,
            key=key,
            value_mask=key_valid,
            use_causal_mask=history_only,
            return_attention_scores=True,
        )
    )
    causal = np.tril(np.ones((5, 7), dtype=bool))
    allowed = key_valid[:, None, :] & (causal if history_only else True)
    allowed = np.broadcast_to(allowed, (3, 5, 7))
    some = allowed.any(axis=-1)
    cz.close(weights[some], old_weights[some])
    cz.close(output[some], old_output[some])
    # A query with every key masked: zero weights here; the old layer
    # keeps a softmax over its (masked) keys, not uniform weights.
    assert np.all(weights[~some] == 0) and np.all(output[~some] == 0)
    np.testing.assert_allclose(old_weights[~some].sum(-1), 1, rtol=1e-5)
    if not history_only:
        assert np.ptp(old_weights[2, 0]) > 1e-2  # not uniform

    # The query mask: ignored there, a zero output here.
    query_valid = np.array([[True] * 5, [True] * 3 + [False] * 2, [True] * 5])
    masked, _ = cz.numpy(
        *layer(
            query,
            value,
            key=key,
            query_mask=query_valid,
            use_causal_mask=history_only,
            return_attention_scores=True,
        )
    )
    assert np.all(masked[~query_valid] == 0)

    # Self-attention on one input, `layer(x, x)`.
    x = query
    old_self, old_self_weights = cz.numpy(*old(x))
    self_output, self_weights = layer(
        x, x, use_causal_mask=history_only, return_attention_scores=True
    )
    cz.close(self_weights, old_self_weights)
    cz.close(self_output, old_self)
