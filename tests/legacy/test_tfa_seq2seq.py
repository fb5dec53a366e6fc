"""docs/migration/tfa-seq2seq.md against tensorflow-addons 0.23 itself.

tfa's mechanisms, `AttentionWrapper` and `BeamSearchDecoder` run on
tf_keras; ours on Keras 3 get their weights copied the way the guide's
tables say (`_tfa.port_mechanism`), and must give the same alignments,
contexts, outputs and states (to 1e-5), and the same beam-search ids
(exactly). The guide's checked blocks are also run as written, their
stand-in weights loaded into the tfa objects.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import keras_attention
from tests.legacy import _tfa

tfa = _tfa.import_tfa()
seq2seq = keras_attention.seq2seq
GUIDE = "tfa-seq2seq.md"
BATCH, SOURCE, MEMORY_DEPTH, QUERY_DEPTH, UNITS = 3, 6, 12, 16, 8
LENGTHS = np.array([3, 6, 1])
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def _sparsemax(score, _):
    return tfa.activations.sparsemax(score)


def _tfa_mechanism(kind, memory, lengths, **kwargs):
    """A tfa mechanism on `memory`, not yet built."""
    probability_fn = kwargs.pop("probability_fn", None)
    cls, units = {
        "bahdanau": (tfa.seq2seq.BahdanauAttention, UNITS),
        "luong": (tfa.seq2seq.LuongAttention, QUERY_DEPTH),
        "bahdanau_monotonic": (tfa.seq2seq.BahdanauMonotonicAttention, UNITS),
        "luong_monotonic": (tfa.seq2seq.LuongMonotonicAttention, QUERY_DEPTH),
    }[kind]
    if probability_fn not in (None, "sparsemax"):
        kwargs["probability_fn"] = probability_fn
    old = cls(
        units=units,
        memory=memory,
        memory_sequence_length=lengths,
        **kwargs,
    )
    if probability_fn == "sparsemax":
        # tfa's mechanisms take "softmax" or "hardmax" only; sparsemax is
        # tfa.activations.sparsemax put in their place (masked scores:
        # the dtype's lowest value, as for the others).
        old.default_probability_fn = _sparsemax
    return old


def _our_mechanism(kind, **kwargs):
    if kind == "bahdanau":
        return seq2seq.BahdanauAttention(UNITS, **kwargs)
    if kind == "luong":
        kwargs.pop("scale", None)  # folded into the kernel by the port
        return seq2seq.LuongAttention("general", **kwargs)
    if kind == "bahdanau_monotonic":
        return seq2seq.BahdanauMonotonicAttention(UNITS, **kwargs)
    return seq2seq.LuongMonotonicAttention("general", **kwargs)


def _previous_alignments(rng, kind, mode):
    """Zeros; for a monotonic mechanism a distribution over the valid
    positions (one-hot in hard mode), so the recursion is exercised."""
    if "monotonic" not in kind:
        return np.zeros((BATCH, SOURCE), "float32")
    valid = _tfa.sequence_mask(LENGTHS, SOURCE)
    if mode == "hard":
        chosen = [rng.integers(length) for length in LENGTHS]
        return np.eye(SOURCE, dtype="float32")[chosen]
    weights = rng.uniform(size=(BATCH, SOURCE)) * valid
    return (weights / weights.sum(-1, keepdims=True)).astype("float32")


MECHANISMS = [
    ("bahdanau", {"normalize": False}),
    ("bahdanau", {"normalize": True}),
    ("luong", {"scale": False}),
    ("luong", {"scale": True}),
    ("bahdanau", {"probability_fn": "hardmax"}),
    ("luong", {"scale": True, "probability_fn": "hardmax"}),
    ("bahdanau", {"normalize": True, "probability_fn": "sparsemax"}),
    ("luong", {"probability_fn": "sparsemax"}),
    *(
        (kind, {flag: i % 2 == 0, "mode": mode, "score_bias_init": -0.5})
        for kind, flag in (
            ("bahdanau_monotonic", "normalize"),
            ("luong_monotonic", "scale"),
        )
        for i, mode in enumerate(("parallel", "recursive", "hard"))
    ),
]


@pytest.mark.parametrize(
    ("kind", "options"),
    MECHANISMS,
    ids=[f"{k}-{'-'.join(map(str, o.values()))}" for k, o in MECHANISMS],
)
def test_mechanism(kind, options):
    rng = np.random.default_rng(len(str(options)) + len(kind))
    memory = rng.normal(size=(BATCH, SOURCE, MEMORY_DEPTH)).astype("float32")
    query = rng.normal(size=(BATCH, QUERY_DEPTH)).astype("float32")
    previous = _previous_alignments(rng, kind, options.get("mode"))
    old = _tfa_mechanism(kind, memory, LENGTHS, **options)
    old([tf.constant(query), tf.constant(previous)])  # builds
    _tfa.randomize(old.weights, rng)
    # The keys were projected with the initial kernel: project again.
    old.setup_memory(memory, memory_sequence_length=LENGTHS)
    alignments, _ = old([tf.constant(query), tf.constant(previous)])
    alignments = alignments.numpy()
    context = np.einsum("bs,bsd->bd", alignments, old.values.numpy())

    ours = _our_mechanism(kind, **options)
    mask = _tfa.sequence_mask(LENGTHS, SOURCE)
    ours(query, memory, mask, previous_alignments=previous)  # builds
    _tfa.port_mechanism(old, ours)
    our_context, our_alignments = ours(
        query, memory, mask, previous_alignments=previous
    )
    np.testing.assert_allclose(
        _tfa.numpy(our_alignments), alignments, **TOLERANCE
    )
    np.testing.assert_allclose(_tfa.numpy(our_context), context, **TOLERANCE)
    assert np.all(_tfa.numpy(our_alignments)[~mask] == 0)


@pytest.mark.parametrize(
    "kind", ["bahdanau", "bahdanau_monotonic", "luong_monotonic"]
)
def test_initial_weights_agree(kind):
    """The weights a port does not copy start where tfa's start: `g` at
    `sqrt(1 / units)` and `b` at 0 with normalize=True, `g` at 1 with
    scale=True, the score bias at `score_bias_init`."""
    options = {"normalize": True} if "bahdanau" in kind else {"scale": True}
    if "monotonic" in kind:
        options["score_bias_init"] = -1.5
    memory = np.ones((1, SOURCE, MEMORY_DEPTH), "float32")
    query = np.ones((1, QUERY_DEPTH), "float32")
    old = _tfa_mechanism(kind, memory, None, **options)
    previous = old.initial_alignments(1, tf.float32)
    old([tf.constant(query), previous])
    ours = _our_mechanism(kind, **options)
    ours(query, memory)
    expected = {
        name: value
        for name, value in _tfa.tfa_weights(old).items()
        if not name.endswith("kernel") and name != "attention_v"
    }
    names = {
        "attention_g": "score/g" if "bahdanau" in kind else "g",
        "attention_b": "score/bias",
        "attention_score_bias": "score_bias",
    }
    actual = {w.path.split("/", 1)[1]: _tfa.numpy(w) for w in ours.weights}
    assert expected
    for name, value in expected.items():
        np.testing.assert_allclose(actual[names[name]], value, rtol=1e-6)
    # The first step's previous alignments: one-hot on position 0, as tfa.
    np.testing.assert_array_equal(
        _tfa.numpy(ours.initial_alignments(1, SOURCE, "float32")),
        previous.numpy(),
    )


def test_guide_mechanisms_block_matches_tfa():
    """The guide's block, its stand-in tfa weights loaded into tfa."""
    ns = _tfa.guide_block(GUIDE, "tfa_mechanisms")
    memory, lengths, query = ns["memory"], ns["lengths"], ns["query"]
    bahdanau = tfa.seq2seq.BahdanauAttention(
        units=8, memory=memory, memory_sequence_length=lengths
    )
    luong = tfa.seq2seq.LuongAttention(
        units=16, memory=memory, memory_sequence_length=lengths, scale=True
    )
    state = bahdanau.initial_alignments(2, tf.float32)
    bahdanau([tf.constant(query), state])
    luong([tf.constant(query), state])
    bahdanau.query_layer.kernel.assign(ns["query_kernel"])
    bahdanau.memory_layer.kernel.assign(ns["memory_kernel"])
    bahdanau.attention_v.assign(ns["attention_v"])
    luong.memory_layer.kernel.assign(ns["luong_memory_kernel"])
    luong.scale_weight.assign(ns["attention_g"])
    for old, context, alignments in (
        (bahdanau, ns["context"], ns["alignments"]),
        (luong, ns["luong_context"], ns["luong_alignments"]),
    ):
        old.setup_memory(memory, memory_sequence_length=lengths)
        expected, _ = old([tf.constant(query), state])
        np.testing.assert_allclose(
            _tfa.numpy(alignments), expected.numpy(), **TOLERANCE
        )
        np.testing.assert_allclose(
            _tfa.numpy(context),
            np.einsum("bs,bsd->bd", expected.numpy(), old.values.numpy()),
            **TOLERANCE,
        )


