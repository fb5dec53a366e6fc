"""Greedy and beam-search decoding with an `AttentionDecoderCell`.

Both decoders run one `keras.ops.while_loop` (so they work eagerly and
inside a compiled `predict`), batched, and stop when every sequence has
emitted the end token or after `max_length` steps. They return a
`DecodeResult` with the alignment history for plotting.

The first step runs before the loop: it builds the cell, the embedding and
the output layer outside the loop body, which JAX traces, and creating a
variable inside a traced function leaks a tracer.
"""

from typing import NamedTuple

import keras
from keras import ops

from keras_attention._validation import positive_int as _check_positive_int
from keras_attention.seq2seq import checks


class DecodeResult(NamedTuple):
    """What the decoders return.

    Attributes:
        tokens: `int32` `(batch_size, max_length)`: the emitted tokens, the
            end token included, then `pad_token`.
        scores: `float32` `(batch_size,)`: the sum of the log-probabilities
            of the emitted tokens (end token included), without length
            penalty.
        alignments: `float32` `(batch_size, max_length, source_time)`: the
            attention weights of the step that emitted each token; zero
            after the end token.
        lengths: `int32` `(batch_size,)`: number of emitted tokens, the end
            token included.
    """

    tokens: object
    scores: object
    alignments: object
    lengths: object


def _step(cell, embedding, output_layer, tokens, states):
    """One decoder step: `(log_probs (B, V) float32, new_states)`."""
    output, new_states = cell(embedding(tokens), states, training=False)
    logits = ops.cast(output_layer(output), "float32")
    return ops.log_softmax(logits, axis=-1), list(new_states)


def _write(buffer, t, values):
    """`buffer[:, t] = values` for a `(batch, time, ...)` buffer."""
    hit = ops.equal(ops.arange(ops.shape(buffer)[1]), t)
    hit = ops.reshape(hit, (1, -1) + (1,) * (len(buffer.shape) - 2))
    return ops.where(hit, ops.expand_dims(values, 1), buffer)


def greedy_decode(
    cell,
    memory,
    embedding,
    output_layer,
    start_token,
    end_token,
    max_length,
    memory_mask=None,
    cell_state=None,
    pad_token=0,
):
    """Greedy decoding: `y_t = argmax_y p(y | y_{<t}, x)` at every step.

    Args:
        cell: An `AttentionDecoderCell` (built, or buildable from `memory`).
        memory: The encoder outputs `(batch_size, source_time, depth)`.
        embedding: Callable mapping token ids `(batch_size,)` to the step
            inputs `(batch_size, input_depth)`, e.g. a
            `keras.layers.Embedding`.
        output_layer: Callable mapping the cell output to logits
            `(batch_size, vocabulary_size)`, e.g. a `keras.layers.Dense`.
        start_token: Id fed at the first step.
        end_token: Id that ends a sequence.
        max_length: Largest number of emitted tokens.
        memory_mask: Optional boolean `(batch_size, source_time)`.
        cell_state: Optional initial state of the wrapped cell.
        pad_token: Id written after the end token. Defaults to `0`.

    Returns:
        A `DecodeResult`.

    Example:

    >>> cell = keras_attention.seq2seq.AttentionDecoderCell(
    ...     keras.layers.GRUCell(8), keras_attention.seq2seq.BahdanauAttention()
    ... )
    >>> result = keras_attention.seq2seq.greedy_decode(
    ...     cell,
    ...     memory=np.random.rand(2, 5, 6).astype("float32"),
    ...     embedding=keras.layers.Embedding(10, 4),
    ...     output_layer=keras.layers.Dense(10),
    ...     start_token=1,
    ...     end_token=2,
    ...     max_length=7,
    ... )
    >>> tuple(result.tokens.shape), tuple(result.alignments.shape)
    ((2, 7), (2, 7, 5))

    References:
        - [Sutskever et al., 2014](https://arxiv.org/abs/1409.3215)
    """
    _check_positive_int("max_length", max_length)
    checks.token_ids(embedding, output_layer, start_token, end_token, pad_token)
    checks.decoder_parts(cell, embedding, output_layer, memory)

    def argmax(log_probs, t):
        return ops.cast(ops.argmax(log_probs, axis=-1), "int32")

    return _decode(
        (cell, embedding, output_layer),
        memory,
        (start_token, end_token, pad_token),
        max_length,
        memory_mask,
        cell_state,
        argmax,
    )


