"""`AttentionDecoder`: an `AttentionDecoderCell` over a target sequence.

Teacher-forced decoding through `keras.layers.RNN`, whose initial state
carries the memory (see `keras_attention.seq2seq.state`), with the
alignment history as a second output. `_AlignmentOutputCell` is the
adapter that lets `RNN` emit the alignments and masks padded steps.
"""

import keras
from keras import ops

from keras_attention.seq2seq import checks
from keras_attention.seq2seq.cell import AttentionDecoderCell

_PACKAGE = "keras_attention"


class _AlignmentOutputCell(keras.layers.Layer):
    """Lets `keras.layers.RNN` emit the alignments, and masks the steps.

    `RNN` returns one output tensor per step, so this adapter concatenates
    `α_t` to the decoder cell's output; `AttentionDecoder` splits them.

    The target mask comes in as the last feature of each step input (`1.0`
    keep, `0.0` padding) instead of through `RNN(mask=...)`: Keras's JAX
    `rnn` (3.15) broadcasts a `(batch_size, 1)` step mask against every
    state, which fails for the rank-3 memory state. A padded step emits
    zeros and leaves every state unchanged, as `RNN` does with a mask and
    `zero_output_for_mask=True`.
    """

    def __init__(self, cell, **kwargs):
        super().__init__(**kwargs)
        self.cell = cell

    @property
    def state_size(self):
        return self.cell.state_size

    @property
    def output_size(self):
        return self.cell.output_size

    def build(self, inputs_shape, states_shape=None):
        if not self.cell.built:
            cell_inputs_shape = (inputs_shape[0], inputs_shape[-1] - 1)
            self.cell.build(cell_inputs_shape, states_shape)
        self.built = True

    def call(self, inputs, states, training=None):
        keep = ops.greater(inputs[:, -1:], 0.5)
        states = list(states)
        output, new_states = self.cell(
            inputs[:, :-1], states, training=training
        )
        alignments = self.cell.state_layout.alignments(new_states)
        packed = ops.concatenate(
            [output, ops.cast(alignments, output.dtype)], axis=-1
        )
        packed = ops.cast(packed, self.compute_dtype)
        packed = ops.where(keep, packed, ops.zeros_like(packed))
        # The states go back in the dtypes they came in (JAX's `scan` wants
        # the same carry types), also when the cell's dtype policy is not
        # the decoder's, e.g. a float32 cell in a mixed-precision decoder.
        kept_states = []
        for new, old in zip(new_states, states, strict=True):
            if new is old:
                # A constant (keys, memory, mask) goes on as the same
                # tensor: TensorFlow's loop then treats it as invariant
                # and keeps no copy of it per step for the gradient.
                kept_states.append(old)
                continue
            step_keep = ops.reshape(keep, (-1,) + (1,) * (len(old.shape) - 1))
            kept_states.append(
                ops.where(step_keep, ops.cast(new, old.dtype), old)
            )
        return packed, kept_states


