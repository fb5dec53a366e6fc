"""Greedy decoding and sampling with an `AttentionDecoderCell`.

The decoders run one `keras.ops.while_loop` (so they work eagerly and
inside a compiled `predict`), batched, and stop when every sequence has
emitted the end token or after `max_length` steps. They return a
`DecodeResult` with the alignment history for plotting. Beam search
(`keras_attention.seq2seq.beam_search`) shares their step
(`decoder_step`, `write_step`).

The first step runs before the loop: it builds the cell, the embedding and
the output layer outside the loop body, which JAX traces, and creating a
variable inside a traced function leaks a tracer.
"""

from typing import NamedTuple

import keras
from keras import ops

from keras_attention import _validation
from keras_attention import ops as ka_ops
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

    >>> result = keras_attention.seq2seq.greedy_decode(cell, **parts)
    >>> isinstance(result, keras_attention.seq2seq.DecodeResult)
    True
    >>> tuple(result.tokens.shape), tuple(result.lengths.shape)
    ((2, 7), (2,))
    """

    tokens: object
    scores: object
    alignments: object
    lengths: object


def decoder_step(cell, embedding, output_layer, tokens, states):
    """One decoder step: `(log_probs (B, V) float32, new_states)`."""
    output, new_states = cell(embedding(tokens), states, training=False)
    logits = ops.cast(output_layer(output), "float32")
    return ops.log_softmax(logits, axis=-1), list(new_states)


def write_step(buffer, t, values):
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
    memory = cell.state_layout.memory(states)
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
        log_probs, new_states = decoder_step(
            cell, embedding, output_layer, tokens, list(states)
        )
        chosen = choose(log_probs, t)
        chosen_log_prob = ops.take_along_axis(
            log_probs, ops.expand_dims(chosen, -1), axis=-1
        )[:, 0]
        chosen = ops.where(finished, pad_token, chosen)
        scores = scores + ops.where(finished, 0.0, chosen_log_prob)
        lengths = lengths + ops.cast(ops.logical_not(finished), "int32")
        alignments = ops.cast(
            cell.state_layout.alignments(new_states), "float32"
        )
        alignments = ops.where(ops.expand_dims(finished, -1), 0.0, alignments)
        out = write_step(out, t, chosen)
        aligns = write_step(aligns, t, alignments)
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
    2020) keep their logit; the others get `MASKED_LOGIT` (probability 0). Ties
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

    Example:

    >>> log_probs = np.log(np.array([[0.5, 0.3, 0.2]], "float32"))
    >>> logits = keras_attention.seq2seq.filter_logits(log_probs, top_k=2)
    >>> probabilities = keras.ops.softmax(logits)
    >>> np.asarray(probabilities, "float64").round(3).tolist()
    [[0.625, 0.375, 0.0]]
    """
    _check_sampling_arguments(temperature, top_k, top_p)
    checks.logits_2d(log_probs)
    logits = ops.cast(log_probs, "float32") / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = ops.top_k(logits, top_k)[0][:, -1:]
        logits = ka_ops.mask_logits(logits, logits >= kth)
    if top_p is not None and top_p < 1.0:
        probs = ops.softmax(logits, axis=-1)
        ordered = ops.top_k(probs, probs.shape[-1])[0]
        before = ops.cumsum(ordered, axis=-1) - ordered
        kept = ops.where(before < top_p, ordered, 2.0)
        smallest = ops.min(kept, axis=-1, keepdims=True)
        logits = ka_ops.mask_logits(logits, probs >= smallest)
    return logits


def _check_sampling_arguments(temperature, top_k, top_p):
    _validation.positive_number("temperature", temperature)
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
        return ka_ops.inverse_cdf_sample(logits, ops.take(uniform, t, axis=0))

    return _decode(
        (cell, embedding, output_layer),
        memory,
        (start_token, end_token, pad_token),
        max_length,
        memory_mask,
        cell_state,
        sample,
    )
