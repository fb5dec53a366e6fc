"""The Translator model and its evaluation helpers."""

import keras
import numpy as np
import pytest

from keras_attention.data.translation import ParallelCorpus
from keras_attention.data.translation import make_synthetic_translation
from keras_attention.models import translation

DATA = make_synthetic_translation(40, seed=5)


def _vocabularies():
    return translation.build_vocabularies(DATA.sources, DATA.targets)


def _model(**kwargs):
    source_vocabulary, target_vocabulary = _vocabularies()
    defaults = {"embedding_dim": 8, "units": 8, "max_output_length": 6}
    return translation.Translator(
        source_vocabulary, target_vocabulary, **{**defaults, **kwargs}
    )


def test_vocabularies_start_with_padding_and_hold_start_end_tokens():
    source_vocabulary, target_vocabulary = _vocabularies()
    assert source_vocabulary[:2] == ["", "[UNK]"]
    assert target_vocabulary[:2] == ["", "[UNK]"]
    assert {"[start]", "[end]"} <= set(target_vocabulary)
    limited, _ = translation.build_vocabularies(
        DATA.sources, DATA.targets, max_source_tokens=5
    )
    assert len(limited) == 5


@pytest.mark.heavy
@pytest.mark.tensorflow_lane
def test_decode_corpus_beam_width_one_equals_greedy_predict():
    """`decode_corpus`'s settings swap: Python, the same on every backend.

    Other lanes (26 s on JAX): `tests/seq2seq/test_decoding.py`'s
    `test_beam_width_one_equals_greedy` and
    `test_decoders_work_inside_a_compiled_function` (the compiled beams
    equal the eager ones).
    """
    model = _model(beam_width=3)
    ids = model.vectorize_sources(DATA.sources[:5])
    seen, predict = [], model.predict

    def spy(*args, **kwargs):
        seen.append((model.beam_width, model.length_penalty))
        return predict(*args, **kwargs)

    model.predict = spy
    greedy = translation.decode_corpus(model, ids, decoding="greedy")
    direct = model.decode(ids, beam_width=1)
    np.testing.assert_array_equal(
        greedy[0], keras.ops.convert_to_numpy(direct.tokens)
    )
    beam = translation.decode_corpus(model, ids, length_penalty=2.0)
    # The settings reach the compiled decoder, and are restored after.
    assert seen == [(1, 0.0), (3, 2.0)]
    assert (model.beam_width, model.length_penalty) == (3, 0.0)
    # The compiled, batched path and the eager one find the same beams.
    eager = model.decode(ids, beam_width=3, length_penalty=2.0)
    np.testing.assert_array_equal(
        beam[0], keras.ops.convert_to_numpy(eager.tokens)
    )
    np.testing.assert_allclose(
        beam[1], keras.ops.convert_to_numpy(eager.scores), atol=1e-4
    )


def test_alignment_accuracy_counts_argmax_on_gold_source_word():
    class Oracle:
        """Teacher forcing that attends to given positions."""

        def __init__(self, shift):
            self.shift = shift

        def vectorize_sources(self, texts):
            return np.ones((len(texts), 15), "int32")

        def vectorize_targets(self, texts):
            return np.ones((len(texts), 17), "int32")

        def teacher_forcing(self, source, target_in, training=False):
            weights = np.zeros((len(source), target_in.shape[1], 15))
            for i, gold in enumerate(self.gold):
                for j, position in enumerate(gold):
                    weights[i, j, (position + self.shift) % len(gold)] = 1
            return None, weights

    data = make_synthetic_translation(10, seed=2)
    exact, shifted = Oracle(0), Oracle(1)
    exact.gold = shifted.gold = data.alignments
    assert translation.alignment_accuracy(exact, data) == 1.0
    assert translation.alignment_accuracy(shifted, data) == 0.0


def test_corpus_bleu_is_100_for_identical_and_case_insensitive_by_default():
    refs = ["a dog runs in the park.", "two cats sleep on a red sofa."]
    assert translation.corpus_bleu(refs, refs) == pytest.approx(100.0)
    upper = [r.capitalize() for r in refs]
    assert translation.corpus_bleu(upper, refs) == pytest.approx(100.0)


def test_make_dataset_trims_batches_and_shifts_targets():
    model = _model()
    dataset = translation.make_dataset(model, DATA, batch_size=8)
    (source, target_in), target_out = next(iter(dataset))
    source, target_in, target_out = (
        np.asarray(source),
        np.asarray(target_in),
        np.asarray(target_out),
    )
    assert np.any(source[:, -1] != 0)
    start = model.target_vocabulary.index("[start]")
    assert np.all(target_in[:, 0] == start)
    np.testing.assert_array_equal(target_in[:, 1:], target_out[:, :-1])


def test_decode_corpus_invalid_beam_width_or_decoding_raises():
    model = _model()
    with pytest.raises(ValueError, match="beam_width=0"):
        translation.decode_corpus(model, np.ones((1, 2), "int32"), 0)
    with pytest.raises(ValueError, match="decoding='sample'"):
        translation.decode_corpus(
            model, np.ones((1, 2), "int32"), decoding="sample"
        )


def test_alignment_accuracy_without_gold_raises():
    with pytest.raises(ValueError, match="needs gold alignments"):
        translation.alignment_accuracy(_model(), ParallelCorpus(["a"], ["b"]))
