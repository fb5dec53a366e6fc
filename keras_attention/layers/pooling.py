"""Attention pooling: a sequence to one vector with one query."""

import keras
from keras import ops

from keras_attention import _policies
from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention import scores as scores_lib
from keras_attention.layers import _mask_shapes
from keras_attention.ops import checks as ops_checks

_QUERIES = ("learned", "last")


@keras.saving.register_keras_serializable(package="keras_attention")
class AttentionPooling(keras.layers.Layer):
    """Attention pooling: `c = Σ_t softmax_t(s(q, h_t)) · h_t`.

    Pools a sequence `H` of shape `(batch_size, T, D)` (say a BiLSTM's
    outputs) into one vector `(batch_size, D)` with a single query `q`:

    - `query="learned"`: `q` is a trained vector, the word attention of
      Yang et al.'s hierarchical attention networks and keras-self-attention's
      `SeqWeightedAttention`. With `score="dot"` the logits are `h_t · q`
      (`SeqWeightedAttention`'s `x W`); with
      `AdditiveScore(use_bias=True)` they are `vᵀ tanh(h_t W + b')`, HAN's
      `u_wᵀ tanh(W h_t + b)`.
    - `query="last"`: `q = h_T`, the last unmasked step (the last step
      after right padding, the final one after left padding): the
      `attention` package's layer (Luong's `"bilinear"` or Bahdanau's
      `"additive"` score). With `units` the output is that layer's
      `tanh([c; h_T] W_c)`, `(batch_size, units)`.

    Padded steps (a Keras mask on the inputs, or `mask=`) get weight exactly
    0; a sequence with no unmasked step gets zero weights and a zero
    context. The output has no time axis, so no mask is propagated.

    Args:
        query: `"learned"` (default) or `"last"`.
        score: Any `keras_attention.scores` identifier. Defaults to `"dot"`.
        units: Optional size of the output projection `tanh([c; h_T] W_c)`
            (no bias); only with `query="last"`. Defaults to `None`, no
            projection.
        dropout: Dropout rate on the weights. Defaults to `0.0`.
        seed: Seed of the dropout. Defaults to `None`.
        query_initializer: Initializer of the learned query. Defaults to
            `"glorot_uniform"`.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        inputs: `(batch_size, T, D)`.
        mask: Optional boolean `(batch_size, T)`; `False` marks padding.
            Taken from the inputs' Keras mask when not given.
        return_attention_scores: Whether to also return the weights.
            Defaults to `False`.
        training: Whether dropout is active.

    Returns:
        The pooled vector, `(batch_size, D)` (`(batch_size, units)` with
        `units`), and with `return_attention_scores=True` also the weights
        `(batch_size, T)`.

    Weights:
        `query (D,)` with `query="learned"`, then the score's weights, then
        the projection's `kernel (2 D, units)` with `units`.

    Example:

    >>> layer = keras_attention.AttentionPooling(query="last", units=8)
    >>> hidden = np.random.rand(2, 5, 4).astype("float32")
    >>> pooled, weights = layer(hidden, return_attention_scores=True)
    >>> tuple(pooled.shape), tuple(weights.shape)
    ((2, 8), (2, 5))

    References:
        - [Yang et al., 2016](https://aclanthology.org/N16-1174/)
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
        - [Bahdanau et al., 2014](https://arxiv.org/abs/1409.0473)
    """

    def __init__(
        self,
        query="learned",
        score="dot",
        units=None,
        dropout=0.0,
        seed=None,
        query_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if query not in _QUERIES:
            raise _validation.invalid("query", query, f"one of {_QUERIES}")
        self.query = query
        self.score = scores_lib.get(score, dtype=self.dtype_policy)
        self.units = _validation.positive_int("units", units, allow_none=True)
        if self.units is not None and query != "last":
            raise ValueError(
                "The output projection `tanh([c; h_T] W_c)` needs "
                "query='last'. Received: "
                f"units={units!r}, query={query!r}"
            )
        self.dropout = _validation.rate("dropout", dropout)
        self.seed = seed
        self.query_initializer = keras.initializers.get(query_initializer)
        self.supports_masking = True
        self._dropout_layer = keras.layers.Dropout(
            self.dropout, seed=seed, dtype=self.dtype_policy
        )
        self._projection = None

    def _check_shape(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} expects `inputs` of shape "
                "`(batch_size, T, dim)` with a known `dim`. Received: "
                f"inputs.shape={tuple(input_shape)}"
            )

    def build(self, input_shape):
        self._check_shape(input_shape)
        batch, _, dim = input_shape
        if self.query == "learned":
            self.query_vector = self.add_weight(
                name="query", shape=(dim,), initializer=self.query_initializer
            )
        if not self.score.built:
            self.score.build((batch, 1, dim), tuple(input_shape))
        if self.units is not None:
            # Made here, inside the layer's scope, so that a quantized
            # model's policy map finds it by its path when loading.
            self._projection = keras.layers.Dense(
                self.units,
                use_bias=False,
                activation="tanh",
                name="projection",
                dtype=self.dtype_policy,
            )
            self._projection.build((batch, 2 * dim))

    def call(
        self, inputs, mask=None, return_attention_scores=False, training=None
    ):
        ops_checks.floating(type(self).__name__, inputs=inputs)
        ka_ops.checks.positions(type(self).__name__, inputs=inputs.shape)
        _mask_shapes.check_mask_shape(
            type(self).__name__,
            "mask",
            mask,
            tuple(inputs.shape[:-1]),
            {"inputs": inputs.shape},
        )
        if self.query == "learned":
            query = ops.cast(self.query_vector, inputs.dtype)
            query = ops.broadcast_to(query, ops.shape(inputs[:, :1]))
        else:
            query = ops.expand_dims(_last_step(inputs, mask), 1)
        logits = self.score(query, inputs)
        full_mask = ka_ops.combine_masks(
            1, ops.shape(inputs)[1], value_mask=mask
        )
        context, weights = ka_ops.attend(
            logits,
            inputs,
            full_mask,
            dropout_fn=lambda w: self._dropout_layer(w, training=training),
        )
        context, weights = context[:, 0], weights[:, 0]
        if self._projection is not None:
            context = self._projection(
                ops.concatenate([context, query[:, 0]], axis=-1)
            )
        if return_attention_scores:
            return context, weights
        return context

    def compute_mask(self, inputs, mask=None):
        # The pooled vector has no time axis left to mask.
        return None

    def compute_output_shape(self, input_shape):
        self._check_shape(input_shape)
        return (input_shape[0], self.units or input_shape[-1])

    def compute_output_spec(
        self, inputs, mask=None, return_attention_scores=False, training=None
    ):
        ops_checks.floating(type(self).__name__, inputs=inputs)
        shape = self.compute_output_shape(inputs.shape)
        pooled = keras.KerasTensor(shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return pooled
        weights = keras.KerasTensor(
            tuple(inputs.shape[:2]), dtype=self.compute_dtype
        )
        return pooled, weights

    def get_config(self):
        return {
            **super().get_config(),
            "query": self.query,
            "score": scores_lib.serialize(self.score),
            "units": self.units,
            "dropout": self.dropout,
            "seed": self.seed,
            "query_initializer": keras.initializers.serialize(
                self.query_initializer
            ),
            # The projection's own policy once `model.quantize` changed it.
            "dtype": _policies.policy_config(self, [self._projection]),
        }


def _last_step(inputs, mask):
    """`inputs[b, t_b]` with `t_b` the last unmasked step of example `b`.

    The last step without a mask; a zero vector where every step is masked.
    """
    if mask is None:
        return inputs[:, -1]
    mask = ops.cast(mask, "bool")
    positions = ops.arange(ops.shape(inputs)[1], dtype="int32")
    # -1 where no step is kept.
    last = ops.max(ops.where(mask, positions, -1), axis=1)
    index = ops.reshape(ops.maximum(last, 0), (-1, 1, 1))
    step = ops.take_along_axis(inputs, index, axis=1)[:, 0]
    kept = ops.cast(ops.expand_dims(last >= 0, -1), inputs.dtype)
    return step * kept
