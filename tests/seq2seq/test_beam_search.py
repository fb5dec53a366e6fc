"""Beam search's n best against NumPy searches on a tiny vocabulary.

The model's next-token log-probabilities and alignments after every prefix
come from one teacher-forced pass over all sequences. With a beam wider
than the number of hypotheses alive at any step, beam search is
exhaustive, so its n best must be the n best of all complete hypotheses
scored in NumPy: `log p / ((5 + |y|) / 6) ** α + β Σ_s log(min(Σ_t α_ts,
1))` (GNMT's penalties as tfa defined them: the coverage term on complete
hypotheses only, a position never attended counting 0). With a narrow
beam it must match a beam search written in NumPy from those formulas,
where pruning makes every detail of the ranking count.
"""

import itertools

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import seq2seq
from tests.layer_basics import normal_arrays
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import assert_array_equal
from tests.seq2seq._arrays import to_numpy

VOCAB, START, END, MAX_LENGTH = 4, 1, 2, 3
WIDTH = 3  # of the beam: prunes on this model (4 ** 3 sequences)
(MEMORY,) = normal_arrays(5, (2, 3, 4))
MEMORY_MASK = np.array([[1, 1, 0], [1, 1, 1]], dtype=bool)


@pytest.fixture(scope="module")
def model():
    cell = seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(4), seq2seq.BahdanauAttention(4)
    )
    embedding = keras.layers.Embedding(VOCAB, 3)
    output_layer = keras.layers.Dense(VOCAB)
    cell.get_initial_state(memory=MEMORY)
    cell.build((None, 3))
    embedding.build((None,))
    output_layer.build((None, cell.output_size))
    # The same weights on every backend (so the same beams are pruned),
    # and large logits: hypotheses far apart, no near-ties in the ranking.
    rng = np.random.default_rng(3)
    for layer, scale in ((cell, 0.7), (embedding, 1.0), (output_layer, 2.0)):
        layer.set_weights(
            [scale * rng.normal(size=w.shape) for w in layer.get_weights()]
        )
    return (
        cell,
        embedding,
        output_layer,
        _all_hypotheses(cell, embedding, output_layer),
    )


def _all_hypotheses(cell, embedding, output_layer):
    """Log-probs and alignments of every sequence, teacher-forced.

    Per example: `{hypothesis: (log_prob, coverage)}` for every complete
    hypothesis, and `{prefix: (next_log_probs, alignments)}` for every
    prefix without the end token.
    """
    sequences = np.array(
        list(itertools.product(range(VOCAB), repeat=MAX_LENGTH)), "int32"
    )
    n = len(sequences)
    inputs = np.concatenate([np.full((n, 1), START), sequences[:, :-1]], 1)
    decoder = seq2seq.AttentionDecoder(cell, return_alignments=True)
    table = []
    for i in range(len(MEMORY)):
        outputs, alignments = decoder(
            embedding(inputs),
            np.repeat(MEMORY[i : i + 1], n, axis=0),
            memory_mask=np.repeat(MEMORY_MASK[i : i + 1], n, axis=0),
        )
        log_probs = to_numpy(ops.log_softmax(output_layer(outputs), axis=-1))
        picked = np.take_along_axis(log_probs, sequences[..., None], -1)
        hypotheses, prefixes = {}, {}
        for seq, steps, weights, scores in zip(
            sequences,
            picked[..., 0],
            to_numpy(alignments),
            log_probs,
            strict=True,
        ):
            for t in range(MAX_LENGTH):
                prefixes[tuple(seq[:t])] = (scores[t], weights[t])
            ends = np.flatnonzero(seq == END)
            length = ends[0] + 1 if len(ends) else MAX_LENGTH
            hypotheses[tuple(seq[:length])] = (
                steps[:length].sum(),
                weights[:length].sum(0),
            )
        table.append((hypotheses, prefixes))
    return table


def _brute_force(table, alpha, beta, n):
    """The `n` best `(tokens, score, log_prob)` of each example."""
    best = []
    for hypotheses, _ in table:
        ranked = []
        for tokens, (log_prob, coverage) in hypotheses.items():
            coverage = np.where(coverage == 0, 1.0, coverage)
            penalty = np.log(np.minimum(coverage, 1.0)).sum()
            lp = ((5.0 + len(tokens)) / 6.0) ** alpha
            ranked.append((log_prob / lp + beta * penalty, log_prob, tokens))
        ranked.sort(key=lambda r: -r[0])
        best.append(ranked[:n])
    return best


def _gnmt_score(log_prob, length, coverage, alpha, beta, complete):
    """Wu et al. (2016) as tfa: coverage penalty on complete ones only."""
    score = log_prob / ((5.0 + length) / 6.0) ** alpha
    if complete and beta:
        coverage = np.where(coverage == 0, 1.0, coverage)
        score += beta * np.log(np.minimum(coverage, 1.0)).sum()
    return score


