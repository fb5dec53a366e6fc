"""Scheduled sampling for training (Bengio et al., 2015).

Teacher forcing feeds the gold previous token `y_{t-1}` at every step; at
test time the decoder reads its own predictions. Scheduled sampling feeds,
at each training step and for each sequence, the model's own sample
`ŷ_{t-1} ~ p(· | ŷ_{<t-1}, x)` with probability `p` instead of the gold
token, `p` growing from 0 during training by a schedule. No gradient
flows through the sampling decision, as in the paper.

`ScheduledSamplingDecoder` is the training loop (tfa's
`ScheduledEmbeddingTrainingSampler` + `BasicDecoder`);
`ScheduledSampling` is the callback that sets `p` from a schedule, and
`inverse_sigmoid_decay`, `exponential_decay` and `linear_decay` are the
paper's three schedules (of the teacher-forcing probability
`ε_i`; the sampling probability is `1 − ε_i`).
"""

import math

import keras
from keras import ops

from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention.seq2seq import checks
from keras_attention.seq2seq.cell import AttentionDecoderCell

_PACKAGE = "keras_attention"


def inverse_sigmoid_decay(k):
    """`p(i) = 1 − k / (k + exp(i / k))` at training step `i` (`k ≥ 1`).

    Example:

    >>> schedule = keras_attention.seq2seq.inverse_sigmoid_decay(1)
    >>> [round(schedule(step), 3) for step in (0, 1, 5)]
    [0.5, 0.731, 0.993]
    """
    if isinstance(k, bool) or not isinstance(k, (int, float)) or k < 1:
        raise ValueError(
            "Received an invalid value for argument `k`, expected a number "
            f">= 1. Received: k={k!r}"
        )
    return lambda step: 1.0 - k / (k + math.exp(min(step / k, 700.0)))


def exponential_decay(k):
    """`p(i) = 1 − k ** i` at training step `i` (`0 < k < 1`).

    Example:

    >>> schedule = keras_attention.seq2seq.exponential_decay(0.5)
    >>> [schedule(step) for step in (0, 1, 2)]
    [0.0, 0.5, 0.75]
    """
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 < k < 1:
        raise ValueError(
            "Received an invalid value for argument `k`, expected a number "
            f"in (0, 1). Received: k={k!r}"
        )
    return lambda step: 1.0 - k**step


def linear_decay(c, k=1.0, minimum=0.0):
    """`p(i) = 1 − max(minimum, k − c i)` at training step `i`.

    Example:

    >>> schedule = keras_attention.seq2seq.linear_decay(0.25)
    >>> [schedule(step) for step in (0, 1, 2, 8)]
    [0.0, 0.25, 0.5, 1.0]
    """
    return lambda step: 1.0 - max(minimum, k - c * step)


class _ScheduledStepCell(keras.layers.Layer):
    """One step: pick the gold or the sampled token, embed it, decode it.

    Step inputs: `[gold_id, use_sample (0/1), uniform]`; states: the
    decoder cell's, then the previous step's logits.
    """

    def __init__(self, cell, embedding, output_layer, vocabulary, **kwargs):
        super().__init__(**kwargs)
        self.cell = cell
        self.embedding = embedding
        self.output_layer = output_layer
        self.vocabulary = vocabulary

    @property
    def state_size(self):
        return [*self.cell.state_size, self.vocabulary]

    @property
    def output_size(self):
        return self.vocabulary

    def build(self, inputs_shape, states_shape=None):
        self.built = True

    def call(self, inputs, states, training=None):
        *states, previous_logits = states
        gold = ops.cast(ops.round(inputs[:, 0]), "int32")
        sampled = ka_ops.inverse_cdf_sample(
            ops.stop_gradient(ops.cast(previous_logits, "float32")),
            ops.cast(inputs[:, 2], "float32"),
        )
        token = ops.where(inputs[:, 1] > 0.5, sampled, gold)
        output, new_states = self.cell(
            self.embedding(token), states, training=training
        )
        logits = ops.cast(self.output_layer(output), "float32")
        new_states = [
            ops.cast(new, old.dtype)
            for new, old in zip(new_states, states, strict=True)
        ]
        return logits, [*new_states, ops.cast(logits, previous_logits.dtype)]


