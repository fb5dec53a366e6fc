"""The layout of `AttentionDecoderCell`'s state list.

Keras 3's `keras.layers.RNN` carries a cell's state as a flat list, so the
decoder cell's state (the wrapped cell's states, the attention vector,
each mechanism's alignments, the sigmoid-noise seed, the memory's keys,
the memory and its mask) is one list in a fixed order. `StateLayout` is
that order, written once: the cell packs and unpacks its states with it
and the decoders read the memory and the alignments through it, so no
other code counts positions.
"""

from typing import NamedTuple


class DecoderState(NamedTuple):
    """The decoder cell's states, by name (see `StateLayout`).

    Attributes:
        cell_states: The wrapped cell's states, a list.
        attention: The attention vector `a_t`, `(batch_size,
            attention_depth)`.
        alignments: Each mechanism's weights `α_t`, a list of
            `(batch_size, source_time)`.
        noise_seed: The sigmoid-noise seed `(batch_size, 3)`, or `None`
            when no mechanism adds noise.
        keys: Each mechanism's keys `(batch_size, source_time, units)`,
            or `None` for a mechanism whose keys are not carried.
        memory: The memory `(batch_size, source_time, depth)`.
        memory_mask: The memory's mask `(batch_size, source_time)`, stored
            as `0.0`/`1.0` in the compute dtype.
        constants: The states that a step passes on unchanged (the keys
            carried, the memory and its mask), in list order.
    """

    cell_states: list
    attention: object
    alignments: list
    noise_seed: object
    keys: list
    memory: object
    memory_mask: object
    constants: list


class StateLayout:
    """Where each state of an `AttentionDecoderCell` sits in its list.

    The list is `[*cell_states, attention, *alignments, noise_seed?,
    *keys, memory, memory_mask]`: the seed only when `noisy`, one key
    tensor per mechanism whose `keyed` flag is set. The keys, the memory
    and its mask are the constant states, last in the list. A list without
    the keys (the layout before they were carried, still accepted) unpacks
    with `None` keys.

    Args:
        num_cell_states: How many states the wrapped cell has.
        num_mechanisms: How many attention mechanisms the cell has.
        noisy: Whether the list carries a sigmoid-noise seed.
        keyed: For each mechanism, whether the list carries its keys.
    """

    def __init__(self, num_cell_states, num_mechanisms, noisy, keyed):
        self.num_cell_states = num_cell_states
        self.num_mechanisms = num_mechanisms
        self.noisy = bool(noisy)
        self.keyed = list(keyed)

    @property
    def attention_index(self):
        """Index of the attention vector `a_t`."""
        return self.num_cell_states

    @property
    def alignments_index(self):
        """Index of the first mechanism's weights `α_t`."""
        return self.num_cell_states + 1

    @property
    def alignments_indices(self):
        """Indices of every mechanism's weights."""
        first = self.alignments_index
        return list(range(first, first + self.num_mechanisms))

    @property
    def noise_seed_index(self):
        """Index of the sigmoid-noise seed, or `None` without noise."""
        if not self.noisy:
            return None
        return self.alignments_index + self.num_mechanisms

    @property
    def keys_indices(self):
        """For each mechanism, the index of its keys, or `None`."""
        index = self.alignments_index + self.num_mechanisms + self.noisy
        indices = []
        for keyed in self.keyed:
            indices.append(index if keyed else None)
            index += keyed
        return indices

    @property
    def num_constant_states(self):
        """The keys, the memory and its mask: the last states."""
        return sum(self.keyed) + 2

    @property
    def size(self):
        """The length of a full state list."""
        return (
            self.num_cell_states
            + 1
            + self.num_mechanisms
            + self.noisy
            + self.num_constant_states
        )

    @property
    def num_varying_states(self):
        """The states a step changes: all but the constant ones."""
        return self.size - self.num_constant_states

    def sizes(self, cell_state_sizes, attention_depth, seed_depth):
        """The `state_size` list: `None` where the memory fixes the size."""
        return [
            *cell_state_sizes,
            attention_depth,
            *[None] * self.num_mechanisms,
            *([seed_depth] if self.noisy else []),
            *[None] * self.num_constant_states,
        ]

    def build_shapes(self, memory_shape):
        """A `states_shape` for the cell's `build`: only the memory's."""
        shapes = [None] * self.size
        shapes[self.memory_index] = tuple(memory_shape)
        return shapes

    # The memory and its mask are last in both layouts.
    memory_index = -2
    memory_mask_index = -1

    def memory(self, states):
        """The memory in a state list (or a list of shapes)."""
        return states[self.memory_index]

    def alignments(self, states):
        """The first mechanism's weights `α_t` in a state list."""
        return states[self.alignments_index]

    def pack(self, state):
        """The state list of a `DecoderState` (its `constants` unused)."""
        keys = [
            k for k, keyed in zip(state.keys, self.keyed, strict=True) if keyed
        ]
        seed = [state.noise_seed] if self.noisy else []
        return [
            *state.cell_states,
            state.attention,
            *state.alignments,
            *seed,
            *keys,
            state.memory,
            state.memory_mask,
        ]

    def pack_step(self, state):
        """The state list after a step, from the stepped `DecoderState`.

        The constants go on as the same tensors that came in (keys,
        memory and mask, in either layout): TensorFlow's loop then treats
        them as invariant and keeps no copy of them per step.
        """
        seed = [state.noise_seed] if self.noisy else []
        return [
            *state.cell_states,
            state.attention,
            *state.alignments,
            *seed,
            *state.constants,
        ]

    def unpack(self, states):
        """The `DecoderState` of a state list.

        A list shorter by the keys (the layout before they were carried)
        gets `None` keys; its constants are then the memory and its mask.
        """
        states = list(states)
        n = self.num_cell_states
        count = self.num_mechanisms
        first = self.alignments_index
        if len(states) == self.size:
            keys = [None if i is None else states[i] for i in self.keys_indices]
            constants = states[len(states) - self.num_constant_states :]
        else:
            keys = [None] * count
            constants = states[-2:]
        return DecoderState(
            cell_states=states[:n],
            attention=states[self.attention_index],
            alignments=states[first : first + count],
            noise_seed=(states[self.noise_seed_index] if self.noisy else None),
            keys=keys,
            memory=states[self.memory_index],
            memory_mask=states[self.memory_mask_index],
            constants=constants,
        )


class StateIndices:
    """The indices of a `StateLayout`, as properties of its owner.

    `AttentionDecoderCell` mixes this in, so that callers stepping the
    cell by hand read `cell.alignments_index` etc.; the owner defines
    `state_layout`.
    """

    @property
    def attention_index(self):
        """Index of the attention vector `a_t` in the state list."""
        return self.state_layout.attention_index

    @property
    def alignments_index(self):
        """Index of the first mechanism's weights `α_t` in the state list."""
        return self.state_layout.alignments_index

    @property
    def alignments_indices(self):
        """Indices of every mechanism's weights in the state list."""
        return self.state_layout.alignments_indices

    @property
    def noise_seed_index(self):
        """Index of the sigmoid-noise seed in the state list, or `None`.

        Only a cell with a noisy monotonic mechanism has this state.
        """
        return self.state_layout.noise_seed_index

    @property
    def keys_indices(self):
        """For each mechanism, the index of its keys in the state list.

        `None` for a mechanism whose keys are not carried (see the cell's
        `keyed_mechanisms`).
        """
        return self.state_layout.keys_indices

    @property
    def num_constant_states(self):
        """The keys, the memory and its mask: the last states, unchanged."""
        return self.state_layout.num_constant_states