def _reference_beam_search(prefixes, width, alpha, beta):
    """Beam search in NumPy: `[(score, log_prob, tokens)]`, best first.

    A hypothesis is `(tokens, log_prob, coverage, finished)`. Each step
    extends every live hypothesis by every token, a finished one stays as
    it is (and competes), and the `width` best by GNMT score are kept;
    a hypothesis is complete once it has the end token or at the last
    step.
    """
    depth = len(prefixes[()][1])
    beams = [((), 0.0, np.zeros(depth), False)]
    for t in range(MAX_LENGTH):
        candidates = []
        for tokens, log_prob, coverage, finished in beams:
            if finished:
                candidates.append((tokens, log_prob, coverage, True))
                continue
            log_probs, alignments = prefixes[tokens]
            for token in range(VOCAB):
                candidates.append(
                    (
                        tokens + (token,),
                        log_prob + log_probs[token],
                        coverage + alignments,
                        token == END,
                    )
                )
        scored = [
            (
                _gnmt_score(
                    log_prob,
                    len(tokens),
                    coverage,
                    alpha,
                    beta,
                    finished or t == MAX_LENGTH - 1,
                ),
                (tokens, log_prob, coverage, finished),
            )
            for tokens, log_prob, coverage, finished in candidates
        ]
        scored.sort(key=lambda c: -c[0])
        ranked = scored[:width]
        beams = [hypothesis for _, hypothesis in ranked]
    return [(score, h[1], h[0]) for score, h in ranked]


def test_the_numpy_beam_search_at_full_width_is_exhaustive(model):
    table = model[3]
    for alpha, beta in ((0.0, 0.0), (1.5, 0.0), (0.6, 2.0)):
        for hypotheses, prefixes in table:
            [expected] = _brute_force([(hypotheses, None)], alpha, beta, 5)
            found = _reference_beam_search(
                prefixes, VOCAB**MAX_LENGTH, alpha, beta
            )[:5]
            assert [h for *_, h in found] == [h for *_, h in expected]
            assert_allclose([f[0] for f in found], [e[0] for e in expected])


def test_n_best_of_a_narrow_beam_follow_the_numpy_beam_search(model):
    # A beam narrow enough to prune (so the ranking of unfinished
    # hypotheses matters), both penalties on; the same width below, so
    # JAX compiles one set of shapes.
    cell, embedding, output_layer, table = model
    alpha, beta = 0.6, 2.0
    result = seq2seq.beam_search_decode(
        cell,
        MEMORY,
        embedding,
        output_layer,
        START,
        END,
        MAX_LENGTH,
        beam_width=WIDTH,
        length_penalty=alpha,
        coverage_penalty=beta,
        memory_mask=MEMORY_MASK,
        num_hypotheses=WIDTH,
    )
    assert isinstance(result, seq2seq.BeamHypotheses)
    tokens, scores, alignments, lengths, log_probs = (
        to_numpy(x) for x in result
    )
    assert tokens.shape == (2, WIDTH, MAX_LENGTH)
    assert alignments.shape == (2, WIDTH, MAX_LENGTH, 3)
    pruned = False
    for i, (hypotheses, prefixes) in enumerate(table):
        expected = _reference_beam_search(prefixes, WIDTH, alpha, beta)
        for j, (score, log_prob, hypothesis) in enumerate(expected):
            length = len(hypothesis)
            assert lengths[i, j] == length
            assert_array_equal(tokens[i, j, :length], hypothesis)
            assert np.all(tokens[i, j, length:] == 0)
            assert np.all(alignments[i, j, length:] == 0)
            assert_allclose(scores[i, j], score, rtol=1e-4, atol=1e-5)
            assert_allclose(log_probs[i, j], log_prob, rtol=1e-4, atol=1e-5)
            coverage = hypotheses[hypothesis][1]
            assert_allclose(alignments[i, j].sum(0), coverage, atol=1e-5)
        [best] = _brute_force([(hypotheses, None)], alpha, beta, WIDTH)
        pruned |= [h for *_, h in best] != [h for *_, h in expected]
    assert np.all(np.diff(scores, axis=1) <= 0)
    # Narrow enough to lose one of the best somewhere.
    assert pruned


def test_without_num_hypotheses_the_best_comes_as_before(model):
    cell, embedding, output_layer, table = model
    single = seq2seq.beam_search_decode(
        cell,
        MEMORY,
        embedding,
        output_layer,
        START,
        END,
        MAX_LENGTH,
        beam_width=WIDTH,
        length_penalty=1.0,
        memory_mask=MEMORY_MASK,
    )
    assert isinstance(single, seq2seq.DecodeResult)
    tokens, scores, _, lengths = (to_numpy(x) for x in single)
    assert tokens.shape == (2, MAX_LENGTH)
    for i, (_, prefixes) in enumerate(table):
        [(_, log_prob, hypothesis), *_] = _reference_beam_search(
            prefixes, WIDTH, 1.0, 0.0
        )
        assert lengths[i] == len(hypothesis)
        assert_array_equal(tokens[i, : len(hypothesis)], hypothesis)
        # `scores` stays the plain log-probability.
        assert_allclose(scores[i], log_prob, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_hypotheses": 3}, "num_hypotheses=3, beam_width=2"),
        ({"num_hypotheses": 0}, "num_hypotheses=0"),
        ({"coverage_penalty": -0.5}, "coverage_penalty=-0.5"),
    ],
)
def test_invalid_n_best_arguments_raise(model, kwargs, match):
    cell, embedding, output_layer, _ = model
    with pytest.raises(ValueError, match=match):
        seq2seq.beam_search_decode(
            cell, MEMORY, embedding, output_layer, START, END, 3, 2, **kwargs
        )