@keras.saving.register_keras_serializable(package=_PACKAGE)
class ScheduledSamplingDecoder(keras.layers.Layer):
    """Teacher forcing with scheduled sampling (Bengio et al., 2015).

    For each target step `t ≥ 1` and each sequence, the step input is the
    embedding of the gold token `y_{t-1}` with probability `1 − p`, else of
    a token sampled from the model's previous output distribution
    (`p = sampling_probability`, in training only; at inference the layer
    is plain teacher forcing). Step 0 always reads the gold start token.
    The random numbers are drawn before the loop, so it runs in a compiled
    training step on every backend.

    Args:
        cell: An `AttentionDecoderCell`.
        embedding: The target embedding layer (token ids → step inputs).
        output_layer: The layer mapping the cell output to logits.
        sampling_probability: Initial `p`, a float in `[0, 1]`; a
            non-trainable weight, set during training by the
            `ScheduledSampling` callback. Defaults to `0.0`.
        seed: Seed of the sampling. Defaults to `None`.
        **kwargs: Base layer keyword arguments, e.g. `name`.

    Call arguments:
        target_input_ids: `(batch_size, target_time)` ids starting with the
            start token (right-padded).
        memory: The encoder outputs `(batch_size, source_time, depth)`.
        memory_mask: Optional boolean `(batch_size, source_time)`.
        initial_state: Optional initial state of the wrapped cell.
        training: Whether to sample.

    Returns:
        Logits `(batch_size, target_time, vocabulary_size)` in `float32`.

    Example:

    >>> cell = keras_attention.seq2seq.AttentionDecoderCell(
    ...     keras.layers.GRUCell(8), keras_attention.seq2seq.BahdanauAttention()
    ... )
    >>> decoder = keras_attention.seq2seq.ScheduledSamplingDecoder(
    ...     cell,
    ...     keras.layers.Embedding(10, 4),
    ...     keras.layers.Dense(10),
    ...     sampling_probability=0.25,
    ...     seed=0,
    ... )
    >>> ids = np.array([[1, 5, 6], [1, 7, 0]])
    >>> memory = np.random.rand(2, 5, 6).astype("float32")
    >>> tuple(decoder(ids, memory, training=True).shape)
    (2, 3, 10)

    References:
        - [Bengio et al., 2015](https://arxiv.org/abs/1506.03099)
    """

    def __init__(
        self,
        cell,
        embedding,
        output_layer,
        sampling_probability=0.0,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(cell, AttentionDecoderCell):
            raise ValueError(
                "Received an invalid value for argument `cell`, expected an "
                f"AttentionDecoderCell. Received: cell={cell!r}"
            )
        _check_probability(sampling_probability)
        self.cell = cell
        self.embedding = _validation.layer_or_callable("embedding", embedding)
        self.output_layer = _validation.layer_or_callable(
            "output_layer", output_layer
        )
        self.seed = _validation.seed("seed", seed)
        self.seed_generator = keras.random.SeedGenerator(seed)
        self._initial_probability = float(sampling_probability)
        self.sampling_probability = self.add_weight(
            name="sampling_probability",
            shape=(),
            initializer=keras.initializers.Constant(sampling_probability),
            trainable=False,
            dtype="float32",
        )
        self._rnn = None

    def _check_inputs(self, target_input_ids, memory):
        name = type(self).__name__
        size = checks.vocabulary_size(self.embedding, self.output_layer)
        checks.token_id_inputs(name, "target_input_ids", target_input_ids, size)
        checks.batch_sizes(
            name,
            target_input_ids=tuple(target_input_ids.shape),
            memory=tuple(memory.shape),
        )

    def build(self, target_input_ids_shape, memory_shape):
        if not self.embedding.built:
            self.embedding.build((None,))
        if not self.cell.built:
            # As `AttentionDecoder` builds it: the memory shape is recorded
            # in the cell's build config, so a loaded cell builds too.
            depth = self.embedding.compute_output_shape((None,))[-1]
            states_shape = self.cell.state_layout.build_shapes(memory_shape)
            self.cell.build((None, depth), states_shape=states_shape)
        if not self.output_layer.built:
            self.output_layer.build((None, self.cell.output_size))
        vocabulary = self.output_layer.compute_output_shape(
            (None, self.cell.output_size)
        )[-1]
        self._rnn = keras.layers.RNN(
            _ScheduledStepCell(
                self.cell, self.embedding, self.output_layer, vocabulary
            ),
            return_sequences=True,
            dtype="float32",
        )
        self.built = True

    def call(
        self,
        target_input_ids,
        memory,
        memory_mask=None,
        initial_state=None,
        training=None,
    ):
        self._check_inputs(target_input_ids, memory)
        states = self.cell.get_initial_state(
            memory=memory, memory_mask=memory_mask, cell_state=initial_state
        )
        ids = ops.cast(target_input_ids, "float32")
        shape = ops.shape(ids)
        if training:
            draw = keras.random.uniform(shape, seed=self.seed_generator)
            use = ops.cast(draw < self.sampling_probability, "float32")
            # Step 0 reads the start token.
            first = ops.equal(ops.arange(shape[1]), 0)[None, :]
            use = ops.where(first, 0.0, use)
            uniform = keras.random.uniform(shape, seed=self.seed_generator)
        else:
            use = uniform = ops.zeros_like(ids)
        inputs = ops.stack([ids, use, uniform], axis=-1)
        previous = ops.zeros(
            (shape[0], self._rnn.cell.vocabulary), dtype="float32"
        )
        return self._rnn(
            inputs, initial_state=[*states, previous], training=training
        )

    def compute_output_spec(self, target_input_ids, memory, **kwargs):
        if not self.built:
            self.build(target_input_ids.shape, memory.shape)
        shape = tuple(target_input_ids.shape) + (self._rnn.cell.vocabulary,)
        return keras.KerasTensor(shape, dtype="float32")

    def get_config(self):
        return {
            **super().get_config(),
            "cell": keras.saving.serialize_keras_object(self.cell),
            "embedding": keras.saving.serialize_keras_object(self.embedding),
            "output_layer": keras.saving.serialize_keras_object(
                self.output_layer
            ),
            "sampling_probability": self._initial_probability,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("cell", "embedding", "output_layer"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


def _check_probability(value):
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 <= value <= 1
    ):
        raise ValueError(
            "Received an invalid value for argument `sampling_probability`, "
            f"expected a float in [0, 1]. Received: "
            f"sampling_probability={value!r}"
        )


class ScheduledSampling(keras.callbacks.Callback):
    """Sets the sampling probability of the model's scheduled decoders.

    Before each training batch, every `ScheduledSamplingDecoder` of the
    model gets `sampling_probability = schedule(step)`, `step` counting
    the batches trained since the callback was created.

    Args:
        schedule: Callable mapping the step (an `int`) to a probability,
            e.g. `inverse_sigmoid_decay(100)`.

    Example:

    >>> schedule = keras_attention.seq2seq.inverse_sigmoid_decay(10)
    >>> callback = keras_attention.seq2seq.ScheduledSampling(schedule)
    >>> round(schedule(0), 3), round(schedule(50), 3)
    (0.091, 0.937)

    References:
        - [Bengio et al., 2015](https://arxiv.org/abs/1506.03099)
    """

    def __init__(self, schedule):
        super().__init__()
        if not callable(schedule):
            raise ValueError(
                "Received an invalid value for argument `schedule`, "
                "expected a callable mapping the step to a probability. "
                f"Received: schedule={schedule!r}"
            )
        self.schedule = schedule
        self.step = 0

    def on_train_batch_begin(self, batch, logs=None):
        probability = min(max(float(self.schedule(self.step)), 0.0), 1.0)
        for layer in _scheduled_decoders(self.model):
            layer.sampling_probability.assign(probability)
        self.step += 1


def _scheduled_decoders(model):
    """The `ScheduledSamplingDecoder`s of a model and its nested models."""
    found, pending = [], [model]
    while pending:
        layer = pending.pop()
        if isinstance(layer, ScheduledSamplingDecoder):
            found.append(layer)
        pending.extend(getattr(layer, "layers", []))
    return found