# AttentionWrapper, stepped over a target sequence.

TARGET, TARGET_DEPTH, CELL_UNITS = 4, 6, 16


@keras.saving.register_keras_serializable(package="tests_legacy")
def inputs_only(inputs, attention):
    return inputs


@keras.saving.register_keras_serializable(package="tests_legacy")
def tfa_linear_attention(
    mechanism,
    cell_output,
    memory,
    memory_mask,
    previous_alignments,
    attention_layer,
    **kwargs,
):
    """The guide's `attention_fn` port of tfa's attention layer: linear,
    on `[h_t; c_t]`."""
    context, alignments = mechanism(
        cell_output,
        memory,
        memory_mask=memory_mask,
        previous_alignments=previous_alignments,
        **kwargs,
    )
    attention = attention_layer(ops.concatenate([cell_output, context], -1))
    return attention, alignments


def _run_tfa_wrapper(cell, targets, encoder_state):
    """tfa's cell stepped by hand: outputs, final state, alignment history
    (batch-major)."""
    batch = targets.shape[0]
    state = cell.get_initial_state(batch_size=batch, dtype=tf.float32)
    state = state.clone(cell_state=tf.constant(encoder_state))
    outputs = []
    for t in range(targets.shape[1]):
        output, state = cell(tf.constant(targets[:, t]), state)
        outputs.append(output.numpy())
    history = np.transpose(state.alignment_history.stack().numpy(), (1, 0, 2))
    return np.stack(outputs, 1), state, history


