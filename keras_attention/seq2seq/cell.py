"""An RNN cell with attention over an encoder memory, and its sequence layer.

`AttentionDecoderCell` wraps any Keras RNN cell (`GRUCell`, `LSTMCell`, ...)
the way tfa's `AttentionWrapper` did. Keras 3's `keras.layers.RNN` has no
`constants` argument, so the encoder memory and its mask travel as extra,
never-changing states: `cell.get_initial_state(memory=..., memory_mask=...)`
returns the full state list, which is what `keras.layers.RNN` takes as
`initial_state`. `AttentionDecoder` does this inside a layer and also
returns the alignment history.
"""

import keras
from keras import ops

from keras_attention import _policies
from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention.seq2seq import checks
from keras_attention.seq2seq import monotonic
from keras_attention.seq2seq import probability
from keras_attention.seq2seq.attention import AttentionMechanism
from keras_attention.seq2seq.attention import check_memory_mask

_PACKAGE = "keras_attention"


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def compute_attention(
    mechanism,
    cell_output,
    memory,
    memory_mask,
    previous_alignments,
    attention_layer,
    **kwargs,
):
    """One mechanism's attention vector: the default `attention_fn`.

    tfa's `_compute_attention`: `c_t, α_t = mechanism(h_t, memory)`, then
    `a_t = attention_layer([c_t; h_t])` (or `a_t = c_t` without a layer).
    A custom `attention_fn` of `AttentionDecoderCell` has this signature
    and usually calls this function.

    Args:
        mechanism: The attention mechanism.
        cell_output: `h_t`, `(batch_size, cell_output_size)`.
        memory: `(batch_size, source_time, depth)`.
        memory_mask: Boolean `(batch_size, source_time)`.
        previous_alignments: The mechanism's `α_{t-1}` `(batch_size,
            source_time)` (used by the monotonic mechanisms).
        attention_layer: The mechanism's attentional layer, or `None`.
        **kwargs: Passed to the mechanism (`training`, and `noise` for a
            monotonic mechanism with sigmoid noise).

    Returns:
        `(attention, alignments)`: `a_t` `(batch_size, attention_depth)`
        and `α_t` `(batch_size, source_time)`.
    """
    context, alignments = mechanism(
        cell_output,
        memory,
        memory_mask=memory_mask,
        previous_alignments=previous_alignments,
        **kwargs,
    )
    if attention_layer is not None:
        context = attention_layer(
            ops.concatenate(
                [context, ops.cast(cell_output, context.dtype)], axis=-1
            )
        )
    return context, alignments


