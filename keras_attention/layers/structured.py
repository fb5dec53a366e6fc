"""Structured self-attention: a matrix sentence embedding (Lin et al.)."""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention._validation import positive_int as _check_positive_int
from keras_attention.layers import _mask_shapes
from keras_attention.ops import checks as ops_checks


@keras.saving.register_keras_serializable(package="keras_attention")
class StructuredSelfAttention(keras.layers.Layer):
    """Structured self-attention: `A = softmax_T((tanh(H W_s1) W_s2)ᵀ)`.

    The sentence embedding of Lin et al. (2017). From the hidden states
    `H` of shape `(batch_size, time, features)` (e.g. a BiLSTM's outputs)
    each of the `num_hops` rows of `A` is a distribution over the time
    steps, and the embedding is the matrix `M = A H`, one weighted sum of
    the hidden states per hop. The penalty
    `P = penalty_coefficient · mean_batch ‖AAᵀ − I‖²_F` (squared Frobenius
    norm) pushes the hops to attend to different tokens; it is added with
    `add_loss` when `penalty_coefficient > 0`.

    Padded positions (a Keras mask on `inputs`, e.g. from
    `Embedding(mask_zero=True)`, or an explicit `mask`) get weight exactly
    0; a fully padded sentence gets all-zero weights and a zero embedding.
    Under mixed precision the logits and the softmax are computed in
    `float32`. The output has no time axis, so no mask is propagated.

    Args:
        units: Size `d_a` of the hidden layer of the attention MLP (the
            columns of `W_s1`).
        num_hops: Number `r` of attention hops (rows of `A`).
        penalty_coefficient: Non-negative weight of the redundancy
            penalty; `0` disables it. Defaults to `0.0` (as Keras's
            layers default their regularization coefficients).
        flatten: Whether to return the embedding flattened to
            `(batch_size, num_hops * features)` rather than
            `(batch_size, num_hops, features)`. Defaults to `True`.
        kernel_initializer: Initializer of `ws1` and `ws2`. Defaults to
            `"glorot_uniform"`.
        kernel_regularizer: Optional regularizer of `ws1` and `ws2`.
            Defaults to `None`.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        inputs: Hidden states `H` of shape `(batch_size, time, features)`.
        mask: Optional boolean `(batch_size, time)`; `False` marks padding.
            Taken from the Keras mask of `inputs` when not given.
        return_attention_scores: Whether to also return `A`. Defaults to
            `False`.
        training: Unused; accepted for API symmetry.

    Returns:
        The embedding `M`, `(batch_size, num_hops * features)` when
        `flatten=True` else `(batch_size, num_hops, features)`, and with
        `return_attention_scores=True` also the weights `A` of shape
        `(batch_size, num_hops, time)`.

    Weights:
        `ws1` of shape `(features, units)` and `ws2` of shape
        `(units, num_hops)`.

    Example:

    >>> layer = keras_attention.StructuredSelfAttention(
    ...     units=8, num_hops=3, penalty_coefficient=1.0
    ... )
    >>> hidden = np.random.rand(2, 5, 4).astype("float32")
    >>> embedding, weights = layer(hidden, return_attention_scores=True)
    >>> tuple(embedding.shape), tuple(weights.shape)
    ((2, 12), (2, 3, 5))

    References:
        - [Lin et al., 2017](https://arxiv.org/abs/1703.03130)
    """

    def __init__(
        self,
        units,
        num_hops,
        penalty_coefficient=0.0,
        flatten=True,
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.units = _check_positive_int("units", units)
        self.num_hops = _check_positive_int("num_hops", num_hops)
        self.penalty_coefficient = _validation.non_negative(
            "penalty_coefficient", penalty_coefficient, finite=True
        )
        self.flatten = bool(flatten)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} expects `inputs` of shape "
                "`(batch_size, time, features)` with a known number of "
                f"features. Received: inputs.shape={tuple(input_shape)}"
            )
        features = input_shape[-1]
        self.ws1 = self.add_weight(
            name="ws1",
            shape=(features, self.units),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
        )
        self.ws2 = self.add_weight(
            name="ws2",
            shape=(self.units, self.num_hops),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
        )

    def call(
        self, inputs, mask=None, return_attention_scores=False, training=None
    ):
        self._check_inputs(inputs, mask)
        dtype = ka_ops.logits_dtype(self.compute_dtype)
        hidden = ops.cast(inputs, dtype)
        ws1 = ops.cast(self.ws1, dtype)
        ws2 = ops.cast(self.ws2, dtype)
        # (B, T, hops) -> (B, hops, T): one distribution over time per hop.
        logits = ops.matmul(ops.tanh(ops.matmul(hidden, ws1)), ws2)
        logits = ops.swapaxes(logits, -1, -2)
        mask = ka_ops.combine_masks(
            self.num_hops, ops.shape(inputs)[1], value_mask=mask
        )
        embedding, weights = ka_ops.attend(logits, inputs, mask)
        if self.penalty_coefficient > 0:
            self.add_loss(
                self.penalty_coefficient * ka_ops.frobenius_penalty(weights)
            )
        if self.flatten:
            embedding = ops.reshape(
                embedding, (-1, self.num_hops * ops.shape(inputs)[-1])
            )
        if return_attention_scores:
            return embedding, weights
        return embedding

    def _check_inputs(self, inputs, mask):
        ops_checks.floating(type(self).__name__, inputs=inputs)
        _mask_shapes.check_mask_shape(
            type(self).__name__,
            "mask",
            mask,
            tuple(inputs.shape)[:-1],
            {"inputs": inputs.shape},
        )

    def compute_mask(self, inputs, mask=None):
        # The embedding has no time axis left to mask.
        return None

    def compute_output_shape(self, input_shape):
        batch, _, features = input_shape
        if self.flatten:
            return (batch, self.num_hops * features)
        return (batch, self.num_hops, features)

    def compute_output_spec(
        self, inputs, mask=None, return_attention_scores=False, training=None
    ):
        self._check_inputs(inputs, mask)
        embedding = keras.KerasTensor(
            self.compute_output_shape(inputs.shape), dtype=self.compute_dtype
        )
        if not return_attention_scores:
            return embedding
        batch, time, _ = inputs.shape
        weights = keras.KerasTensor(
            (batch, self.num_hops, time), dtype=self.compute_dtype
        )
        return embedding, weights

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "num_hops": self.num_hops,
            "penalty_coefficient": self.penalty_coefficient,
            "flatten": self.flatten,
            "kernel_initializer": keras.initializers.serialize(
                self.kernel_initializer
            ),
            "kernel_regularizer": keras.regularizers.serialize(
                self.kernel_regularizer
            ),
        }