WRAPPERS = {
    # mechanism, its options, tfa's attention_layer_size, output_attention,
    # cell_input_fn = inputs only
    "bahdanau": ("bahdanau", {}, None, True, False),
    "luong-layer": ("luong", {"scale": True}, 7, False, False),
    "bahdanau_monotonic-inputs_only": (
        "bahdanau_monotonic",
        {"normalize": True, "mode": "recursive", "score_bias_init": -1.0},
        None,
        True,
        True,
    ),
    "luong_monotonic-layer": (
        "luong_monotonic",
        {"scale": True, "mode": "parallel"},
        5,
        True,
        False,
    ),
}


@pytest.mark.parametrize("case", list(WRAPPERS))
def test_attention_wrapper(case):
    kind, options, layer_size, output_attention, inputs_only_fn = WRAPPERS[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    memory = rng.normal(size=(BATCH, SOURCE, MEMORY_DEPTH)).astype("float32")
    targets = rng.normal(size=(BATCH, TARGET, TARGET_DEPTH)).astype("float32")
    encoder_state = rng.normal(size=(BATCH, CELL_UNITS)).astype("float32")
    mechanism = _tfa_mechanism(kind, memory, LENGTHS, **options)
    cell = tfa.seq2seq.AttentionWrapper(
        tf.keras.layers.GRUCell(CELL_UNITS),
        mechanism,
        attention_layer_size=layer_size,
        alignment_history=True,
        output_attention=output_attention,
        cell_input_fn=(lambda inputs, attention: inputs)
        if inputs_only_fn
        else None,
    )
    _run_tfa_wrapper(cell, targets[:, :1], encoder_state)  # builds
    _tfa.randomize(cell.weights, rng)
    mechanism.setup_memory(memory, memory_sequence_length=LENGTHS)
    outputs, state, history = _run_tfa_wrapper(cell, targets, encoder_state)

    ours = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(CELL_UNITS),
        _our_mechanism(kind, **options),
        output_attention=output_attention,
        attention_layer=None
        if layer_size is None
        else keras.layers.Dense(layer_size, use_bias=False),
        attention_fn=None if layer_size is None else tfa_linear_attention,
        cell_input_fn=inputs_only if inputs_only_fn else None,
    )
    decoder = seq2seq.AttentionDecoder(ours, return_alignments=True)
    mask = _tfa.sequence_mask(LENGTHS, SOURCE)
    decoder(targets, memory, memory_mask=mask, initial_state=encoder_state)
    # The GRU cell's weights have the same layout in tf.keras and Keras 3.
    ours.cell.set_weights(cell._cell.get_weights())
    _tfa.port_mechanism(mechanism, ours.mechanisms[0])
    if layer_size is not None:
        ours.attention_layer.set_weights(
            [cell._attention_layers[0].kernel.numpy()]
        )
    our_outputs, our_alignments = decoder(
        targets, memory, memory_mask=mask, initial_state=encoder_state
    )
    np.testing.assert_allclose(_tfa.numpy(our_outputs), outputs, **TOLERANCE)
    np.testing.assert_allclose(_tfa.numpy(our_alignments), history, **TOLERANCE)
    # The final states: the cell's, the attention vector, the alignments.
    states = ours.get_initial_state(
        memory=memory, memory_mask=mask, cell_state=encoder_state
    )
    rnn = keras.layers.RNN(ours, return_state=True)
    _, *final = rnn(targets, initial_state=states)
    np.testing.assert_allclose(
        _tfa.numpy(final[0]), state.cell_state.numpy(), **TOLERANCE
    )
    np.testing.assert_allclose(
        _tfa.numpy(final[ours.attention_index]),
        state.attention.numpy(),
        **TOLERANCE,
    )
    np.testing.assert_allclose(
        _tfa.numpy(final[ours.alignments_index]),
        state.alignments.numpy(),
        **TOLERANCE,
    )