@keras.saving.register_keras_serializable(package=_PACKAGE)
class AttentionDecoder(keras.layers.Layer):
    """Runs an `AttentionDecoderCell` over a target sequence (teacher forcing).

    For each step `t` of `inputs` (the embedded target shifted right,
    `y_0 = <start>, y_1, ...`) the cell computes `h_t`, the context
    `c_t = Σ_s α_ts h̄_s` and the attention vector `a_t` (see
    `AttentionDecoderCell`). The loop is a `keras.layers.RNN` whose initial
    state carries the memory, so target padding (the Keras mask of
    `inputs`) works as in any Keras RNN: padded steps emit zeros and leave
    the state unchanged.

    Args:
        cell: An `AttentionDecoderCell`.
        return_alignments: Whether to also return the alignment history.
            Defaults to `False`.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        inputs: `(batch_size, target_time, input_depth)`.
        memory: The encoder outputs `(batch_size, source_time, depth)`.
        memory_mask: Optional boolean `(batch_size, source_time)`. Taken
            from `memory`'s Keras mask when not given.
        initial_state: Optional initial state of the wrapped cell (a tensor
            or a list). Defaults to zeros.
        inputs_mask: Optional boolean `(batch_size, target_time)`, `False`
            on target padding. Taken from `inputs`' Keras mask when not
            given.
        training: Passed to the cell.

    Returns:
        The outputs `(batch_size, target_time, output_size)` and, with
        `return_alignments=True`, the weights `(batch_size, target_time,
        source_time)` (row `t` is `α_t`, zero on padded source positions).

    Example:

    >>> cell = keras_attention.seq2seq.AttentionDecoderCell(
    ...     keras.layers.GRUCell(8),
    ...     keras_attention.seq2seq.LuongAttention("dot"),
    ...     attention_layer_units=8,
    ... )
    >>> decoder = keras_attention.seq2seq.AttentionDecoder(
    ...     cell, return_alignments=True
    ... )
    >>> targets = np.random.rand(2, 3, 4).astype("float32")
    >>> memory = np.random.rand(2, 5, 8).astype("float32")
    >>> outputs, alignments = decoder(targets, memory)
    >>> tuple(outputs.shape), tuple(alignments.shape)
    ((2, 3, 8), (2, 3, 5))

    References:
        - [Bahdanau et al., 2014](https://arxiv.org/abs/1409.0473)
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
    """

    def __init__(self, cell, return_alignments=False, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(cell, AttentionDecoderCell):
            raise ValueError(
                "Received an invalid value for argument `cell`, expected an "
                f"AttentionDecoderCell. Received: cell={cell!r}"
            )
        if not isinstance(return_alignments, bool):
            raise ValueError(
                "Received an invalid value for argument `return_alignments`"
                f", expected a bool. Received: return_alignments="
                f"{return_alignments!r}"
            )
        self.cell = cell
        self.return_alignments = return_alignments
        self.supports_masking = True
        self._rnn = keras.layers.RNN(
            _AlignmentOutputCell(cell, dtype=self.dtype_policy),
            return_sequences=True,
            dtype=self.dtype_policy,
        )

    def _check_shapes(self, inputs_shape, memory_shape):
        if len(inputs_shape) != 3 or len(memory_shape) != 3:
            raise ValueError(
                "AttentionDecoder expects `inputs` of shape `(batch_size, "
                "target_time, depth)` and `memory` of shape `(batch_size, "
                "source_time, depth)`. Received: "
                f"inputs.shape={tuple(inputs_shape)}, "
                f"memory.shape={tuple(memory_shape)}"
            )
        checks.same_batch("AttentionDecoder", inputs_shape, memory_shape)

    def build(self, inputs_shape, memory_shape):
        self._check_shapes(inputs_shape, memory_shape)
        if not self.cell.built:
            states_shape = self.cell.state_layout.build_shapes(memory_shape)
            self.cell.build(
                (inputs_shape[0], inputs_shape[-1]), states_shape=states_shape
            )
        self.built = True

    def call(
        self,
        inputs,
        memory,
        inputs_mask=None,
        memory_mask=None,
        initial_state=None,
        training=None,
    ):
        checks.floating(type(self).__name__, inputs=inputs)
        self._check_shapes(inputs.shape, memory.shape)
        states = self.cell.get_initial_state(
            memory=memory, memory_mask=memory_mask, cell_state=initial_state
        )
        if inputs_mask is None:
            keep = ops.ones_like(inputs[..., :1])
        else:
            keep = ops.expand_dims(
                ops.cast(ops.cast(inputs_mask, "bool"), inputs.dtype), -1
            )
        packed = self._rnn(
            ops.concatenate([inputs, keep], axis=-1),
            initial_state=states,
            training=training,
        )
        depth = self.cell.output_size
        outputs = packed[..., :depth]
        if not self.return_alignments:
            return outputs
        return outputs, packed[..., depth:]

    def compute_mask(self, inputs, previous_mask=None):
        if self.return_alignments:
            return [previous_mask, previous_mask]
        return previous_mask

    def compute_output_shape(self, inputs_shape, memory_shape):
        self._check_shapes(inputs_shape, memory_shape)
        if self.cell.output_size is None:
            self.build(inputs_shape, memory_shape)
        steps = (inputs_shape[0], inputs_shape[1])
        outputs_shape = steps + (self.cell.output_size,)
        if not self.return_alignments:
            return outputs_shape
        return outputs_shape, steps + (memory_shape[1],)

    def compute_output_spec(
        self,
        inputs,
        memory,
        inputs_mask=None,
        memory_mask=None,
        initial_state=None,
        training=None,
    ):
        shapes = self.compute_output_shape(inputs.shape, memory.shape)
        dtype = self.compute_dtype
        if not self.return_alignments:
            return keras.KerasTensor(shapes, dtype=dtype)
        return tuple(keras.KerasTensor(s, dtype=dtype) for s in shapes)

    def get_config(self):
        return {
            **super().get_config(),
            "cell": keras.saving.serialize_keras_object(self.cell),
            "return_alignments": self.return_alignments,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["cell"] = keras.saving.deserialize_keras_object(config["cell"])
        return cls(**config)
