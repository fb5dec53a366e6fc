"""Attention mechanisms over an encoder memory, for RNN decoders.

A mechanism scores one decoder query (the decoder state `h_t`) against every
position of the encoder memory `h̄_s`, normalises the logits over the valid
(unpadded) source positions and returns the context `c_t = Σ_s a_ts h̄_s`
with the weights `a_t`. The logits come from the score layers of
`keras_attention.scores`, so the numbers are those of the layers of the same
name elsewhere in the library.
"""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention import scores as scores_lib
from keras_attention.ops import checks as ops_checks
from keras_attention.seq2seq import checks
from keras_attention.seq2seq import probability

_PACKAGE = "keras_attention"


def _shapes(query_shape, memory_shape):
    return (
        f"query.shape={tuple(query_shape)}, memory.shape={tuple(memory_shape)}"
    )


def check_memory_mask(layer_name, memory_mask, memory_shape):
    """A `ValueError` naming both shapes unless the mask fits the memory.

    `memory_mask` must be `(batch_size, source_time)` for a memory
    `(batch_size, source_time, depth)`; an unknown size fits any. A mask
    that merely broadcasts (`(batch_size, 1)`) is refused: it would mask
    nothing, or everything, without a word.
    """
    if memory_mask is None:
        return
    if not hasattr(memory_mask, "shape"):
        memory_mask = ops.convert_to_tensor(memory_mask)
    shape = tuple(memory_mask.shape)
    expected = tuple(memory_shape)[:2]
    if len(shape) == 2 and all(
        a is None or b is None or a == b
        for a, b in zip(shape, expected, strict=True)
    ):
        return
    raise ValueError(
        f"{layer_name} expects `memory_mask` of shape {expected} (batch "
        f"size, source time) from memory.shape={tuple(memory_shape)}. "
        f"Received: memory_mask.shape={shape}, "
        f"memory.shape={tuple(memory_shape)}"
    )