def test_guide_wrapper_block_matches_tfa():
    """The guide's AttentionWrapper block, its stand-ins loaded into tfa."""
    ns = _tfa.guide_block(GUIDE, "tfa_attention_wrapper")
    memory, targets = ns["memory"], ns["targets"]
    lengths = ns["memory_mask"].sum(-1)
    mechanism = tfa.seq2seq.BahdanauAttention(
        units=8, memory=memory, memory_sequence_length=lengths
    )
    cell = tfa.seq2seq.AttentionWrapper(
        tf.keras.layers.GRUCell(16),
        mechanism,
        attention_layer_size=None,
        alignment_history=True,
        output_attention=True,
    )
    _run_tfa_wrapper(cell, targets[:, :1], ns["encoder_state"])
    cell._cell.set_weights(ns["gru"])
    query_kernel, memory_kernel, attention_v = ns["bahdanau"]
    mechanism.query_layer.kernel.assign(query_kernel)
    mechanism.memory_layer.kernel.assign(memory_kernel)
    mechanism.attention_v.assign(attention_v)
    mechanism.setup_memory(memory, memory_sequence_length=lengths)
    outputs, _, history = _run_tfa_wrapper(cell, targets, ns["encoder_state"])
    np.testing.assert_allclose(_tfa.numpy(ns["outputs"]), outputs, **TOLERANCE)
    np.testing.assert_allclose(
        _tfa.numpy(ns["alignments"]), history, **TOLERANCE
    )


# BeamSearchDecoder: a GRU + Bahdanau AttentionWrapper, an embedding matrix
# and an output Dense, ported into `beam_search_decode`.

VOCABULARY, EMBEDDING, START, END, MAX_LENGTH = 9, 6, 1, 2, 6


def _end_filled(ids):
    """tfa's ids `(batch, time, beam)` as ours `(batch, beam, time)`: tfa
    repeats the end token after it, ours writes the pad token (0)."""
    ids = np.transpose(ids, (0, 2, 1)).copy()
    ended = np.cumsum(ids == END, axis=-1) - (ids == END) > 0
    ids[ended] = 0
    width = MAX_LENGTH - ids.shape[-1]  # tfa stops when all beams end
    return np.pad(ids, ((0, 0), (0, 0), (0, width)))