def _decode(
    model, memory, special, max_length, memory_mask, cell_state, choose
):
    """One hypothesis per example; `choose(log_probs, t)` picks the tokens."""
    cell, embedding, output_layer = model
    start_token, end_token, pad_token = special
    states = cell.get_initial_state(
        memory=memory, memory_mask=memory_mask, cell_state=cell_state
    )
    memory = states[-2]
    batch = ops.shape(memory)[0]
    source_length = ops.shape(memory)[1]
    loop_vars = (
        ops.convert_to_tensor(0, dtype="int32"),
        ops.full((batch,), start_token, dtype="int32"),
        ops.full((batch, max_length), pad_token, dtype="int32"),
        ops.zeros((batch, max_length, source_length), dtype="float32"),
        ops.zeros((batch,), dtype="float32"),
        ops.zeros((batch,), dtype="bool"),
        ops.zeros((batch,), dtype="int32"),
        tuple(states),
    )

    def cond(t, tokens, out, aligns, scores, finished, lengths, states):
        return ops.logical_and(
            ops.less(t, max_length), ops.logical_not(ops.all(finished))
        )

    def body(t, tokens, out, aligns, scores, finished, lengths, states):
        log_probs, new_states = _step(
            cell, embedding, output_layer, tokens, list(states)
        )
        chosen = choose(log_probs, t)
        chosen_log_prob = ops.take_along_axis(
            log_probs, ops.expand_dims(chosen, -1), axis=-1
        )[:, 0]
        chosen = ops.where(finished, pad_token, chosen)
        scores = scores + ops.where(finished, 0.0, chosen_log_prob)
        lengths = lengths + ops.cast(ops.logical_not(finished), "int32")
        alignments = ops.cast(new_states[cell.alignments_index], "float32")
        alignments = ops.where(ops.expand_dims(finished, -1), 0.0, alignments)
        out = _write(out, t, chosen)
        aligns = _write(aligns, t, alignments)
        finished = ops.logical_or(finished, ops.equal(chosen, end_token))
        return (
            t + 1,
            chosen,
            out,
            aligns,
            scores,
            finished,
            lengths,
            tuple(new_states),
        )

    _, _, tokens, alignments, scores, _, lengths, _ = ops.while_loop(
        cond, body, body(*loop_vars)
    )
    return DecodeResult(tokens, scores, alignments, lengths)


def filter_logits(log_probs, temperature=1.0, top_k=None, top_p=None):
    """Logits of the sampling distribution: temperature, top-k, top-p.

    `log_probs / temperature`, then only the `top_k` likeliest tokens
    (Fan et al., 2018) and only the smallest set of the likeliest tokens
    whose probability reaches `top_p` (nucleus sampling, Holtzman et al.,
    2020) keep their logit; the others get `-1e30` (probability 0). Ties
    at the cut are kept.

    Args:
        log_probs: `(batch_size, vocabulary_size)` logits or
            log-probabilities.
        temperature: Positive; below 1 sharpens, above 1 flattens.
            Defaults to `1.0`.
        top_k: Optional positive integer.
        top_p: Optional float in `(0, 1]`.

    Returns:
        `(batch_size, vocabulary_size)` float32 logits.
    """
    _check_sampling_arguments(temperature, top_k, top_p)
    checks.logits_2d(log_probs)
    logits = ops.cast(log_probs, "float32") / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = ops.top_k(logits, top_k)[0][:, -1:]
        logits = ops.where(logits < kth, -1e30, logits)
    if top_p is not None and top_p < 1.0:
        probs = ops.softmax(logits, axis=-1)
        ordered = ops.top_k(probs, probs.shape[-1])[0]
        before = ops.cumsum(ordered, axis=-1) - ordered
        kept = ops.where(before < top_p, ordered, 2.0)
        smallest = ops.min(kept, axis=-1, keepdims=True)
        logits = ops.where(probs < smallest, -1e30, logits)
    return logits


def _check_sampling_arguments(temperature, top_k, top_p):
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or temperature <= 0
    ):
        raise ValueError(
            "Received an invalid value for argument `temperature`, expected "
            f"a positive number. Received: temperature={temperature!r}"
        )
    _check_positive_int("top_k", top_k, allow_none=True)
    if top_p is not None and (
        isinstance(top_p, bool)
        or not isinstance(top_p, (int, float))
        or not 0 < top_p <= 1
    ):
        raise ValueError(
            "Received an invalid value for argument `top_p`, expected a "
            f"float in (0, 1]. Received: top_p={top_p!r}"
        )