class AttentionMechanism(keras.layers.Layer):
    """Base class: attention of a decoder query over an encoder memory.

    Subclasses set `self.score`, a `keras_attention.scores.Score` layer.
    `call(query, memory, memory_mask=None, keys=None)` returns `(context,
    weights)`; `keys`, from `project_memory(memory)`, saves projecting the
    memory again at each call on the same memory.
    `probability_fn` turns the logits into weights: `"softmax"` (the
    default), `"hardmax"`, `"sparsemax"` or a callable `logits -> weights`
    (masked positions get weight exactly 0 with any of them).

    Example:

    >>> mechanism = keras_attention.seq2seq.LuongAttention(score="dot")
    >>> isinstance(mechanism, keras_attention.seq2seq.AttentionMechanism)
    True
    >>> memory = np.random.rand(2, 5, 8).astype("float32")
    >>> query = np.random.rand(2, 8).astype("float32")
    >>> context, weights = mechanism(query, memory)
    >>> tuple(context.shape), tuple(weights.shape)
    ((2, 8), (2, 5))
    """

    def __init__(self, probability_fn="softmax", **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True
        self.probability_fn = probability.check(probability_fn)

    def initial_alignments(self, batch_size, source_length, dtype):
        """The alignments before the first decoder step: zeros."""
        return ops.zeros((batch_size, source_length), dtype=dtype)

    def _check_shapes(self, query_shape, memory_shape):
        if len(memory_shape) != 3:
            raise ValueError(
                f"{type(self).__name__} expects `memory` of shape "
                "`(batch_size, source_time, memory_depth)`. Received: "
                f"{_shapes(query_shape, memory_shape)}"
            )
        if len(query_shape) not in (2, 3):
            raise ValueError(
                f"{type(self).__name__} expects `query` of shape "
                "`(batch_size, query_depth)` or `(batch_size, target_time, "
                f"query_depth)`. Received: {_shapes(query_shape, memory_shape)}"
            )
        checks.batch_sizes(
            type(self).__name__, query=query_shape, memory=memory_shape
        )

    def _check_inputs(self, query, memory):
        """Integer tensors (a `TypeError`) and bad ranks (a `ValueError`),
        each named, before any computation; every mechanism's `call`."""
        ops_checks.floating(type(self).__name__, query=query, memory=memory)
        self._check_shapes(query.shape, memory.shape)

    def build(self, query_shape, memory_shape):
        self._check_shapes(query_shape, memory_shape)
        query_seq_shape = (query_shape[0], 1, query_shape[-1])
        if not self.score.built:
            self.score.build(query_seq_shape, memory_shape)

    @property
    def projects_memory(self):
        """Whether `project_memory` computes something steps can share.

        `True` when the score has a memory-side projection (the `W_k h̄_s`
        of Bahdanau's score, the memory half of Luong's concat score),
        which `AttentionDecoderCell` then computes once per memory instead
        of at every step. Luong's dot, general (`h_tᵀ W_a h̄_s` is
        computed as `(h_tᵀ W_a) h̄_s`, a projection of the query) and
        location scores have none.
        """
        return self.score.projects_keys

    def project_memory(self, memory):
        """tfa's `keys`: the memory through the score's key projection.

        `(batch_size, source_time, units)` in the logits dtype (`float32`
        for a half-precision policy); the memory itself, in that dtype, for
        a score without a projection. Pass it as `keys=` to `call` with
        the same memory: every step then skips the projection. The
        mechanism must be built (called once, or built by its cell).
        """
        if not self.built:
            raise ValueError(
                f"{type(self).__name__}.project_memory needs a built "
                "mechanism: call it once, or build it, first. Received: "
                f"memory.shape={tuple(memory.shape)}"
            )
        memory = ops.convert_to_tensor(memory)
        ops_checks.floating(type(self).__name__, memory=memory)
        memory = ops.cast(memory, self.compute_dtype)
        return self.score.project_keys(memory)

    def _logits(self, query, memory, keys):
        """The score of `query (batch, Tq, depth)`, from `keys` if given."""
        if keys is None:
            return self.score(query, memory)
        keys_shape, memory_shape = tuple(keys.shape), tuple(memory.shape)
        if len(keys_shape) != 3 or not all(
            a is None or b is None or a == b
            for a, b in zip(keys_shape[:2], memory_shape[:2], strict=True)
        ):
            raise ValueError(
                f"{type(self).__name__} expects `keys` from "
                "`project_memory(memory)`: `(batch_size, source_time, "
                f"units)` with the memory's first two sizes. Received: "
                f"keys.shape={keys_shape}, memory.shape={memory_shape}"
            )
        return self.score.score_projected(query, keys)

    def call(
        self,
        query,
        memory,
        memory_mask=None,
        previous_alignments=None,
        keys=None,
    ):
        # `previous_alignments` (the decoder cell passes them) is used by
        # the monotonic mechanisms only.
        self._check_inputs(query, memory)
        check_memory_mask(type(self).__name__, memory_mask, memory.shape)
        single = len(query.shape) == 2
        if single:
            query = ops.expand_dims(query, 1)
        logits = self._logits(query, memory, keys)
        mask = ka_ops.combine_masks(
            ops.shape(query)[1], ops.shape(memory)[1], value_mask=memory_mask
        )
        if self.probability_fn == "softmax":
            context, weights = ka_ops.attend(logits, memory, mask)
        else:
            weights = probability.normalize(logits, mask, self.probability_fn)
            weights = ops.cast(weights, memory.dtype)
            context = ops.matmul(weights, memory)
        if single:
            return ops.squeeze(context, 1), ops.squeeze(weights, 1)
        return context, weights

    def compute_mask(self, query, previous_mask=None):
        return None

    def get_config(self):
        return {
            **super().get_config(),
            "probability_fn": probability.serialize(self.probability_fn),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if "probability_fn" in config:
            config["probability_fn"] = probability.deserialize(
                config["probability_fn"]
            )
        return cls(**config)

    def compute_output_shape(self, query_shape, memory_shape):
        self._check_shapes(query_shape, memory_shape)
        lead = tuple(query_shape[:-1])
        return lead + (memory_shape[-1],), lead + (memory_shape[1],)

    def compute_output_spec(
        self,
        query,
        memory,
        memory_mask=None,
        previous_alignments=None,
        keys=None,
        **_,
    ):
        ops_checks.floating(type(self).__name__, query=query, memory=memory)
        context_shape, weights_shape = self.compute_output_shape(
            query.shape, memory.shape
        )
        return (
            keras.KerasTensor(context_shape, dtype=memory.dtype),
            keras.KerasTensor(weights_shape, dtype=memory.dtype),
        )


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BahdanauAttention(AttentionMechanism):
    """Additive attention over an encoder memory (Bahdanau et al., 2014).

    `e_ts = vᵀ tanh(W_q h_t + W_k h̄_s)`, `a_t = softmax_s(e_t)` over the
    valid source positions and `c_t = Σ_s a_ts h̄_s`. The logits come from
    `keras_attention.scores.AdditiveScore(units)` (or, with
    `normalize=True`, its weight-normalised form
    `NormalizedAdditiveScore`, as tfa's `BahdanauAttention(normalize=True)`).
    Padded source positions get weight 0; a fully masked memory gives zero
    weights and a zero context, never NaN.

    Args:
        units: Size of the hidden layer of the score. Defaults to `None`,
            the memory depth.
        normalize: Whether to weight-normalise `v` (and add a bias inside
            the `tanh`). Defaults to `False`.
        kernel_initializer: Initializer of the score's kernels. Defaults to
            `"glorot_uniform"`.
        **kwargs: `probability_fn` (below) and the base layer keyword
            arguments, e.g. `name` and `dtype`.

    Keyword arguments:
        probability_fn: `"softmax"` (the default), `"hardmax"` (one-hot of
            the best position), `"sparsemax"` (Martins & Astudillo, 2016)
            or a callable mapping the logits `(..., source_time)` to
            weights; masked positions get weight exactly 0 with any. A
            callable must be registered with
            `keras.saving.register_keras_serializable` to be saved.

    Call arguments:
        query: The decoder state, `(batch_size, query_depth)`, or a sequence
            of them `(batch_size, target_time, query_depth)`.
        memory: The encoder outputs `(batch_size, source_time, depth)`.
        memory_mask: Optional boolean `(batch_size, source_time)`, `True`
            for real tokens. Taken from `memory`'s Keras mask when not given.
        keys: Optional `project_memory(memory)`, computed once for many
            queries of the same memory (as `AttentionDecoderCell` does):
            the same numbers without projecting the memory again.

    Returns:
        `(context, weights)`: `(batch_size, depth)` and
        `(batch_size, source_time)` for one query, with a `target_time` axis
        after the batch axis for a sequence of queries.

    Example:

    >>> attention = keras_attention.seq2seq.BahdanauAttention(units=8)
    >>> memory = np.random.rand(2, 5, 6).astype("float32")
    >>> mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
    >>> context, weights = attention(np.ones((2, 4)), memory, mask)
    >>> tuple(context.shape), tuple(weights.shape)
    ((2, 6), (2, 5))
    >>> float(weights[0, 3] + weights[0, 4])
    0.0

    References:
        - [Bahdanau et al., 2014](https://arxiv.org/abs/1409.0473)
    """

    def __init__(
        self,
        units=None,
        normalize=False,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(normalize, bool):
            raise ValueError(
                "Received an invalid value for argument `normalize`, "
                f"expected a bool. Received: normalize={normalize!r}"
            )
        score_cls = (
            scores_lib.NormalizedAdditiveScore
            if normalize
            else scores_lib.AdditiveScore
        )
        self.score = score_cls(
            units=units,
            kernel_initializer=kernel_initializer,
            dtype=self.dtype_policy,
            name="score",
        )
        self.units = units
        self.normalize = normalize
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "normalize": self.normalize,
            "kernel_initializer": keras.initializers.serialize(
                self.kernel_initializer
            ),
        }


_LUONG_SCORES = ("dot", "general", "concat", "location")


@keras.saving.register_keras_serializable(package=_PACKAGE)
class LuongAttention(AttentionMechanism):
    """Multiplicative and location attention over a memory (Luong et al.).

    `a_t = softmax_s(score(h_t, h̄_s))` over the valid source positions and
    `c_t = Σ_s a_ts h̄_s`, with Luong et al.'s scores:

    - `"dot"`: `h_tᵀ h̄_s` (`keras_attention.scores.DotScore`; query and
      memory depths must match);
    - `"general"`: `h_tᵀ W_a h̄_s` (`BilinearScore`);
    - `"concat"`: `v_aᵀ tanh(W_a [h_t; h̄_s])` (`ConcatScore(units)`);
    - `"location"`: `a_t = softmax(W_a h_t)`, the memory's contents ignored
      (`LocationScore(max_length)`).

    Padded source positions get weight 0; a fully masked memory gives zero
    weights and a zero context, never NaN.

    Args:
        score: One of `"dot"`, `"general"`, `"concat"`, `"location"`.
            Defaults to `"general"`.
        units: Hidden size of the `"concat"` score. Defaults to `None`, the
            memory depth.
        max_length: Longest source of the `"location"` score; required for
            it.
        kernel_initializer: Initializer of the score's kernels. Defaults to
            `"glorot_uniform"`.
        **kwargs: `probability_fn` (below) and the base layer keyword
            arguments, e.g. `name` and `dtype`.

    Keyword arguments:
        probability_fn: `"softmax"` (the default), `"hardmax"` (one-hot of
            the best position), `"sparsemax"` (Martins & Astudillo, 2016)
            or a callable mapping the logits `(..., source_time)` to
            weights; masked positions get weight exactly 0 with any. A
            callable must be registered with
            `keras.saving.register_keras_serializable` to be saved.

    Call arguments:
        query: The decoder state, `(batch_size, query_depth)`, or a sequence
            of them `(batch_size, target_time, query_depth)`.
        memory: The encoder outputs `(batch_size, source_time, depth)`.
        memory_mask: Optional boolean `(batch_size, source_time)`, `True`
            for real tokens. Taken from `memory`'s Keras mask when not given.
        keys: Optional `project_memory(memory)`, computed once for many
            queries of the same memory (as `AttentionDecoderCell` does):
            the same numbers without projecting the memory again.

    Returns:
        `(context, weights)`: `(batch_size, depth)` and
        `(batch_size, source_time)` for one query, with a `target_time` axis
        after the batch axis for a sequence of queries.

    Example:

    >>> attention = keras_attention.seq2seq.LuongAttention(score="general")
    >>> memory = np.random.rand(2, 5, 6).astype("float32")
    >>> context, weights = attention(np.ones((2, 4)), memory)
    >>> tuple(context.shape), tuple(weights.shape)
    ((2, 6), (2, 5))

    References:
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
    """

    def __init__(
        self,
        score="general",
        units=None,
        max_length=None,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if score not in _LUONG_SCORES:
            raise ValueError(
                "Received an invalid value for argument `score`, expected "
                f"one of {list(_LUONG_SCORES)}. Received: score={score!r}"
            )
        if score == "location" and max_length is None:
            raise ValueError(
                "The 'location' score needs `max_length`, the longest "
                f"source. Received: score={score!r}, max_length=None"
            )
        _validation.positive_int("units", units, allow_none=True)
        # The arguments each of Luong's scores takes.
        arguments = {
            "dot": {},
            "general": {"kernel_initializer": kernel_initializer},
            "concat": {
                "units": units,
                "kernel_initializer": kernel_initializer,
            },
            "location": {
                "max_length": max_length,
                "kernel_initializer": kernel_initializer,
            },
        }[score]
        self.score = scores_lib.get(
            score, dtype=self.dtype_policy, name="score", **arguments
        )
        self.score_name = score
        self.units = units
        self.max_length = max_length
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def get_config(self):
        return {
            **super().get_config(),
            "score": self.score_name,
            "units": self.units,
            "max_length": self.max_length,
            "kernel_initializer": keras.initializers.serialize(
                self.kernel_initializer
            ),
        }


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

    Example:

    >>> mechanism = keras_attention.seq2seq.BahdanauAttention(units=8)
    >>> memory = np.random.rand(2, 5, 8).astype("float32")
    >>> h = np.random.rand(2, 8).astype("float32")
    >>> memory_mask = np.ones((2, 5), bool)
    >>> attention, alignments = keras_attention.seq2seq.compute_attention(
    ...     mechanism, h, memory, memory_mask, None, None
    ... )
    >>> tuple(attention.shape), tuple(alignments.shape)
    ((2, 8), (2, 5))
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
