"""seq2seq/scheduled.py: scheduled sampling (Bengio et al., 2015).

The decoder at its two extremes (teacher forcing and greedy decoding on its
own outputs), the decay schedules and the callback that sets the
probability. The small decoder and its teacher-forced reference are
test_sampling.py's.
"""

import keras
import numpy as np

from keras_attention import seq2seq
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import to_numpy
from tests.seq2seq.test_sampling import MEMORY
from tests.seq2seq.test_sampling import VOCAB
from tests.seq2seq.test_sampling import _model
from tests.seq2seq.test_sampling import _teacher_forced


def test_scheduled_sampling_extremes():
    # Large logits: the sample is the arg max, so p = 1 is greedy decoding.
    cell, embedding, output_layer = _model(scale=30.0)
    decoder = seq2seq.ScheduledSamplingDecoder(
        cell, embedding, output_layer, seed=0
    )
    ids = np.array([[1, 3, 4, 5]] * 3)
    forced = _teacher_forced(cell, embedding, output_layer, ids)
    assert_allclose(decoder(ids, MEMORY, training=True), forced, atol=1e-5)
    decoder.sampling_probability.assign(1.0)
    assert_allclose(decoder(ids, MEMORY), forced, atol=1e-5)
    # An end token the greedy decoding never emits here, so that it runs
    # all 3 steps (an id outside the vocabulary, such as -1, is a
    # ValueError); which one depends on the backend's initial weights.
    for end_token in range(2, VOCAB):
        greedy = seq2seq.greedy_decode(
            cell, MEMORY, embedding, output_layer, 1, end_token, 3
        )
        if to_numpy(greedy.lengths).tolist() == [3, 3, 3]:
            break
    assert to_numpy(greedy.lengths).tolist() == [3, 3, 3]
    greedy = to_numpy(greedy.tokens)
    own = np.concatenate([np.ones((3, 1), "int64"), greedy], axis=1)
    assert_allclose(
        decoder(ids, MEMORY, training=True),
        _teacher_forced(cell, embedding, output_layer, own),
        atol=1e-4,
    )


def test_schedules_and_callback():
    assert_allclose(
        [seq2seq.inverse_sigmoid_decay(10)(i) for i in (0, 50)],
        [1 - 10 / (10 + np.exp(0)), 1 - 10 / (10 + np.exp(5))],
    )
    assert_allclose(seq2seq.exponential_decay(0.9)(3), 1 - 0.9**3)
    assert_allclose(seq2seq.linear_decay(0.1, minimum=0.2)(20), 0.8)
    cell, embedding, output_layer = _model()
    decoder = seq2seq.ScheduledSamplingDecoder(cell, embedding, output_layer)
    ids, memory = keras.Input((None,), dtype="int32"), keras.Input((4, 5))
    model = keras.Model([ids, memory], decoder(ids, memory))
    callback = seq2seq.ScheduledSampling(lambda step: 0.1 * step)
    callback.set_model(model)
    for _ in range(3):
        callback.on_train_batch_begin(0)
    assert_allclose(decoder.sampling_probability, 0.2, atol=1e-7)
    restored = seq2seq.ScheduledSamplingDecoder.from_config(
        decoder.get_config()
    )
    assert restored.seed is None and isinstance(restored.cell, type(cell))