def sample_decode(
    cell,
    memory,
    embedding,
    output_layer,
    start_token,
    end_token,
    max_length,
    temperature=1.0,
    top_k=None,
    top_p=None,
    seed=None,
    memory_mask=None,
    cell_state=None,
    pad_token=0,
):
    """Decoding by sampling: `y_t ~ p(y | y_{<t}, x)`, reshaped.

    At every step the next token is drawn from the model's distribution
    after `filter_logits` (temperature, top-k, top-p), by inverting its
    cumulative distribution at a uniform number; all the uniform numbers
    are drawn before the loop from `seed`, so a seed fixes the output on
    a backend and the loop compiles on every backend (tfa's
    `SampleEmbeddingSampler`, with top-k and nucleus sampling added).
    `top_k=1` is greedy decoding.

    Args:
        cell: An `AttentionDecoderCell`.
        memory: The encoder outputs `(batch_size, source_time, depth)`.
        embedding: Callable mapping token ids to step inputs.
        output_layer: Callable mapping the cell output to logits.
        start_token: Id fed at the first step.
        end_token: Id that ends a sequence.
        max_length: Largest number of emitted tokens.
        temperature: Divides the logits. Defaults to `1.0`.
        top_k: Sample among the `top_k` likeliest tokens only. Defaults to
            `None`, all.
        top_p: Sample among the smallest set of likeliest tokens whose
            probability reaches `top_p`. Defaults to `None`, all.
        seed: An integer, a `keras.random.SeedGenerator` or `None`.
        memory_mask: Optional boolean `(batch_size, source_time)`.
        cell_state: Optional initial state of the wrapped cell.
        pad_token: Id written after the end token. Defaults to `0`.

    Returns:
        A `DecodeResult`; `scores` is the log-probability of the sampled
        tokens under the model (before temperature and filtering).

    Example:

    >>> cell = keras_attention.seq2seq.AttentionDecoderCell(
    ...     keras.layers.GRUCell(8), keras_attention.seq2seq.BahdanauAttention()
    ... )
    >>> result = keras_attention.seq2seq.sample_decode(
    ...     cell,
    ...     memory=np.random.rand(2, 5, 6).astype("float32"),
    ...     embedding=keras.layers.Embedding(10, 4),
    ...     output_layer=keras.layers.Dense(10),
    ...     start_token=1,
    ...     end_token=2,
    ...     max_length=7,
    ...     temperature=0.7,
    ...     top_p=0.9,
    ...     seed=0,
    ... )
    >>> tuple(result.tokens.shape)
    (2, 7)

    References:
        - [Holtzman et al., 2020](https://arxiv.org/abs/1904.09751)
        - [Fan et al., 2018](https://arxiv.org/abs/1805.04833)
    """
    _check_positive_int("max_length", max_length)
    _check_sampling_arguments(temperature, top_k, top_p)
    checks.token_ids(embedding, output_layer, start_token, end_token, pad_token)
    checks.decoder_parts(cell, embedding, output_layer, memory, seed=seed)
    batch = ops.shape(ops.convert_to_tensor(memory))[0]
    uniform = keras.random.uniform((max_length, batch), seed=seed)

    def sample(log_probs, t):
        logits = filter_logits(log_probs, temperature, top_k, top_p)
        cumulative = ops.cumsum(ops.softmax(logits, axis=-1), axis=-1)
        u = ops.take(uniform, t, axis=0)[:, None] * cumulative[:, -1:]
        index = ops.sum(ops.cast(cumulative <= u, "int32"), axis=-1)
        # Never past the last token kept, whatever the rounding.
        last = ops.argmax(
            ops.cast(logits > -1e29, "int32") * ops.arange(logits.shape[-1]),
            axis=-1,
        )
        return ops.minimum(index, ops.cast(last, "int32"))

    return _decode(
        (cell, embedding, output_layer),
        memory,
        (start_token, end_token, pad_token),
        max_length,
        memory_mask,
        cell_state,
        sample,
    )


