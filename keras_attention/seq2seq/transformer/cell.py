"""The Transformer decoder as a cell of the package's decoders.

`keras_attention.seq2seq`'s `greedy_decode`, `beam_search_decode` and
`sample_decode` step a cell: `get_initial_state(memory=..., memory_mask=...)`
gives its state list, `cell(inputs, states)` one step, and its
`state_layout` says where the memory and the step's alignments are and
which states a beam reorders. `TransformerDecoderCell` is that cell for a
stack of `TransformerDecoderBlock`s.

With `use_cache=True` (the default) a step feeds the new token alone: each
block's self-attention reads and writes its keys and values in a cache of
`max_length` slots at the step's position (keras-hub's
`CachedMultiHeadAttention` semantics; int8 or float8 entries with
`cache_dtype`, a `QuantizedCache`), or, for a local block (its
`sliding_window`), in a `RollingCache` of its window; the memory's keys
and values are projected once, in `get_initial_state`. With
`use_cache=False` the state holds the inputs of every step so far and each
step runs the whole prefix through the stack again (the reference the
cache must agree with, and the baseline of BENCHMARKS.md's decoding
speeds).
"""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention.layers._quantized_cache import QuantizedCache
from keras_attention.layers._rolling_cache import RollingCache
from keras_attention.seq2seq.decoding import write_step

# The quantized dtypes of `cache_dtype`.
CACHE_DTYPES = ("int8", "float8_e4m3fn")


def run_stack(blocks, norm, inputs, memory, memory_mask, inputs_mask, training):
    """The blocks over a whole target, then the final norm.

    Returns `(outputs, alignments)`: the last block's cross-attention
    weights averaged over heads, `(batch_size, time, source_time)`.
    """
    x, alignments = inputs, None
    for block in blocks:
        x, alignments = block(
            x,
            memory,
            memory_mask=memory_mask,
            inputs_mask=inputs_mask,
            training=training,
        )
    return norm(x), alignments


