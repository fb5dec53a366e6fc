"""BERT-style multi-head self-attention on one input sequence."""

import keras

from keras_attention import _validation
from keras_attention.layers import _mask_shapes
from keras_attention.layers._layer_call import LayerCall
from keras_attention.layers._multi_head_base import MultiHeadBase
from keras_attention.ops import checks as ops_checks


@keras.saving.register_keras_serializable(package="keras_attention")
class SelfAttention(MultiHeadBase, hooks_are_defaults=True):
    """Multi-head self-attention: `softmax(Q Kᵀ / sqrt(d_k)) V` on one input.

    With `H` the input sequence, each head projects `Q = H W_q`, `K = H W_k`,
    `V = H W_v` and computes `softmax(Q Kᵀ / sqrt(d_k)) V`; the heads are
    concatenated and projected back to the input depth, so the output has the
    shape of the input (the attention block of BERT and the Transformer
    encoder).

    The variables are those of `keras.layers.MultiHeadAttention` called as
    `mha(x, x)` with `output_shape=None` (`query`, `key`, `value` and
    `attention_output` kernels and biases), so its weights can be copied
    with `set_weights`. Padded positions (a Keras mask, e.g. from
    `Embedding(mask_zero=True)`) are neither attended to nor attend: their
    weights are all zero, and the mask is passed on to the output.

    Args:
        num_heads: Number of attention heads. Defaults to `1`.
        key_dim: Size of each head for query and key. Defaults to `None`,
            meaning `input_dim // num_heads`.
        value_dim: Size of each head for value. Defaults to `None`, meaning
            `key_dim`.
        dropout: Dropout rate on the attention weights. Defaults to `0.0`.
        use_bias: Whether the projections have biases. Defaults to `True`.
        attention_width: Optional positive integer `w`: local attention,
            keras-self-attention's window: position `i` sees
            `i - w // 2 <= j < i - w // 2 + w`, or with
            `use_causal_mask=True` the history `i - w < j <= i`. An odd
            centred `w` is `MultiHeadAttention(sliding_window=(w + 1) // 2)`
            and a causal `w` is `sliding_window=w`. Defaults to `None`.

    Keyword Args:
        kernel_initializer: Initializer of the kernels. Defaults to
            `"glorot_uniform"`.
        bias_initializer: Initializer of the biases. Defaults to `"zeros"`.
        kernel_regularizer: Optional regularizer of the kernels.
        bias_regularizer: Optional regularizer of the biases.
        activity_regularizer: Optional regularizer of each projection's
            output (query, key, value and output projections).
        kernel_constraint: Optional constraint of the kernels.
        bias_constraint: Optional constraint of the biases.
        seed: Seed of the dropout. Defaults to `None`.
        score: Any `keras_attention.scores` identifier, shared by the heads.
            Defaults to `"scaled_dot"`, the formula above.
        chunk_size: Memory-efficient attention for long sequences, chosen
            and limited as `MultiHeadAttention`'s `chunk_size` says (`None`
            picks the blocks by itself, `0` is dense, a positive value is
            the block size); the blocks also skip what `attention_width`
            leaves out. Defaults to `None`.
        attention_activation: As `MultiHeadAttention`'s: an activation of
            the logits. Defaults to `None`.
        penalty_coefficient: As `MultiHeadAttention`'s: Lin et al.'s
            penalty. Defaults to `0.0`.
        score_mod: As `MultiHeadAttention`'s: a flex score mod, saved in
            the config. Defaults to `None`.
        mask_mod: As `MultiHeadAttention`'s: a flex mask mod, saved in the
            config. Defaults to `None`.
        rotary_embedding: As `MultiHeadAttention`'s: rotary positions of
            the projected queries and keys. Defaults to `None`.
        use_sinks: As `MultiHeadAttention`'s: a learned sink logit per
            head (gpt-oss). Defaults to `False`.
        flash_attention: As `MultiHeadAttention`'s. Defaults to `None`.
        use_gate: As `MultiHeadAttention`'s. Defaults to `False`.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        inputs: `(batch_size, T, dim)`.
        mask: Optional boolean `(batch_size, T)`; `False` marks padding.
            Taken from the inputs' Keras mask when not given.
        attention_mask: Optional boolean `(batch_size, T, T)`, `(T, T)` or
            `(batch_size, num_heads, T, T)`; `True` = attend.
        use_causal_mask: Whether position `i` only sees positions `j <= i`.
            Defaults to `False`.
        return_attention_scores: Whether to also return the weights.
            Defaults to `False`.
        score_mod: Optional score mod of this call, applied after the
            constructor's (e.g. one that reads per-batch tensors).
        mask_mod: Optional mask mod of this call, e.g.
            `keras_attention.ops.mods.document(segment_ids)`.
        attention_bias: Optional float tensor added to the logits,
            broadcastable to `(batch_size, num_heads, Tq, Tk)`.
        training: Whether dropout is active.
        inputs_mask: Filled in by Keras with the inputs' Keras mask when
            another tensor (`attention_mask`) is passed, where Keras leaves
            `mask` empty; used when `mask` is not given, so that a padding
            mask and an `attention_mask` always combine. Pass `mask`
            yourself instead.

    Returns:
        The output `(batch_size, T, dim)`, and with
        `return_attention_scores=True` also the post-softmax weights
        `(batch_size, num_heads, T, T)`.

    Example:

    >>> layer = keras_attention.SelfAttention(num_heads=4)
    >>> x = np.random.rand(2, 10, 32).astype("float32")
    >>> output, weights = layer(x, return_attention_scores=True)
    >>> tuple(output.shape), tuple(weights.shape)
    ((2, 10, 32), (2, 4, 10, 10))

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Devlin et al., 2018](https://arxiv.org/abs/1810.04805)
    """

    def __init__(
        self,
        num_heads=1,
        key_dim=None,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        attention_width=None,
        **kwargs,
    ):
        super().__init__(
            num_heads, key_dim, value_dim, dropout, use_bias, **kwargs
        )
        self.attention_width = _validation.positive_int(
            "attention_width", attention_width, allow_none=True
        )
        self._set_window(attention_width=self.attention_width)

    def _check_shape(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "SelfAttention expects inputs of shape `(batch_size, T, dim)` "
                "with a known `dim`. Received: "
                f"input.shape={tuple(input_shape)}"
            )

    def build(self, input_shape):
        self._check_shape(input_shape)
        dim = input_shape[-1]
        key_dim = self.key_dim
        if key_dim is None:
            if dim % self.num_heads:
                raise ValueError(
                    "With `key_dim=None`, the input depth must be divisible "
                    f"by `num_heads`. Received: num_heads={self.num_heads}, "
                    f"input.shape={tuple(input_shape)}"
                )
            key_dim = dim // self.num_heads
        value_dim = self.value_dim or key_dim
        self._build_layers(
            input_shape,
            input_shape,
            input_shape,
            key_dim,
            value_dim,
            (dim,),
            gate=self.use_gate,
        )

    def call(
        self,
        inputs,
        mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        inputs_mask=None,
        score_mod=None,
        mask_mod=None,
        attention_bias=None,
        cache=None,
        cache_update_index=None,
        cache_update_mask=None,
    ):
        ops_checks.floating(type(self).__name__, inputs=inputs)
        if mask is None:
            mask = inputs_mask
        return self._attention_call(
            LayerCall(
                inputs,
                inputs,
                query_mask=mask,
                value_mask=mask,
                attention_mask=attention_mask,
                use_causal_mask=use_causal_mask,
                cache=cache,
                cache_update_index=cache_update_index,
                cache_update_mask=cache_update_mask,
                training=training,
                return_weights=return_attention_scores,
                score_mod=score_mod,
                mask_mod=mask_mod,
                attention_bias=attention_bias,
                names=("inputs",) * 3,
            )
        )

    def _check_masks(self, query_shape, value_shape, key_shape, masks):
        """The padding `mask` and `attention_mask` against `inputs`."""
        name = type(self).__name__
        inputs = {"inputs": query_shape}
        _mask_shapes.check_mask_shape(
            name, "mask", masks.get("query_mask"), query_shape[:-1], inputs
        )
        _mask_shapes.check_attention_mask(
            name,
            masks.get("attention_mask"),
            query_shape,
            query_shape,
            self.num_heads,
            inputs,
        )

    def compute_output_shape(self, input_shape):
        self._check_shape(input_shape)
        return tuple(input_shape)

    def compute_output_spec(
        self,
        inputs,
        mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        inputs_mask=None,
        score_mod=None,
        mask_mod=None,
        attention_bias=None,
    ):
        ops_checks.floating(type(self).__name__, inputs=inputs)
        shape = self.compute_output_shape(inputs.shape)
        padding = inputs_mask if mask is None else mask
        self._check_masks(
            inputs.shape,
            inputs.shape,
            inputs.shape,
            {
                "query_mask": padding,
                "attention_mask": attention_mask,
            },
        )
        output = keras.KerasTensor(shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        weights_shape = (shape[0], self.num_heads, shape[1], shape[1])
        return output, keras.KerasTensor(
            weights_shape, dtype=self.compute_dtype
        )

    def get_config(self):
        return {**super().get_config(), "attention_width": self.attention_width}