class BeamHypotheses(NamedTuple):
    """The n best hypotheses of beam search, best first.

    Attributes:
        tokens: `int32` `(batch_size, n, max_length)`: the emitted tokens,
            the end token included, then `pad_token`.
        scores: `float32` `(batch_size, n)`: the ranking score, sorted in
            decreasing order: `log p(y | x) / lp(|y|) + β cp(y)` with
            GNMT's length and coverage penalties (see `beam_search_decode`).
        alignments: `float32` `(batch_size, n, max_length, source_time)`:
            the attention weights of the step that emitted each token; zero
            after the end token.
        lengths: `int32` `(batch_size, n)`: number of emitted tokens, the
            end token included.
        log_probs: `float32` `(batch_size, n)`: `log p(y | x)`, the sum of
            the log-probabilities of the emitted tokens, without penalty.
    """

    tokens: object
    scores: object
    alignments: object
    lengths: object
    log_probs: object


def _length_penalty(lengths, alpha):
    """GNMT's `((5 + |Y|) / 6) ** alpha` (Wu et al., 2016)."""
    if alpha == 0:
        return ops.ones_like(ops.cast(lengths, "float32"))
    return ops.power((5.0 + ops.cast(lengths, "float32")) / 6.0, alpha)


def _coverage_penalty(coverage):
    """GNMT's `Σ_s log(min(Σ_t α_ts, 1))`, over `(..., source_time)`.

    As in tfa, a source position with no attention at all (padding, or a
    position sparsemax or hardmax never chose) contributes `0`, not `-inf`.
    """
    coverage = ops.where(ops.equal(coverage, 0.0), 1.0, coverage)
    return ops.sum(ops.log(ops.minimum(coverage, 1.0)), axis=-1)


