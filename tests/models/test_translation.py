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


def test_decode_corpus_beam_width_one_equals_greedy_predict():
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


def test_unknown_strategy_raises():
    with pytest.raises(ValueError, match="distribute='tpu'"):
        translation.get_strategy("tpu")


def test_smoothed_loss_matches_numpy_and_ignores_padding():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype("float32")
    labels = np.array([[2, 4, 0], [1, 0, 0]])
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    gold = np.take_along_axis(log_p, labels[..., None], -1)[..., 0]
    mask = labels != 0
    for eps in (0.0, 0.1):
        per_token = -(1 - eps) * gold - eps * log_p.mean(-1)
        expected = per_token[mask].mean()
        loss = translation.SmoothedSequenceLoss(eps)(labels, logits)
        np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    plain = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, ignore_class=0
    )(labels, logits)
    np.testing.assert_allclose(float(plain), -gold[mask].mean(), rtol=1e-5)
    with pytest.raises(ValueError, match="label_smoothing=1.0"):
        translation.SmoothedSequenceLoss(1.0)


def test_learning_rate_schedules_and_time_limit_anneal():
    rate = translation.learning_rate_schedule(1e-2, "cosine", 10)
    assert float(rate(0)) == pytest.approx(1e-2)
    assert float(rate(10)) == pytest.approx(5e-4)
    assert translation.learning_rate_schedule(1e-2, "constant", 10) == 1e-2
    with pytest.raises(ValueError, match="schedule='linear'"):
        translation.learning_rate_schedule(1e-2, "linear", 10)

    class Stub:
        optimizer = keras.optimizers.Adam(1e-2)
        stop_training = False
        synced = 0

        def jax_state_sync(self):
            self.synced += 1

    stub = Stub()
    limit = translation.TimeLimit(minutes=1e-9, anneal=True)
    limit.set_model(stub)
    limit.on_train_begin()
    limit.on_train_batch_end(0)
    # Past the budget: stopped, at 1/20 of the first rate.
    assert stub.stop_training and limit.stopped
    assert float(stub.optimizer.learning_rate) == pytest.approx(5e-4)
    # The training state is written back before the rate changes (on JAX
    # Keras's `Callback.model` also does it, at each access).
    assert stub.synced >= 1


def test_postprocess_replaces_unknowns_recases_and_joins_hyphens():
    table = translation.build_truecaser(
        ["A man in a T-shirt sees Paris.", "Paris is big.", "A dog."]
    )
    assert table["paris"] == "Paris" and table["a"] == "a"
    words = ["a", "man", "[UNK]", "a", "t", "-", "shirt", "in", "paris", "."]
    source = "Ein Mann namens Jörg im T-Shirt in Paris."
    weights = np.zeros((len(words), 12))
    weights[2, 2] = 1.0  # [UNK] attends to "namens"
    weights[2, 3] = 2.0  # ... and most to "Jörg"
    text = translation.postprocess(words, source, weights, table)
    assert text == "A man Jörg a T-shirt in Paris."
    assert translation.postprocess(words[:2], "", [], None) == "a man"
    hypotheses, references = ["a man in paris."], ["A man in Paris."]
    assert translation.corpus_bleu(hypotheses, references) == pytest.approx(
        100.0
    )
    cased = translation.corpus_bleu(hypotheses, references, lowercase=False)
    assert cased < 100.0