def _beam_search(beam_width, seed, length_penalty, end_bias, coverage=0.0):
    """tfa's and our n-best lists of one random model (all beams)."""
    rng = np.random.default_rng(seed)
    memory = rng.normal(size=(2, 5, MEMORY_DEPTH)).astype("float32")
    lengths = np.array([3, 5])
    encoder_state = rng.normal(size=(2, CELL_UNITS)).astype("float32")
    embedding = rng.normal(size=(VOCABULARY, EMBEDDING)).astype("float32")

    def tiled(x):
        return tfa.seq2seq.tile_batch(tf.constant(x), beam_width)

    mechanism = tfa.seq2seq.BahdanauAttention(
        UNITS, memory=tiled(memory), memory_sequence_length=tiled(lengths)
    )
    cell = tfa.seq2seq.AttentionWrapper(
        tf.keras.layers.GRUCell(CELL_UNITS), mechanism
    )
    dense = tf.keras.layers.Dense(VOCABULARY)
    state = cell.get_initial_state(batch_size=2 * beam_width, dtype=tf.float32)
    dense(cell(tf.constant(embedding[[START] * 2 * beam_width]), state)[0])
    _tfa.randomize(cell.weights, rng)
    _tfa.randomize(dense.weights, rng, scale=1.0)
    # The end token's logit shifted: hypotheses that end, of all lengths.
    dense.bias.assign(dense.bias.numpy() + end_bias * np.eye(VOCABULARY)[END])
    mechanism.setup_memory(tiled(memory), memory_sequence_length=tiled(lengths))
    decoder = tfa.seq2seq.BeamSearchDecoder(
        cell,
        beam_width=beam_width,
        output_layer=dense,
        length_penalty_weight=length_penalty,
        coverage_penalty_weight=coverage,
        maximum_iterations=MAX_LENGTH,
    )
    state = cell.get_initial_state(batch_size=2 * beam_width, dtype=tf.float32)
    state = state.clone(cell_state=tiled(encoder_state))
    with _tfa.numpy_inf_alias():
        outputs, final, _ = decoder(
            tf.constant(embedding),
            start_tokens=tf.fill([2], START),
            end_token=END,
            initial_state=state,
        )
    old = {
        "tokens": _end_filled(outputs.predicted_ids.numpy()),
        # The last step's scores: those of the final beams, best first.
        "scores": outputs.beam_search_decoder_output.scores.numpy()[:, -1],
        "lengths": final.lengths.numpy(),
        "log_probs": final.log_probs.numpy(),
    }

    ours = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(CELL_UNITS), seq2seq.BahdanauAttention(UNITS)
    )
    mask = _tfa.sequence_mask(lengths, 5)
    ours.get_initial_state(memory=memory, memory_mask=mask)  # builds
    ours.cell.build((None, EMBEDDING + MEMORY_DEPTH))  # [y; a] input feeding
    ours.cell.set_weights(cell._cell.get_weights())
    _tfa.port_mechanism(mechanism, ours.mechanisms[0])
    our_embedding = keras.layers.Embedding(VOCABULARY, EMBEDDING)
    our_embedding.build((None,))
    our_embedding.set_weights([embedding])
    output_layer = keras.layers.Dense(VOCABULARY)
    output_layer.build((None, MEMORY_DEPTH))
    output_layer.set_weights(dense.get_weights())
    result = seq2seq.beam_search_decode(
        ours,
        memory,  # untiled
        our_embedding,
        output_layer,
        start_token=START,
        end_token=END,
        max_length=MAX_LENGTH,
        beam_width=beam_width,
        length_penalty=length_penalty,
        coverage_penalty=coverage,
        memory_mask=mask,
        cell_state=encoder_state,
        num_hypotheses=beam_width,
    )
    new = {name: _tfa.numpy(getattr(result, name)) for name in old}
    return old, new


@pytest.mark.parametrize(
    ("beam_width", "seed", "length_penalty", "end_bias"),
    [
        (1, 0, 0.0, 1.0),  # greedy
        (3, 0, 0.0, 1.0),
        (4, 2, 0.0, 0.0),
        # The end token never wins: all hypotheses have the same length.
        (3, 1, 0.6, -30.0),
    ],
)
def test_beam_search(beam_width, seed, length_penalty, end_bias):
    old, new = _beam_search(beam_width, seed, length_penalty, end_bias)
    np.testing.assert_array_equal(new["tokens"], old["tokens"])
    np.testing.assert_array_equal(new["lengths"], old["lengths"])
    for name in ("scores", "log_probs"):
        np.testing.assert_allclose(new[name], old[name], **TOLERANCE)