def beam_search_decode(
    cell,
    memory,
    embedding,
    output_layer,
    start_token,
    end_token,
    max_length,
    beam_width,
    length_penalty=0.0,
    memory_mask=None,
    cell_state=None,
    pad_token=0,
    coverage_penalty=0.0,
    num_hypotheses=None,
):
    """Beam search: keeps the `beam_width` best partial translations.

    At every step each live hypothesis `y_{<t}` is extended by every token
    and the `beam_width` best candidates over all hypotheses are kept,
    ranked by GNMT's score (Wu et al., 2016, as tfa's `BeamSearchDecoder`
    defined it):

        s(y) = log p(y | x) / lp(|y|) + β cp(y)
        lp(n) = ((5 + n) / 6) ** α
        cp(y) = Σ_s log(min(Σ_t α_ts, 1))

    with `α = length_penalty` and `β = coverage_penalty` (`0` disables
    either). `|y|` counts the end token; `α_ts` are the alignments of the
    hypothesis, and a source position never attended contributes `0` (as
    in tfa). The coverage term applies to complete hypotheses: those that
    emitted the end token, and, at the last step, those cut by
    `max_length` (tfa added it one step after the end token). A finished
    hypothesis keeps its score and competes with the live ones. With
    `beam_width=1` this is greedy decoding, exactly. A beam wider than the
    vocabulary is allowed: the slots no real hypothesis fills score about
    `-1e9`.

    Args:
        cell: An `AttentionDecoderCell`.
        memory: The encoder outputs `(batch_size, source_time, depth)`.
        embedding: Callable mapping token ids `(n,)` to step inputs.
        output_layer: Callable mapping the cell output to logits
            `(n, vocabulary_size)`.
        start_token: Id fed at the first step.
        end_token: Id that ends a hypothesis.
        max_length: Largest number of emitted tokens.
        beam_width: Number of hypotheses kept.
        length_penalty: The length penalty weight `α` (tfa's
            `length_penalty_weight`). Defaults to `0.0`.
        memory_mask: Optional boolean `(batch_size, source_time)`.
        cell_state: Optional initial state of the wrapped cell.
        pad_token: Id written after the end token. Defaults to `0`.
        coverage_penalty: The coverage penalty weight `β` (tfa's
            `coverage_penalty_weight`). Defaults to `0.0`.
        num_hypotheses: Defaults to `None`: return the best hypothesis as a
            `DecodeResult`. An integer `n <= beam_width`: return the `n`
            best as a `BeamHypotheses`, best first.

    Returns:
        With `num_hypotheses=None`, a `DecodeResult` for the best
        hypothesis of each example; its `scores` is the log-probability
        (without penalties). Otherwise a `BeamHypotheses`.

    Example:

    >>> cell = keras_attention.seq2seq.AttentionDecoderCell(
    ...     keras.layers.GRUCell(8), keras_attention.seq2seq.BahdanauAttention()
    ... )
    >>> result = keras_attention.seq2seq.beam_search_decode(
    ...     cell,
    ...     memory=np.random.rand(2, 5, 6).astype("float32"),
    ...     embedding=keras.layers.Embedding(10, 4),
    ...     output_layer=keras.layers.Dense(10),
    ...     start_token=1,
    ...     end_token=2,
    ...     max_length=7,
    ...     beam_width=3,
    ...     length_penalty=0.6,
    ...     coverage_penalty=0.2,
    ...     num_hypotheses=2,
    ... )
    >>> tuple(result.tokens.shape), tuple(result.scores.shape)
    ((2, 2, 7), (2, 2))

    References:
        - [Wu et al., 2016](https://arxiv.org/abs/1609.08144)
        - [Sutskever et al., 2014](https://arxiv.org/abs/1409.3215)
    """
    penalties = _check_beam_arguments(
        max_length, beam_width, length_penalty, coverage_penalty
    )
    checks.token_ids(embedding, output_layer, start_token, end_token, pad_token)
    checks.decoder_parts(cell, embedding, output_layer, memory)
    if num_hypotheses is not None:
        _check_positive_int("num_hypotheses", num_hypotheses)
        if num_hypotheses > beam_width:
            raise ValueError(
                "`num_hypotheses` must be at most `beam_width`. Received: "
                f"num_hypotheses={num_hypotheses}, beam_width={beam_width}"
            )
    k = beam_width
    states = cell.get_initial_state(
        memory=memory, memory_mask=memory_mask, cell_state=cell_state
    )
    batch = ops.shape(states[-2])[0]
    source_length = ops.shape(states[-2])[1]
    # Beam b of example i lives in row i * k + b.
    states = [ops.repeat(s, k, axis=0) for s in states]
    first_beam = ops.equal(ops.arange(k), 0)
    loop_vars = (
        ops.convert_to_tensor(0, dtype="int32"),
        ops.full((batch * k,), start_token, dtype="int32"),
        ops.full((batch * k, max_length), pad_token, dtype="int32"),
        ops.zeros((batch * k, max_length, source_length), dtype="float32"),
        # Only beam 0 is alive at the start, so the first step expands it
        # alone instead of `k` identical copies.
        ops.broadcast_to(ops.where(first_beam, 0.0, -1e9)[None, :], (batch, k)),
        ops.zeros((batch, k), dtype="float32"),
        ops.zeros((batch, k), dtype="bool"),
        ops.zeros((batch, k), dtype="int32"),
        ops.zeros((batch * k, source_length), dtype="float32"),
        tuple(states),
    )
    body = _beam_body(
        cell,
        embedding,
        output_layer,
        (batch, k, max_length),
        (pad_token, end_token),
        penalties,
    )

    def cond(t, tokens, out, aligns, sums, ranks, finished, *rest):
        return ops.logical_and(
            ops.less(t, max_length), ops.logical_not(ops.all(finished))
        )

    _, _, out, aligns, sums, ranks, _, lengths, _, _ = ops.while_loop(
        cond, body, body(*loop_vars)
    )
    n = 1 if num_hypotheses is None else num_hypotheses
    # `top_k` sorted the beams at the last step: the first `n` are the best.
    hypotheses = BeamHypotheses(
        ops.reshape(out, (batch, k, max_length))[:, :n],
        ranks[:, :n],
        ops.reshape(aligns, (batch, k, max_length, source_length))[:, :n],
        lengths[:, :n],
        sums[:, :n],
    )
    if num_hypotheses is not None:
        return hypotheses
    return DecodeResult(
        hypotheses.tokens[:, 0],
        hypotheses.log_probs[:, 0],
        hypotheses.alignments[:, 0],
        hypotheses.lengths[:, 0],
    )