class TransformerStateLayout:
    """Where each state of a `TransformerDecoderCell` sits in its list.

    Cached: `[position, *self_caches, alignments, *cross_caches, memory,
    memory_mask]`, the tensors of each block's self cache
    (`cache_sizes[i]` of them: one for keras-hub's tensor, two for a
    rolling or quantized cache) and one cross cache per block. Uncached:
    `[position, prefix, alignments, memory, memory_mask]`. `position`
    `(batch_size,)` is the step's index (the same in every row); the
    states before the cross caches (or the memory) change at each step,
    the rest are constants.
    """

    memory_index = -2
    memory_mask_index = -1

    def __init__(self, num_layers, use_cache, cache_sizes=None):
        self.num_layers = num_layers
        self.use_cache = bool(use_cache)
        self.cache_sizes = tuple(cache_sizes or (1,) * num_layers)

    @property
    def alignments_index(self):
        """Index of the step's alignments `(batch_size, source_time)`."""
        return 1 + (sum(self.cache_sizes) if self.use_cache else 1)

    @property
    def num_varying_states(self):
        """The position, the caches (or prefix) and the alignments."""
        return self.alignments_index + 1

    @property
    def num_constant_states(self):
        """The cross caches (when cached), the memory and its mask."""
        return (self.num_layers if self.use_cache else 0) + 2

    def memory(self, states):
        """The memory in a state list."""
        return states[self.memory_index]

    def alignments(self, states):
        """The step's alignments in a state list."""
        return states[self.alignments_index]


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerDecoderCell(keras.layers.Layer):
    """A stack of `TransformerDecoderBlock`s stepped one token at a time.

    Args:
        blocks: The `TransformerDecoderBlock`s, bottom first (shared with
            the model that trains them).
        norm: The `LayerNormalization` after the last block.
        max_length: Most steps, the size of the self-attention caches.
        use_cache: Whether a step reads the key/value cache (`True`, the
            default) or runs the whole prefix again.
        cache_dtype: The entries of the self-attention caches of the
            blocks without a window: `None` (the default, the compute
            dtype, keras-hub's tensor), `"int8"` or `"float8_e4m3fn"`
            (a `QuantizedCache`). A local block keeps a `RollingCache`.
        **kwargs: Layer keyword arguments.

    Call arguments:
        inputs: The step's input embedding `(batch_size, model_dim)`.
        states: The state list (`get_initial_state`, then the last step's).
        training: Whether dropout is active.

    Returns:
        `(outputs (batch_size, model_dim), new_states)`.

    Example:

    >>> from keras_attention.seq2seq.transformer import (
    ...     TransformerDecoderBlock,
    ...     TransformerDecoderCell,
    ... )
    >>> block = TransformerDecoderBlock(8, 2, 16)
    >>> memory = np.ones((2, 5, 8), "float32")
    >>> _ = block(np.ones((2, 1, 8), "float32"), memory)  # builds the block
    >>> cell = TransformerDecoderCell(
    ...     [block], keras.layers.LayerNormalization(), max_length=4
    ... )
    >>> states = cell.get_initial_state(memory)
    >>> outputs, states = cell(np.ones((2, 8), "float32"), states)
    >>> tuple(outputs.shape)
    (2, 8)
    """

    def __init__(
        self,
        blocks,
        norm,
        max_length,
        use_cache=True,
        cache_dtype=None,
        **kwargs,
    ):
        # Not cast to the compute dtype on entry: a float8 cache in the
        # states would be (Keras casts every floating input), and the
        # blocks cast what they take themselves.
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.blocks = [
            keras.saving.deserialize_keras_object(b)
            if isinstance(b, dict)
            else b
            for b in blocks
        ]
        if not self.blocks:
            raise ValueError(
                "TransformerDecoderCell needs at least one block. Received: "
                f"blocks={blocks!r}"
            )
        self.norm = (
            keras.saving.deserialize_keras_object(norm)
            if isinstance(norm, dict)
            else norm
        )
        self.max_length = _validation.positive_int("max_length", max_length)
        self.use_cache = bool(use_cache)
        if cache_dtype is not None and cache_dtype not in CACHE_DTYPES:
            raise _validation.invalid(
                "cache_dtype", cache_dtype, "None, 'int8' or 'float8_e4m3fn'"
            )
        self.cache_dtype = cache_dtype
        sizes = [1 if self._cache_kind(b) is None else 2 for b in self.blocks]
        self.state_layout = TransformerStateLayout(
            len(self.blocks), self.use_cache, sizes
        )

    def _cache_kind(self, block):
        """A block's kind of self cache: `RollingCache`, `QuantizedCache`,
        or `None` for keras-hub's tensor."""
        if getattr(block, "sliding_window", None) is not None:
            return RollingCache
        return None if self.cache_dtype is None else QuantizedCache

    def _self_cache(self, block, batch):
        """A block's empty self cache, as its list of tensors."""
        kind = self._cache_kind(block)
        attention = block.self_attention
        if kind is RollingCache:
            window = block.sliding_window
            cache = RollingCache.allocate(attention, batch, window=window)
            return list(cache.tensors)
        if kind is QuantizedCache:
            cache = QuantizedCache.allocate(
                attention, batch, self.max_length, dtype=self.cache_dtype
            )
            return list(cache.tensors)
        shape = (batch, 2, self.max_length, *_cache_heads(block))
        return [ops.zeros(shape, dtype=self.compute_dtype)]

    @property
    def alignments_index(self):
        """Index of the step's alignments in the state list."""
        return self.state_layout.alignments_index

    def get_initial_state(self, memory, memory_mask=None, cell_state=None):
        """The state list before the first step.

        Args:
            memory: The encoder outputs `(batch_size, source_time,
                model_dim)`.
            memory_mask: Optional boolean `(batch_size, source_time)`.
            cell_state: Must be `None`: a Transformer decoder has no
                initial state of its own.
        """
        if cell_state is not None:
            raise ValueError(
                "TransformerDecoderCell starts from the memory alone; it "
                "takes no `cell_state`. Received: cell_state given"
            )
        memory = ops.convert_to_tensor(memory, dtype=self.compute_dtype)
        batch, source_time = ops.shape(memory)[0], ops.shape(memory)[1]
        if memory_mask is None:
            memory_mask = ops.ones((batch, source_time), dtype="bool")
        memory_mask = ops.cast(memory_mask, "bool")
        position = ops.zeros((batch,), dtype="int32")
        alignments = ops.zeros((batch, source_time), dtype="float32")
        if not self.use_cache:
            prefix = ops.zeros(
                (batch, self.max_length, self.blocks[0].model_dim),
                dtype=self.compute_dtype,
            )
            return [position, prefix, alignments, memory, memory_mask]
        self_caches = [
            tensor
            for block in self.blocks
            for tensor in self._self_cache(block, batch)
        ]
        cross_caches = [block.cross_cache(memory) for block in self.blocks]
        return [
            position,
            *self_caches,
            alignments,
            *cross_caches,
            memory,
            memory_mask,
        ]

    def call(self, inputs, states, training=None):
        states = list(states)
        position = states[0]
        index = position[0]
        memory = states[self.state_layout.memory_index]
        memory_mask = states[self.state_layout.memory_mask_index]
        if self.use_cache:
            outputs, alignments, caches = self._cached_step(
                inputs, states, index, training
            )
            varying = [*caches, alignments]
        else:
            prefix = write_step(states[1], index, inputs)
            outputs, alignments = run_stack(
                self.blocks,
                self.norm,
                prefix,
                memory,
                memory_mask,
                None,
                training,
            )
            outputs = ops.take(outputs, index, axis=1)
            alignments = ops.take(alignments, index, axis=1)
            varying = [prefix, alignments]
        constants = states[self.state_layout.num_varying_states :]
        return outputs, [position + 1, *varying, *constants]

    def _cached_step(self, inputs, states, index, training):
        layout = self.state_layout
        memory = states[layout.memory_index]
        memory_mask = states[layout.memory_mask_index]
        first = layout.alignments_index + 1
        cross_caches = states[first : first + len(self.blocks)]
        x = ops.expand_dims(inputs, 1)
        caches, at = [], 1
        for block, size, cross_cache in zip(
            self.blocks, layout.cache_sizes, cross_caches, strict=True
        ):
            kind = self._cache_kind(block)
            tensors = states[at : at + size]
            at += size
            self_cache = tensors[0] if kind is None else kind(*tensors)
            x, alignments, self_cache = block(
                x,
                memory,
                memory_mask=memory_mask,
                self_cache=self_cache,
                cross_cache=cross_cache,
                cache_update_index=index,
                training=training,
            )
            caches += [self_cache] if kind is None else self_cache.tensors
        return self.norm(x)[:, 0], alignments[:, 0], caches

    def get_config(self):
        return {
            **super().get_config(),
            "blocks": [
                keras.saving.serialize_keras_object(b) for b in self.blocks
            ],
            "norm": keras.saving.serialize_keras_object(self.norm),
            "max_length": self.max_length,
            "use_cache": self.use_cache,
            "cache_dtype": self.cache_dtype,
        }


def _cache_heads(block):
    """`(heads, key_dim)` of a block's self-attention cache."""
    heads = block.num_key_value_heads or block.num_heads
    return heads, block.key_dim