@keras.saving.register_keras_serializable(package=_PACKAGE)
class AttentionDecoderCell(keras.layers.Layer):
    """Decoder RNN cell with input feeding and attention over a memory.

    One step, as in Luong et al. (2015) with input feeding and tfa's
    `AttentionWrapper`:

    - `h_t, s_t = g([y_{t-1}; a_{t-1}], s_{t-1})`: the wrapped cell reads
      the previous target embedding concatenated with the previous
      attention vector (input feeding);
    - `c_t, α_t = attention(h_t, memory)`: the context is recomputed from
      the new cell output at every step;
    - `a_t = tanh(W_c [c_t; h_t])` with `attention_layer_units`, else
      `a_t = c_t` (so `s_t = g(y_{t-1}, c_{t-1}, s_{t-1})`, the seeds'
      machine-translation decoder);
    - the step emits `a_t` (`output_attention=True`) or `h_t`.

    The states are the list `[*cell_states, attention, *alignments,
    *keys, memory, memory_mask]`: the wrapped cell's states, `a_t`
    `(batch_size, attention_depth)`, each mechanism's `α_t` `(batch_size,
    source_time)`, the keys (below), and the memory `(batch_size,
    source_time, depth)` with its mask `(batch_size, source_time)`
    (stored as `0.0`/`1.0` in the compute dtype because
    `keras.layers.RNN` casts every state to it), which every step passes
    on unchanged. The keys are tfa's: the memory through the score's
    memory-side projection (`W_k h̄_s` of Bahdanau's score, the memory
    half of Luong's concat score), `(batch_size, source_time, units)`,
    one per mechanism that has one (`keyed_mechanisms`, at
    `keys_indices`), computed once by `get_initial_state` instead of at
    every step; Luong's dot, general and location scores have none. A
    list without them (the layout before they were added) still works:
    the mechanisms then project the memory at each step. A cell with a
    monotonic mechanism with `sigmoid_noise > 0` has one more state
    before the keys, at `noise_seed_index`: `(batch_size, 3)`, the seed
    of the noise (drawn by `get_initial_state`, outside the loop) and a
    step count, so the noise is drawn statelessly in any loop on every
    backend.
    `get_initial_state(memory=...)` makes the list; pass it as
    `initial_state` to `keras.layers.RNN(cell, return_sequences=True)` to
    run teacher-forced over a target sequence (the memory must be known,
    and the cell built, before `RNN` is constructed, so call
    `get_initial_state` first). For the alignment history use
    `keras_attention.seq2seq.AttentionDecoder`, or the decoders
    `greedy_decode` and `beam_search_decode`. For padded targets use
    `AttentionDecoder` too: on JAX, `keras.layers.RNN(mask=...)` (Keras
    3.15) cannot mask a cell whose memory state has rank 3, while
    `AttentionDecoder` masks the steps itself on every backend.

    Args:
        cell: A Keras RNN cell instance (it has `state_size` and
            `call(inputs, states)`), e.g. `keras.layers.GRUCell(64)`.
        attention: A `keras_attention.seq2seq` attention mechanism, e.g.
            `BahdanauAttention(64)` or `LuongAttention("general")`.
        attention_layer_units: Size of Luong's attentional layer
            `tanh(W_c [c_t; h_t])` (no bias). Defaults to `None`: no layer,
            the attention vector is the context.
        output_attention: Whether a step emits the attention vector `a_t`
            (`True`) or the wrapped cell's output `h_t`. Defaults to `True`.
        attention_layer: Instead of `attention_layer_units`, a Keras layer
            (or a list, one per mechanism) applied to `[c_t; h_t]`.
            Defaults to `None`.
        cell_input_fn: A callable `(inputs, attention) -> cell_inputs`
            replacing input feeding `[y_{t-1}; a_{t-1}]`. Defaults to
            `None`.
        attention_fn: A callable with the signature of
            `keras_attention.seq2seq.compute_attention` (the default):
            `(mechanism, cell_output, memory, memory_mask,
            previous_alignments, attention_layer, **kwargs) ->
            (attention, alignments)`, called once per mechanism; the
            attention vectors are concatenated. Defaults to `None`. A
            callable (here and for `cell_input_fn`) must be registered
            with `keras.saving.register_keras_serializable` to be saved.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        inputs: The step input `y_{t-1}`, `(batch_size, input_depth)`.
        states: The state list described above.
        training: Passed to the wrapped cell.

    Returns:
        `(output, new_states)`: the output `(batch_size, output_size)` and
        the new state list; `new_states[cell.alignments_index]` holds `α_t`.

    Example:

    >>> cell = keras_attention.seq2seq.AttentionDecoderCell(
    ...     keras.layers.GRUCell(8),
    ...     keras_attention.seq2seq.BahdanauAttention(8),
    ...     attention_layer_units=8,
    ... )
    >>> memory = np.random.rand(2, 5, 6).astype("float32")
    >>> states = cell.get_initial_state(memory=memory)
    >>> rnn = keras.layers.RNN(cell, return_sequences=True)
    >>> targets = np.random.rand(2, 3, 4).astype("float32")
    >>> tuple(rnn(targets, initial_state=states).shape)
    (2, 3, 8)

    References:
        - [Bahdanau et al., 2014](https://arxiv.org/abs/1409.0473)
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
    """

    def __init__(
        self,
        cell,
        attention,
        attention_layer_units=None,
        output_attention=True,
        attention_layer=None,
        cell_input_fn=None,
        attention_fn=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not hasattr(cell, "state_size") or not callable(cell):
            raise ValueError(
                "Received an invalid value for argument `cell`, expected a "
                "Keras RNN cell with a `state_size` attribute, such as "
                f"`keras.layers.GRUCell`. Received: cell={cell!r}"
            )
        mechanisms = _as_list(attention)
        if not mechanisms or not all(
            isinstance(m, AttentionMechanism) for m in mechanisms
        ):
            raise ValueError(
                "Received an invalid value for argument `attention`, "
                "expected a keras_attention.seq2seq attention mechanism "
                "(BahdanauAttention or LuongAttention) or a list of them. "
                f"Received: attention={attention!r}"
            )
        if not isinstance(output_attention, bool):
            raise ValueError(
                "Received an invalid value for argument `output_attention`, "
                f"expected a bool. Received: output_attention="
                f"{output_attention!r}"
            )
        self.cell = cell
        self.attention = attention
        self.mechanisms = mechanisms
        self.output_attention = output_attention
        self.attention_layer_units = attention_layer_units
        self.attention_layers = self._attention_layers(
            attention_layer_units, attention_layer
        )
        self.cell_input_fn = _check_callable(
            "cell_input_fn",
            cell_input_fn,
            "`(inputs, attention) -> cell_inputs`",
        )
        self.attention_fn = _check_callable(
            "attention_fn",
            attention_fn,
            "with the signature of `keras_attention.seq2seq.compute_attention`",
        )
        self._attention_fn_depth = None
        self._memory_depth = None
        self._cell_input_depth = None
        # Step inputs often come from `Embedding(mask_zero=True)`; a step
        # has nothing to mask, so the mask is accepted and dropped.
        self.supports_masking = True

    def _attention_layers(self, units, layers):
        """One attentional layer per mechanism, or `None` (the context)."""
        count = len(self.mechanisms)
        if units is not None and layers is not None:
            raise ValueError(
                "Pass `attention_layer_units` or `attention_layer`, not "
                f"both. Received: attention_layer_units={units!r}, "
                f"attention_layer={layers!r}"
            )
        if layers is not None:
            layers = _as_list(layers)
            if len(layers) != count or not all(
                isinstance(layer, keras.layers.Layer) for layer in layers
            ):
                raise ValueError(
                    "Received an invalid value for argument "
                    f"`attention_layer`, expected {count} Keras layer(s), "
                    f"one per mechanism. Received: attention_layer={layers!r}"
                )
            return layers
        if units is None:
            return None
        sizes = _as_list(units)
        if len(sizes) != count:
            raise ValueError(
                f"`attention_layer_units` needs one size per mechanism "
                f"({count}). Received: attention_layer_units={units!r}"
            )
        sizes = [
            _validation.positive_int("attention_layer_units", size)
            for size in sizes
        ]
        return [
            keras.layers.Dense(
                size,
                activation="tanh",
                use_bias=False,
                dtype=self.dtype_policy,
                name="attention_layer"
                if count == 1
                else f"attention_layer_{i}",
            )
            for i, size in enumerate(sizes)
        ]

    @property
    def noisy_mechanisms(self):
        """For each mechanism, whether it adds sigmoid noise in training."""
        return [getattr(m, "sigmoid_noise", 0.0) > 0 for m in self.mechanisms]

    @property
    def noisy(self):
        """Whether some mechanism adds sigmoid noise in training."""
        return any(self.noisy_mechanisms)

    @property
    def attention_layer(self):
        """The attentional layer of the first mechanism, or `None`."""
        return self.attention_layers[0] if self.attention_layers else None

    # Layout of the state list.

    @property
    def _cell_state_sizes(self):
        return _as_list(self.cell.state_size)

    @property
    def num_cell_states(self):
        """How many of the states belong to the wrapped cell."""
        return len(self._cell_state_sizes)

    @property
    def attention_index(self):
        """Index of the attention vector `a_t` in the state list."""
        return self.num_cell_states

    @property
    def alignments_index(self):
        """Index of the first mechanism's weights `α_t` in the state list."""
        return self.num_cell_states + 1

    @property
    def alignments_indices(self):
        """Indices of every mechanism's weights in the state list."""
        first = self.alignments_index
        return list(range(first, first + len(self.mechanisms)))

    @property
    def noise_seed_index(self):
        """Index of the sigmoid-noise seed in the state list, or `None`.

        Only a cell with a noisy monotonic mechanism has this state.
        """
        if not self.noisy:
            return None
        return self.alignments_index + len(self.mechanisms)

    @property
    def keyed_mechanisms(self):
        """For each mechanism, whether the state list carries its keys.

        A mechanism whose score projects the memory (`projects_memory`:
        Bahdanau's `W_k h̄_s`, the memory half of Luong's concat score)
        has the projection computed once, by `get_initial_state`, and
        carried as a constant state instead of recomputed at every step.
        Not with a custom `attention_fn` (it may change the memory before
        calling the mechanism), nor when the keys' dtype (`float32` for a
        half-precision policy) is not the cell's compute dtype, to which
        `keras.layers.RNN` casts every state: those mechanisms project
        the memory at each step, as before.
        """
        cell_dtype = keras.backend.standardize_dtype(self.compute_dtype)
        return [
            self.attention_fn is None
            and m.projects_memory
            and ka_ops.logits_dtype(m.compute_dtype) == cell_dtype
            for m in self.mechanisms
        ]

    @property
    def keys_indices(self):
        """For each mechanism, the index of its keys in the state list.

        `None` for a mechanism whose keys are not carried (see
        `keyed_mechanisms`).
        """
        index = self.alignments_index + len(self.mechanisms) + self.noisy
        indices = []
        for keyed in self.keyed_mechanisms:
            indices.append(index if keyed else None)
            index += keyed
        return indices

    @property
    def num_constant_states(self):
        """The keys, the memory and its mask: the last states, unchanged."""
        return sum(self.keyed_mechanisms) + 2

    def _layer_depth(self, layer):
        shape = (None, self._memory_depth + self._cell_output_size)
        return layer.compute_output_shape(shape)[-1]

    def _probe_attention_fn(self):
        """The depth of a custom `attention_fn`'s output, from a call on
        zeros (one example, one source position)."""
        if self._attention_fn_depth is None:
            dtype = self.compute_dtype
            depth = 0
            for i, mechanism in enumerate(self.mechanisms):
                attention, _ = self.attention_fn(
                    mechanism,
                    ops.zeros((1, self._cell_output_size), dtype),
                    ops.zeros((1, 1, self._memory_depth), dtype),
                    ops.ones((1, 1), "bool"),
                    mechanism.initial_alignments(1, 1, dtype),
                    self.attention_layers[i] if self.attention_layers else None,
                )
                depth += int(attention.shape[-1])
            self._attention_fn_depth = depth
        return self._attention_fn_depth

    @property
    def attention_depth(self):
        """Depth of `a_t`; `None` until the memory depth is known."""
        if self.attention_fn is not None:
            if self._memory_depth is None:
                return None
            return self._probe_attention_fn()
        if self._memory_depth is None and self.attention_layers is None:
            return None
        if self.attention_layers is None:
            return self._memory_depth * len(self.mechanisms)
        if self._memory_depth is None:
            units = _as_list(self.attention_layer_units or [])
            return sum(units) if units else None
        return sum(self._layer_depth(layer) for layer in self.attention_layers)

    @property
    def _cell_output_size(self):
        size = getattr(self.cell, "output_size", None)
        return size if size is not None else self._cell_state_sizes[0]

    @property
    def state_size(self):
        # Source length and memory depth are not fixed by the cell; `None`
        # entries are fine for `keras.layers.RNN` as long as the initial
        # state is passed in.
        alignments = [None] * len(self.mechanisms)
        depths = [*self._cell_state_sizes, self.attention_depth, *alignments]
        seed = [3] if self.noisy else []
        return depths + seed + [None] * self.num_constant_states

    @property
    def output_size(self):
        if self.output_attention:
            return self.attention_depth
        return self._cell_output_size

    # Building.

    def _build_for_memory(self, memory_shape):
        if len(memory_shape) != 3 or memory_shape[-1] is None:
            raise ValueError(
                "AttentionDecoderCell expects `memory` of shape "
                "`(batch_size, source_time, depth)` with a known depth. "
                f"Received: memory.shape={tuple(memory_shape)}"
            )
        if (
            self._memory_depth is not None
            and self._memory_depth != memory_shape[-1]
        ):
            raise ValueError(
                f"AttentionDecoderCell was built for a memory of depth "
                f"{self._memory_depth}. Received: "
                f"memory.shape={tuple(memory_shape)}"
            )
        self._memory_depth = memory_shape[-1]
        query_shape = (memory_shape[0], self._cell_output_size)
        for mechanism in self.mechanisms:
            if not mechanism.built:
                mechanism.build(query_shape, memory_shape)
        for layer in self.attention_layers or []:
            if not layer.built:
                layer.build(
                    (
                        memory_shape[0],
                        self._memory_depth + self._cell_output_size,
                    )
                )

    def _cell_input_shape(self, inputs_shape):
        if self.cell_input_fn is None:
            return (inputs_shape[0], inputs_shape[-1] + self.attention_depth)
        if self._cell_input_depth is None:
            # The depth of a custom `cell_input_fn`'s output, from a call on
            # one row of zeros.
            probe = self.cell_input_fn(
                ops.zeros((1, inputs_shape[-1])),
                ops.zeros((1, self.attention_depth)),
            )
            self._cell_input_depth = int(probe.shape[-1])
        return (inputs_shape[0], self._cell_input_depth)

    def build(self, inputs_shape, states_shape=None):
        if states_shape is not None:
            self._build_for_memory(tuple(states_shape[-2]))
        if self._memory_depth is None:
            raise ValueError(
                "AttentionDecoderCell needs the memory before it is built: "
                "call `cell.get_initial_state(memory=...)` first (or call "
                "the cell with the full state list). Received: "
                f"inputs_shape={tuple(inputs_shape)}"
            )
        if isinstance(self.cell, keras.layers.Layer) and not self.cell.built:
            self.cell.build(self._cell_input_shape(inputs_shape))
        self.built = True

    def get_initial_state(
        self, batch_size=None, memory=None, memory_mask=None, cell_state=None
    ):
        """The initial state list for a memory.

        Args:
            batch_size: Ignored (the memory fixes it); kept for
                `keras.layers.RNN`, which calls this method with it only.
            memory: The encoder outputs `(batch_size, source_time, depth)`.
                Required.
            memory_mask: Optional boolean `(batch_size, source_time)`,
                `True` for real tokens. Defaults to all `True`.
            cell_state: Optional initial state of the wrapped cell (a
                tensor or a list of tensors, e.g. the encoder's last state
                through a `Dense` bridge). Defaults to the wrapped cell's
                own initial state (zeros).

        Returns:
            The list `[*cell_states, attention, *alignments, *keys,
            memory, memory_mask]`: zero attention vector and each
            mechanism's initial alignments (zeros; one-hot on the first
            position for the monotonic mechanisms), with a fresh noise
            seed before the keys when some mechanism adds sigmoid noise.
            `keys` are the memory's projections of the mechanisms that
            have one (`keyed_mechanisms`, at `keys_indices`), computed
            here once for all the steps.
        """
        if memory is None:
            raise ValueError(
                "AttentionDecoderCell needs the encoder memory for its "
                "initial state: pass `initial_state=cell.get_initial_state("
                "memory=..., memory_mask=...)` to `keras.layers.RNN`, or use "
                "`keras_attention.seq2seq.AttentionDecoder`. Received: "
                "memory=None"
            )
        checks.floating_memory(type(self).__name__, memory)
        memory = ops.convert_to_tensor(memory, dtype=self.compute_dtype)
        self._build_for_memory(tuple(memory.shape))
        batch = ops.shape(memory)[0]
        source_length = ops.shape(memory)[1]
        check_memory_mask(type(self).__name__, memory_mask, memory.shape)
        if memory_mask is None:
            mask = ops.ones((batch, source_length), dtype=self.compute_dtype)
        else:
            mask = ops.cast(
                ops.cast(memory_mask, "bool"), dtype=self.compute_dtype
            )
        cell_state = self._initial_cell_state(batch, cell_state)
        attention = ops.zeros(
            (batch, self.attention_depth), dtype=self.compute_dtype
        )
        alignments = [
            m.initial_alignments(batch, source_length, self.compute_dtype)
            for m in self.mechanisms
        ]
        seed = [self._initial_noise_seed(batch)] if self.noisy else []
        keys = [
            ops.cast(m.project_memory(memory), self.compute_dtype)
            for m, keyed in zip(
                self.mechanisms, self.keyed_mechanisms, strict=True
            )
            if keyed
        ]
        return [
            *cell_state,
            attention,
            *alignments,
            *seed,
            *keys,
            memory,
            mask,
        ]

    def _initial_noise_seed(self, batch):
        """`[s_0, s_1, step]` per row: a fresh seed of this sequence's noise.

        Drawn here, outside the loop that runs the cell, from the first
        noisy mechanism's seed generator; each step derives its noise
        from it statelessly and counts itself in `step`, so the noise
        works in any loop (`keras.layers.RNN`, `AttentionDecoder`,
        `ScheduledSamplingDecoder`) on every backend.
        """
        noisy = self.mechanisms[self.noisy_mechanisms.index(True)]
        seed = noisy.draw_seed(self.compute_dtype)
        row = ops.concatenate([seed, ops.zeros((1,), "int32")], axis=0)
        row = ops.cast(row, self.compute_dtype)
        return ops.broadcast_to(row[None, :], (batch, 3))

    def _initial_cell_state(self, batch, cell_state):
        if cell_state is None:
            initial = getattr(self.cell, "get_initial_state", None)
            if initial is not None:
                cell_state = initial(batch_size=batch)
            else:
                cell_state = [
                    ops.zeros((batch, size), dtype=self.compute_dtype)
                    for size in self._cell_state_sizes
                ]
        cell_state = _as_list(cell_state)
        if len(cell_state) != self.num_cell_states:
            raise ValueError(
                f"The wrapped cell has {self.num_cell_states} state(s) but "
                f"`cell_state` holds {len(cell_state)}. Received: "
                f"cell_state shapes={[tuple(s.shape) for s in cell_state]}"
            )
        return [ops.cast(s, dtype=self.compute_dtype) for s in cell_state]

    def call(self, inputs, states, training=None):
        states = list(states)
        n = self.num_cell_states
        cell_states = states[:n]
        previous_attention = states[n]
        count = len(self.mechanisms)
        previous_alignments = states[n + 1 : n + 1 + count]
        seed_state = states[n + 1 + count] if self.noisy else None
        memory, memory_mask = states[-2], states[-1]
        keys, constants = self._carried_keys(states)
        previous = ops.cast(previous_attention, inputs.dtype)
        if self.cell_input_fn is None:
            cell_inputs = ops.concatenate([inputs, previous], axis=-1)
        else:
            cell_inputs = self.cell_input_fn(inputs, previous)
        cell_output, new_cell_states = self.cell(
            cell_inputs, cell_states, training=training
        )
        noise = self._step_noise(seed_state, memory, training)
        attention_fn = self.attention_fn or compute_attention
        attentions, alignments = [], []
        for i, mechanism in enumerate(self.mechanisms):
            extra = {}
            if noise[i] is not None:
                extra["noise"] = noise[i]
            if keys[i] is not None:
                extra["keys"] = keys[i]
            context, weights = attention_fn(
                mechanism,
                cell_output,
                memory,
                ops.cast(memory_mask, "bool"),
                previous_alignments[i],
                self.attention_layers[i] if self.attention_layers else None,
                training=training,
                **extra,
            )
            attentions.append(context)
            alignments.append(weights)
        if len(attentions) == 1:
            attention = attentions[0]
        else:
            dtype = attentions[0].dtype
            attention = ops.concatenate(
                [ops.cast(a, dtype) for a in attentions], axis=-1
            )
        output = attention if self.output_attention else cell_output
        # Each state keeps the dtype it came in with: a compiled loop (JAX's
        # `scan`) rejects a carry whose dtype changes, as it does when a
        # mixed-precision `RNN` hands float16 states to a float32 cell.
        new_states = [
            *(
                ops.cast(new, old.dtype)
                for new, old in zip(
                    _as_list(new_cell_states), cell_states, strict=True
                )
            ),
            ops.cast(attention, previous_attention.dtype),
            *(ops.cast(a, previous_attention.dtype) for a in alignments),
            *([] if seed_state is None else [self._next_seed(seed_state)]),
            *constants,
        ]
        return output, new_states

    def _carried_keys(self, states):
        """Each mechanism's keys from the state list (or `None`), and the
        constant states (keys, memory, mask), which a step passes on.

        A list without the keys (made before they were carried, or by
        hand as `[*cell_states, attention, *alignments, memory,
        memory_mask]`) gets `None` for all: the mechanisms then project
        the memory themselves, at each step.
        """
        if len(states) != len(self.state_size):
            return [None] * len(self.mechanisms), states[-2:]
        keys = []
        for mechanism, index in zip(
            self.mechanisms, self.keys_indices, strict=True
        ):
            carried = None if index is None else states[index]
            dtype = ka_ops.logits_dtype(mechanism.compute_dtype)
            if (
                carried is not None
                and keras.backend.standardize_dtype(carried.dtype) != dtype
            ):
                # Cast by a loop of another dtype: rounded, so not used.
                carried = None
            keys.append(carried)
        return keys, states[len(states) - self.num_constant_states :]

    def _step_noise(self, seed_state, memory, training):
        """Each mechanism's sigmoid noise `(batch_size, source_time)`.

        `None` for a mechanism without noise, and outside training. The
        seed of mechanism `i` at step `t` is `(s_0 R + s_1, t M + i)` (`R`
        the seed range, `M` the number of mechanisms), a stateless draw.
        """
        count = len(self.mechanisms)
        if not (training and self.noisy):
            return [None] * count
        # The largest row: a padded row of `AttentionDecoder` keeps its
        # old state, but every row holds the same seed.
        seed = ops.cast(ops.max(seed_state, axis=0), "int32")
        size = monotonic.seed_range(seed_state.dtype)
        shape = ops.shape(memory)[:2]
        noise = []
        for i, (mechanism, noisy) in enumerate(
            zip(self.mechanisms, self.noisy_mechanisms, strict=True)
        ):
            step_seed = ops.stack(
                [seed[0] * size + seed[1], seed[2] * count + i]
            )
            noise.append(
                mechanism.draw_noise(shape, memory.dtype, seed=step_seed)
                if noisy
                else None
            )
        return noise

    @staticmethod
    def _next_seed(seed_state):
        """The step count advanced, modulo the seed range."""
        size = monotonic.seed_range(seed_state.dtype)
        step = ops.mod(seed_state[:, 2:] + 1.0, float(size))
        return ops.concatenate([seed_state[:, :2], step], axis=-1)

    def compute_mask(self, inputs, previous_mask=None):
        return None

    def get_config(self):
        attention = self.attention
        if isinstance(attention, (list, tuple)):
            attention = [
                keras.saving.serialize_keras_object(m) for m in attention
            ]
        else:
            attention = keras.saving.serialize_keras_object(attention)
        config = {
            **super().get_config(),
            # A quantized attentional layer is rebuilt quantized on loading.
            "dtype": _policies.policy_config(
                self, list(self.attention_layers or [None])
            ),
            "cell": keras.saving.serialize_keras_object(self.cell),
            "attention": attention,
            "attention_layer_units": self.attention_layer_units,
            "output_attention": self.output_attention,
        }
        if self.attention_layer_units is None and self.attention_layers:
            config["attention_layer"] = [
                keras.saving.serialize_keras_object(layer)
                for layer in self.attention_layers
            ]
        for name in ("cell_input_fn", "attention_fn"):
            function = getattr(self, name)
            if function is not None:
                config[name] = probability.serialize_callable(name, function)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["cell"] = keras.saving.deserialize_keras_object(config["cell"])
        attention = config["attention"]
        if isinstance(attention, list):
            config["attention"] = [
                keras.saving.deserialize_keras_object(m) for m in attention
            ]
        else:
            config["attention"] = keras.saving.deserialize_keras_object(
                attention
            )
        if config.get("attention_layer") is not None:
            config["attention_layer"] = [
                keras.saving.deserialize_keras_object(layer)
                for layer in config["attention_layer"]
            ]
        for name in ("cell_input_fn", "attention_fn"):
            if config.get(name) is not None:
                config[name] = probability.deserialize(config[name])
        return cls(**config)


def _check_callable(name, function, expected):
    if function is not None and not callable(function):
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a "
            f"callable {expected} or None. Received: {name}={function!r}"
        )
    return function


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
        alignments = new_states[self.cell.alignments_index]
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
            states_shape = [None] * (self.cell.num_cell_states + 2)
            states_shape += [tuple(memory_shape), None]
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
