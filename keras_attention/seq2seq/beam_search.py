"""Beam search with an `AttentionDecoderCell`: n-best, GNMT penalties.

One `keras.ops.while_loop` over `batch_size * beam_width` rows (beam `b` of
example `i` in row `i * beam_width + b`), as the greedy decoder of
`keras_attention.seq2seq.decoding`, whose step it shares; the first step
runs before the loop (see there).
"""

from typing import NamedTuple

from keras import ops

from keras_attention import _validation
from keras_attention._validation import positive_int as _check_positive_int
from keras_attention.ops.logits import mask_logits
from keras_attention.seq2seq import checks
from keras_attention.seq2seq.decoding import DecodeResult
from keras_attention.seq2seq.decoding import decoder_step
from keras_attention.seq2seq.decoding import write_step


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

    Example:

    >>> cell = keras_attention.seq2seq.AttentionDecoderCell(
    ...     keras.layers.GRUCell(8), keras_attention.seq2seq.BahdanauAttention()
    ... )
    >>> parts = dict(
    ...     memory=np.random.rand(2, 5, 6).astype("float32"),
    ...     embedding=keras.layers.Embedding(10, 4),
    ...     output_layer=keras.layers.Dense(10),
    ...     start_token=1,
    ...     end_token=2,
    ...     max_length=7,
    ... )

    >>> result = keras_attention.seq2seq.beam_search_decode(
    ...     cell, **parts, beam_width=3, num_hypotheses=2
    ... )
    >>> isinstance(result, keras_attention.seq2seq.BeamHypotheses)
    True
    >>> tuple(result.tokens.shape), tuple(result.log_probs.shape)
    ((2, 2, 7), (2, 2))
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
    vocabulary is allowed: the slots no real hypothesis fills score
    `MASKED_LOGIT` (the masked logit's fill: far below any real sum of
    log-probabilities, yet finite, so that such slots keep an order).

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
    memory = cell.state_layout.memory(states)
    batch, source_length = ops.shape(memory)[0], ops.shape(memory)[1]
    loop_vars = _initial_beams(
        states, (batch, k, max_length, source_length), start_token, pad_token
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


def _initial_beams(states, sizes, start_token, pad_token):
    """The loop variables of `beam_search_decode` before its first step."""
    batch, k, max_length, source_length = sizes
    # Beam b of example i lives in row i * k + b.
    states = [ops.repeat(s, k, axis=0) for s in states]
    first_beam = ops.equal(ops.arange(k), 0)
    return (
        ops.convert_to_tensor(0, dtype="int32"),
        ops.full((batch * k,), start_token, dtype="int32"),
        ops.full((batch * k, max_length), pad_token, dtype="int32"),
        ops.zeros((batch * k, max_length, source_length), dtype="float32"),
        # Only beam 0 is alive at the start, so the first step expands it
        # alone instead of `k` identical copies.
        ops.broadcast_to(
            mask_logits(ops.zeros((k,)), first_beam)[None, :], (batch, k)
        ),
        ops.zeros((batch, k), dtype="float32"),
        ops.zeros((batch, k), dtype="bool"),
        ops.zeros((batch, k), dtype="int32"),
        ops.zeros((batch * k, source_length), dtype="float32"),
        tuple(states),
    )


def _beam_body(cell, embedding, output_layer, sizes, special, penalties):
    """The loop body of `beam_search_decode`."""
    batch, k, max_length = sizes
    end_token = special[1]
    layout = cell.state_layout
    num_varying = layout.num_varying_states

    def body(t, tokens, out, aligns, sums, ranks, finished, lengths, cover, st):
        log_probs, new_states = decoder_step(
            cell, embedding, output_layer, tokens, list(st)
        )
        flat_finished = ops.reshape(finished, (-1,))
        alignments = ops.cast(layout.alignments(new_states), "float32")
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
        out = write_step(ops.take(out, rows, axis=0), t, flat_chosen)
        aligns = write_step(
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
    return (
        _validation.non_negative("length_penalty", length_penalty),
        _validation.non_negative("coverage_penalty", coverage_penalty),
    )


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
        ops.expand_dims(finished, -1),
        mask_logits(ops.zeros((vocab,)), is_pad),
        log_probs,
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