def _beam_body(cell, embedding, output_layer, sizes, special, penalties):
    """The loop body of `beam_search_decode`."""
    batch, k, max_length = sizes
    end_token = special[1]
    num_varying = None

    def body(t, tokens, out, aligns, sums, ranks, finished, lengths, cover, st):
        nonlocal num_varying
        log_probs, new_states = _step(
            cell, embedding, output_layer, tokens, list(st)
        )
        num_varying = len(new_states) - cell.num_constant_states
        flat_finished = ops.reshape(finished, (-1,))
        alignments = ops.cast(new_states[cell.alignments_index], "float32")
        alignments = ops.where(
            ops.expand_dims(flat_finished, -1), 0.0, alignments
        )
        cover = cover + alignments
        parent, chosen, sums, ranks, finished, lengths = _extend_beams(
            log_probs,
            (sums, finished, lengths),
            ops.reshape(cover, (batch, k, -1)),
            ops.equal(t, max_length - 1),
            special,
            penalties,
        )
        rows = ops.reshape(
            ops.expand_dims(ops.arange(batch, dtype="int32") * k, -1) + parent,
            (-1,),
        )
        # The memory and its mask are the same for all beams of an example.
        new_states = [
            ops.take(s, rows, axis=0) if i < num_varying else s
            for i, s in enumerate(new_states)
        ]
        flat_chosen = ops.reshape(chosen, (-1,))
        out = _write(ops.take(out, rows, axis=0), t, flat_chosen)
        aligns = _write(
            ops.take(aligns, rows, axis=0), t, ops.take(alignments, rows, 0)
        )
        finished = ops.logical_or(finished, ops.equal(chosen, end_token))
        return (
            t + 1,
            flat_chosen,
            out,
            aligns,
            sums,
            ranks,
            finished,
            lengths,
            ops.take(cover, rows, axis=0),
            tuple(new_states),
        )

    return body


def _check_beam_arguments(
    max_length, beam_width, length_penalty, coverage_penalty
):
    _check_positive_int("max_length", max_length)
    _check_positive_int("beam_width", beam_width)
    for name, value in (
        ("length_penalty", length_penalty),
        ("coverage_penalty", coverage_penalty),
    ):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or value < 0
        ):
            raise ValueError(
                f"Received an invalid value for argument `{name}`, "
                f"expected a non-negative number. Received: {name}={value!r}"
            )
    return float(length_penalty), float(coverage_penalty)


def _extend_beams(log_probs, beams, coverage, is_last, special, penalties):
    """The `k` best one-token extensions of each example's `k` hypotheses.

    `log_probs` is `(batch * k, vocab)`; `beams` holds the `(batch, k)`
    log-probability sums, finished flags and lengths; `coverage` is
    `(batch, k, source_time)`, the attention each hypothesis has summed,
    this step included. Returns `(parent, chosen, sums, ranks, finished,
    lengths)`, each `(batch, k)`: the hypothesis each new one extends, the
    token it appends, its log-probability, ranking score, finished flag
    (before this token) and length.
    """
    sums, finished, lengths = beams
    pad_token, end_token = special
    alpha, beta = penalties
    batch, k = ops.shape(sums)[0], sums.shape[1]
    vocab = log_probs.shape[-1]
    log_probs = ops.reshape(log_probs, (batch, k, vocab))
    # A finished hypothesis continues only with the pad token, at no
    # cost, so it keeps its score.
    is_pad = ops.equal(ops.arange(vocab), pad_token)
    step = ops.where(
        ops.expand_dims(finished, -1), ops.where(is_pad, 0.0, -1e9), log_probs
    )
    total = ops.expand_dims(sums, -1) + step
    new_lengths = lengths + ops.cast(ops.logical_not(finished), "int32")
    ranking = total / ops.expand_dims(_length_penalty(new_lengths, alpha), -1)
    if beta != 0:
        complete = ops.logical_or(
            ops.expand_dims(finished, -1),
            ops.logical_or(ops.equal(ops.arange(vocab), end_token), is_last),
        )
        penalty = beta * ops.expand_dims(_coverage_penalty(coverage), -1)
        ranking = ranking + ops.where(complete, penalty, 0.0)
    ranks, best = ops.top_k(ops.reshape(ranking, (batch, k * vocab)), k)
    best = ops.cast(best, "int32")
    parent = best // vocab
    sums = ops.take_along_axis(
        ops.reshape(total, (batch, k * vocab)), best, axis=1
    )
    finished = ops.take_along_axis(finished, parent, axis=1)
    lengths = ops.take_along_axis(new_lengths, parent, axis=1)
    chosen = ops.where(finished, pad_token, best % vocab)
    return parent, chosen, sums, ranks, finished, lengths
