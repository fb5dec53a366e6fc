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
from keras_attention import ops as ka_ops
from keras_attention.seq2seq import _noise_seeds
from keras_attention.seq2seq import cell_options
from keras_attention.seq2seq import checks
from keras_attention.seq2seq import probability
from keras_attention.seq2seq.attention import AttentionMechanism
from keras_attention.seq2seq.attention import check_memory_mask
from keras_attention.seq2seq.attention import compute_attention
from keras_attention.seq2seq.cell_options import as_list as _as_list
from keras_attention.seq2seq.state import DecoderState
from keras_attention.seq2seq.state import StateIndices
from keras_attention.seq2seq.state import StateLayout

_PACKAGE = "keras_attention"


@keras.saving.register_keras_serializable(package=_PACKAGE)
class AttentionDecoderCell(StateIndices, keras.layers.Layer):
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

    The states are one list, `[*cell_states, attention, *alignments,
    noise_seed?, *keys, memory, memory_mask]`, whose layout
    `keras_attention.seq2seq.state.StateLayout` owns (`cell.state_layout`;
    the index properties below read it): the wrapped cell's states, `a_t`,
    each mechanism's `α_t`, the seed of a monotonic mechanism's sigmoid
    noise, the memory through each score's memory-side projection (tfa's
    keys, computed once by `get_initial_state`), and the memory with its
    mask, which every step passes on unchanged.
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
        cell_options.check_cell(cell)
        mechanisms = cell_options.mechanisms(attention, AttentionMechanism)
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
        self.attention_layers = cell_options.attention_layers(
            attention_layer_units,
            attention_layer,
            len(mechanisms),
            self.dtype_policy,
        )
        self.cell_input_fn = cell_options.check_callable(
            "cell_input_fn",
            cell_input_fn,
            "`(inputs, attention) -> cell_inputs`",
        )
        self.attention_fn = cell_options.check_callable(
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

    @property
    def noisy_mechanisms(self):
        """For each mechanism, whether it adds sigmoid noise in training."""
        return _noise_seeds.noisy_mechanisms(self.mechanisms)

    @property
    def noisy(self):
        """Whether some mechanism adds sigmoid noise in training."""
        return any(self.noisy_mechanisms)

    @property
    def attention_layer(self):
        """The attentional layer of the first mechanism, or `None`."""
        return self.attention_layers[0] if self.attention_layers else None

    # Layout of the state list: `StateLayout` owns it; the properties
    # below are its indices, read by callers that step the cell by hand.

    @property
    def state_layout(self):
        """The `keras_attention.seq2seq.state.StateLayout` of the states."""
        return StateLayout(
            num_cell_states=len(self._cell_state_sizes),
            num_mechanisms=len(self.mechanisms),
            noisy=self.noisy,
            keyed=self.keyed_mechanisms,
        )

    @property
    def _cell_state_sizes(self):
        return _as_list(self.cell.state_size)

    @property
    def num_cell_states(self):
        """How many of the states belong to the wrapped cell."""
        return len(self._cell_state_sizes)

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
        return self.state_layout.sizes(
            self._cell_state_sizes, self.attention_depth, seed_depth=3
        )

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
            memory_shape = self.state_layout.memory(states_shape)
            self._build_for_memory(tuple(memory_shape))
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
        seed = None
        if self.noisy:
            seed = _noise_seeds.initial_noise_seed(
                self.mechanisms, batch, self.compute_dtype
            )
        keys = [
            ops.cast(m.project_memory(memory), self.compute_dtype)
            if keyed
            else None
            for m, keyed in zip(
                self.mechanisms, self.keyed_mechanisms, strict=True
            )
        ]
        return self.state_layout.pack(
            DecoderState(
                cell_states=cell_state,
                attention=attention,
                alignments=alignments,
                noise_seed=seed,
                keys=keys,
                memory=memory,
                memory_mask=mask,
                constants=None,
            )
        )

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
        layout = self.state_layout
        state = layout.unpack(states)
        previous = ops.cast(state.attention, inputs.dtype)
        if self.cell_input_fn is None:
            cell_inputs = ops.concatenate([inputs, previous], axis=-1)
        else:
            cell_inputs = self.cell_input_fn(inputs, previous)
        cell_output, new_cell_states = self.cell(
            cell_inputs, state.cell_states, training=training
        )
        attention, alignments = self._attend(cell_output, state, training)
        output = attention if self.output_attention else cell_output
        # Each state keeps the dtype it came in with: a compiled loop (JAX's
        # `scan`) rejects a carry whose dtype changes, as it does when a
        # mixed-precision `RNN` hands float16 states to a float32 cell.
        dtype = state.attention.dtype
        seed = state.noise_seed
        new_state = state._replace(
            cell_states=[
                ops.cast(new, old.dtype)
                for new, old in zip(
                    _as_list(new_cell_states),
                    state.cell_states,
                    strict=True,
                )
            ],
            attention=ops.cast(attention, dtype),
            alignments=[ops.cast(a, dtype) for a in alignments],
            noise_seed=None
            if seed is None
            else _noise_seeds.next_noise_seed(seed),
        )
        return output, layout.pack_step(new_state)

    def _attend(self, cell_output, state, training):
        """`(a_t, [α_t per mechanism])` for the cell output `h_t`."""
        noise = _noise_seeds.step_noise(
            self.mechanisms, state.noise_seed, state.memory, training
        )
        keys = self._usable_keys(state.keys)
        attention_fn = self.attention_fn or compute_attention
        memory_mask = ops.cast(state.memory_mask, "bool")
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
                state.memory,
                memory_mask,
                state.alignments[i],
                self.attention_layers[i] if self.attention_layers else None,
                training=training,
                **extra,
            )
            attentions.append(context)
            alignments.append(weights)
        if len(attentions) == 1:
            return attentions[0], alignments
        dtype = attentions[0].dtype
        attention = ops.concatenate(
            [ops.cast(a, dtype) for a in attentions], axis=-1
        )
        return attention, alignments

    def _usable_keys(self, keys):
        """The carried keys, `None` where a loop of another dtype cast them
        (rounded, so not used: the mechanism projects the memory)."""
        usable = []
        for mechanism, carried in zip(self.mechanisms, keys, strict=True):
            dtype = ka_ops.logits_dtype(mechanism.compute_dtype)
            if (
                carried is not None
                and keras.backend.standardize_dtype(carried.dtype) != dtype
            ):
                carried = None
            usable.append(carried)
        return usable

    def compute_mask(self, inputs, previous_mask=None):
        return None

    def get_config(self):
        config = {
            **super().get_config(),
            # A quantized attentional layer is rebuilt quantized on loading.
            "dtype": _policies.policy_config(
                self, list(self.attention_layers or [None])
            ),
            "cell": keras.saving.serialize_keras_object(self.cell),
            "attention": cell_options.serialize(self.attention),
            "attention_layer_units": self.attention_layer_units,
            "output_attention": self.output_attention,
        }
        if self.attention_layer_units is None and self.attention_layers:
            config["attention_layer"] = cell_options.serialize(
                list(self.attention_layers)
            )
        for name in ("cell_input_fn", "attention_fn"):
            function = getattr(self, name)
            if function is not None:
                config[name] = probability.serialize_callable(name, function)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for name in ("cell", "attention", "attention_layer"):
            if config.get(name) is not None:
                config[name] = cell_options.deserialize(config[name])
        for name in ("cell_input_fn", "attention_fn"):
            if config.get(name) is not None:
                config[name] = probability.deserialize(config[name])
        return cls(**config)