def test_beam_search_length_penalty_at_the_end_token():
    """The documented difference: tfa ranked a hypothesis at the step it
    emits the end token with a length that leaves the end token out
    (counted from the next step on); ours counts it at once, so the
    beams can differ. The final scores are the same formula in both:
    `log p / ((5 + length) / 6) ** α`, the end token counted."""
    alpha = 1.0
    old, new = _beam_search(3, 4, alpha, 1.0)
    for result in (old, new):
        penalty = ((5.0 + result["lengths"]) / 6.0) ** alpha
        np.testing.assert_allclose(
            result["scores"], result["log_probs"] / penalty, **TOLERANCE
        )
    assert not np.array_equal(new["tokens"], old["tokens"])


def test_beam_search_coverage_penalty_differs():
    """The documented differences of the coverage penalty: tfa added it
    one step after a hypothesis ended (ours: at that step), so the beams
    differ; and tfa's `gather_tree` stopped at each example's longest
    hypothesis while that late penalty still re-ranked its finished
    beams, so its `predicted_ids` came out in another order than its
    `lengths` and `scores`. Ours agree with each other."""
    old, new = _beam_search(3, 0, 0.0, 1.0, coverage=0.4)
    assert not np.array_equal(new["tokens"], old["tokens"])
    for result, consistent in ((old, False), (new, True)):
        ended = result["tokens"] == END
        lengths = np.where(ended.any(-1), ended.argmax(-1) + 1, MAX_LENGTH)
        assert np.array_equal(lengths, result["lengths"]) == consistent


def test_attention_wrapper_two_mechanisms():
    """A list of mechanisms over one memory, with tfa's `attention_layer=`
    (a layer each, here with a bias), ported through `attention_fn`."""
    rng = np.random.default_rng(11)
    memory = rng.normal(size=(BATCH, SOURCE, MEMORY_DEPTH)).astype("float32")
    targets = rng.normal(size=(BATCH, TARGET, TARGET_DEPTH)).astype("float32")
    encoder_state = rng.normal(size=(BATCH, CELL_UNITS)).astype("float32")
    mechanisms = [
        _tfa_mechanism("bahdanau", memory, LENGTHS, normalize=True),
        _tfa_mechanism("luong", memory, LENGTHS, scale=True),
    ]
    cell = tfa.seq2seq.AttentionWrapper(
        tf.keras.layers.GRUCell(CELL_UNITS),
        mechanisms,
        attention_layer=[tf.keras.layers.Dense(5), tf.keras.layers.Dense(3)],
    )

    def run(steps):
        state = cell.get_initial_state(batch_size=BATCH, dtype=tf.float32)
        state = state.clone(cell_state=tf.constant(encoder_state))
        outputs = []
        for t in range(steps):
            output, state = cell(tf.constant(targets[:, t]), state)
            outputs.append(output.numpy())
        return np.stack(outputs, 1), state

    run(1)  # builds
    _tfa.randomize(cell.weights, rng)
    for mechanism in mechanisms:
        mechanism.setup_memory(memory, memory_sequence_length=LENGTHS)
    outputs, state = run(TARGET)

    ours = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(CELL_UNITS),
        [
            _our_mechanism("bahdanau", normalize=True),
            _our_mechanism("luong", scale=True),
        ],
        attention_layer=[keras.layers.Dense(5), keras.layers.Dense(3)],
        attention_fn=tfa_linear_attention,
    )
    mask = _tfa.sequence_mask(LENGTHS, SOURCE)
    states = ours.get_initial_state(
        memory=memory, memory_mask=mask, cell_state=encoder_state
    )
    rnn = keras.layers.RNN(ours, return_sequences=True, return_state=True)
    rnn(targets, initial_state=states)  # builds
    ours.cell.set_weights(cell._cell.get_weights())
    for old, new in zip(mechanisms, ours.mechanisms, strict=True):
        _tfa.port_mechanism(old, new)
    for old, new in zip(
        cell._attention_layers, ours.attention_layers, strict=True
    ):
        new.set_weights(old.get_weights())
    states = ours.get_initial_state(
        memory=memory, memory_mask=mask, cell_state=encoder_state
    )
    our_outputs, *final = rnn(targets, initial_state=states)
    np.testing.assert_allclose(_tfa.numpy(our_outputs), outputs, **TOLERANCE)
    for index, alignments in zip(
        ours.alignments_indices, state.alignments, strict=True
    ):
        np.testing.assert_allclose(
            _tfa.numpy(final[index]), alignments.numpy(), **TOLERANCE
        )
