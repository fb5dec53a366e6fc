"""Soft (and key-value) attention with a pluggable score."""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention import scores as scores_lib
from keras_attention.layers import _inputs
from keras_attention.layers import _keras_scores
from keras_attention.layers import _leading_axes
from keras_attention.layers import _local_window
from keras_attention.layers import _logit_activation
from keras_attention.layers import _mask_shapes
from keras_attention.layers import _mods
from keras_attention.ops import checks as ops_checks


@keras.saving.register_keras_serializable(package="keras_attention")
class Attention(keras.layers.Layer):
    """Soft attention: `context = Σ_j softmax_j(s(q, k_j)) · v_j`.

    The weights `a_j = softmax_j(s(q, k_j))` come from a score `s` (any of
    `keras_attention.scores`) and the context is the weighted sum of the
    values. With `key` given this is key-value attention; without it the
    values serve as keys (`k = v`), the classic form of the seed articles.

    Called with one input, `Attention()(x)`, the sequence attends over
    itself (`value = key = query`, no projections): `l_t = Σ_t' a_tt' x_t'`,
    keras-self-attention's `SeqSelfAttention`, with the mask of `x`
    masking queries and keys alike. It then fits in a `Sequential` model,
    after a BiLSTM for instance.

    The query may be one vector per example, `(batch_size, dim)`, as in
    `context = Σ a_i h_i`, or a sequence `(batch_size, Tq, dim)`, each query
    attending independently. The seeds' "multiple queries, concatenated"
    attention is a query sequence followed by a reshape:
    `keras.layers.Reshape((Tq * Dv,))(Attention()(queries, values))`.

    Args:
        score: A score name (`"dot"`, `"scaled_dot"`, `"cosine"`,
            `"bilinear"`, `"additive"`, `"concat"`), a score config dict or a
            `keras_attention.scores.Score` instance such as
            `LocationScore(max_length=...)`. Defaults to `None`:
            `"scaled_dot"`, or Keras's score when `use_scale` or
            `score_mode` is given.
        dropout: Dropout rate on the attention weights during training.
            Defaults to `0.0`.
        seed: Seed of the dropout. Defaults to `None`.
        attention_width: Optional positive integer `w`: local attention,
            keras-self-attention's window. Query `i` sees keys
            `i - w // 2 <= j < i - w // 2 + w`, or with
            `use_causal_mask=True` the history `i - w < j <= i`; other keys
            get weight exactly 0. Needs a query sequence. Defaults to
            `None`, every key.
        attention_activation: Optional activation (name or callable)
            applied to the logits before the softmax, e.g. `"sigmoid"`
            (keras-self-attention's `attention_activation`). Defaults to
            `None`.
        use_attention_bias: Whether to add a trained scalar `b_a` to the
            logits (before the activation; without one it cancels in the
            softmax). Defaults to `False`.
        penalty_coefficient: Non-negative weight `c` of Lin et al.'s
            penalty `c · mean_batch ‖AAᵀ − I‖²_F` on the weights `A`, added
            with `add_loss` (keras-self-attention's
            `attention_regularizer_weight`). Defaults to `0.0`, none.
        use_scale: `keras.layers.Attention`'s argument: a trained scalar
            `scale` multiplies the logits (`"dot"`) or the sum inside the
            `tanh` (`"concat"`). Defaults to `False`.
        score_mode: `keras.layers.Attention`'s score, `"dot"` (`q·k`,
            unscaled) or `"concat"` (`c · Σ tanh(q + k)`), with Keras's
            weights (`scale`, `concat_score_weight`), so copied weights
            give Keras's numbers. Not together with `score`. Defaults to
            `None`. Differences from Keras: a masked query (or one with
            every value masked) gets zero weights where Keras returns its
            softmax; the returned weights are those before dropout.
        score_mod: Optional score mod `score_mod(score, batch, head, q_idx,
            kv_idx)` (`keras_attention.ops.mods`; `head` is `0`), applied
            to the logits after `attention_activation`, saved in the
            config. Defaults to `None`.
        mask_mod: Optional mask mod `mask_mod(batch, head, q_idx, kv_idx)`,
            ANDed with the other masks. Defaults to `None`.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        query: `(batch_size, Dq)` or `(batch_size, Tq, Dq)`, or Keras's
            list `[query, value]` / `[query, value, key]`. As in Keras,
            also `(batch_size, ..., Tq, Dq)` of any rank above 3 (a
            Conv2D's feature map, say), with `value`, `key`, the masks and
            the outputs gaining the same axes after the batch: those axes
            are folded into the batch, so a mod's `batch` index counts
            them too, row-major.
        value: `(batch_size, Tv, Dv)`. Defaults to `query`
            (self-attention).
        key: Optional `(batch_size, Tv, Dk)`. Defaults to `value`.
        query_mask: Optional boolean `(batch_size, Tq)` (or `(batch_size,)`
            for one query vector); a masked query gets zero weights and a
            zero context. Taken from `query`'s Keras mask when not given.
        value_mask: Optional boolean `(batch_size, Tv)`; `False` positions
            get weight 0. Taken from `value`'s Keras mask when not given.
        key_mask: Optional boolean `(batch_size, Tv)`, combined with
            `value_mask`. Taken from `key`'s Keras mask when not given.
        attention_mask: Optional boolean `(batch_size, Tq, Tv)` (or
            `(batch_size, Tv)` for one query vector).
        use_causal_mask: Whether query `i` only sees values `j <= i`.
            Defaults to `False`.
        return_attention_scores: Whether to also return the weights.
            Defaults to `False`.
        score_mod: Optional score mod of this call (after the
            constructor's); `head` is `0`.
        mask_mod: Optional mask mod of this call, e.g.
            `keras_attention.ops.mods.document(segment_ids)`.
        attention_bias: Optional float tensor added to the logits,
            broadcastable to `(batch_size, Tq, Tv)`.
        training: Whether dropout is active.
        mask: The Keras mask of `query` in the one-input form
            `Attention()(x)`, filled in by Keras (it fills `query_mask` and
            `value_mask` only when two or more tensors are passed); the same
            as `query_mask`, which wins when both are given. A list
            `[query_mask, value_mask]` (`keras.layers.Attention`'s form)
            gives both; explicit `query_mask` / `value_mask` win.

    Returns:
        The context, `(batch_size, Dv)` or `(batch_size, Tq, Dv)`, and with
        `return_attention_scores=True` also the post-softmax weights
        `(batch_size, Tv)` or `(batch_size, Tq, Tv)`.

    Example:

    >>> layer = keras_attention.Attention(score="additive")
    >>> query = np.random.rand(2, 16).astype("float32")
    >>> values = np.random.rand(2, 7, 16).astype("float32")
    >>> context, weights = layer(query, values, return_attention_scores=True)
    >>> tuple(context.shape), tuple(weights.shape)
    ((2, 16), (2, 7))

    References:
        - [Bahdanau et al., 2014](https://arxiv.org/abs/1409.0473)
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Lin et al., 2017](https://arxiv.org/abs/1703.03130)
        - [keras-self-attention](
          https://github.com/CyberZHG/keras-self-attention)
    """

    # Whether `call` takes keras.layers.Attention's list `[query, value]`
    # (a subclass whose `call` does not sets it to `False`).
    accepts_list_call = True

    def __init__(
        self,
        score=None,
        dropout=0.0,
        seed=None,
        attention_width=None,
        attention_activation=None,
        use_attention_bias=False,
        penalty_coefficient=0.0,
        score_mod=None,
        mask_mod=None,
        use_scale=False,
        score_mode=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.score_mod, self.mask_mod = _mods.checked(score_mod, mask_mod)
        self.use_scale = bool(use_scale)
        self.score_mode = score_mode
        score = _keras_scores.score_from(score, self.use_scale, score_mode)
        self.score = scores_lib.get(score, dtype=self.dtype_policy)
        self.dropout = _validation.rate("dropout", dropout)
        self.seed = seed
        self.attention_width = _validation.positive_int(
            "attention_width", attention_width, allow_none=True
        )
        self.attention_activation = _logit_activation.get(attention_activation)
        self.use_attention_bias = bool(use_attention_bias)
        self.penalty_coefficient = _validation.non_negative(
            "penalty_coefficient", penalty_coefficient, finite=True
        )
        self.supports_masking = True
        self._dropout_layer = keras.layers.Dropout(
            self.dropout, seed=seed, dtype=self.dtype_policy
        )

    @property
    def scale(self):
        """Keras's `scale` weight (`use_scale=True`), else `None`."""
        return getattr(self.score, "scale", None)

    @property
    def concat_score_weight(self):
        """Keras's `concat_score_weight` (`score_mode="concat"`)."""
        return getattr(self.score, "concat_score_weight", None)

    def build(
        self, query_shape=None, value_shape=None, key_shape=None, **kwargs
    ):
        # Keras's `build(input_shape=[query_shape, value_shape])`.
        query_shape = kwargs.pop("input_shape", query_shape)
        if self.accepts_list_call and _inputs.is_list_of_shapes(query_shape):
            query_shape, value_shape, key_shape = _inputs.unpack_list_call(
                query_shape, value_shape, key_shape
            )
        if value_shape is None:
            value_shape = query_shape
        if _leading_axes.is_folded(query_shape):
            _leading_axes.check(
                type(self).__name__, query_shape, value_shape, key_shape
            )
            query_shape, value_shape = map(
                _leading_axes.folded_shape, (query_shape, value_shape)
            )
            if key_shape is not None:
                key_shape = _leading_axes.folded_shape(key_shape)
        _inputs.check_query_value_key(
            type(self).__name__, query_shape, value_shape, key_shape
        )
        query_seq_shape = (
            tuple(query_shape)
            if len(query_shape) == 3
            else (query_shape[0], 1, query_shape[1])
        )
        key_shape = value_shape if key_shape is None else key_shape
        if not self.score.built:
            self.score.build(query_seq_shape, key_shape)
        if self.use_attention_bias:
            # keras-self-attention's `b_a`: a constant on every logit, which
            # only matters through `attention_activation`.
            self.attention_bias = self.add_weight(
                name="attention_bias", shape=(), initializer="zeros"
            )

    @staticmethod
    def _masks(query_mask, value_mask, key_mask, attention_mask):
        """The call's masks by name, as `_check_inputs` and the folded
        call of inputs above rank 3 take them."""
        return {
            "query_mask": query_mask,
            "value_mask": value_mask,
            "key_mask": key_mask,
            "attention_mask": attention_mask,
        }

    def _check_inputs(self, query, value, key, masks):
        """Integer inputs (a `TypeError`) and explicit masks of the wrong
        shape (a `ValueError`), each named, before any computation."""
        name = type(self).__name__
        ops_checks.floating(name, query=query, value=value, key=key)
        key_shape = None if key is None else key.shape
        if _leading_axes.is_folded(query.shape):
            # The masks are checked once folded, at the call.
            _leading_axes.check(name, query.shape, value.shape, key_shape)
            return
        _mask_shapes.check_padding_masks(
            name, query.shape, value.shape, key_shape, masks
        )
        _mask_shapes.check_attention_mask(
            name, masks["attention_mask"], query.shape, value.shape
        )

    def _weights_and_mask(
        self,
        query,
        value,
        key,
        query_mask,
        value_mask,
        key_mask,
        attention_mask,
        use_causal_mask,
    ):
        """Shared by the soft and hard layers: logits and the full mask.

        Without `value` the query sequence attends over itself, its mask
        masking queries and keys alike.
        """
        if value is None:
            value = query
            if value_mask is None:
                value_mask = query_mask
        masks = self._masks(query_mask, value_mask, key_mask, attention_mask)
        self._check_inputs(query, value, key, masks)
        name = type(self).__name__
        query, query_mask, attention_mask, squeeze = _inputs.as_query_sequence(
            query, query_mask, attention_mask, use_causal_mask, name
        )
        key = value if key is None else key
        band = None
        if self.attention_width is not None:
            _local_window.check_query(name, squeeze)
            band = _local_window.band(self.attention_width, use_causal_mask)
        mask = ka_ops.combine_masks(
            ops.shape(query)[1],
            ops.shape(value)[1],
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            band=band,
        )
        logits = self._calculate_scores(query, key)
        if self.use_attention_bias:
            logits = logits + ops.cast(self.attention_bias, logits.dtype)
        logits = _logit_activation.apply(logits, self.attention_activation)
        return logits, mask, squeeze

    def call(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        mask=None,
        score_mod=None,
        mask_mod=None,
        attention_bias=None,
    ):
        query, value, key = _inputs.unpack_list_call(query, value, key)
        query_mask, value_mask, key_mask, mask = _inputs.list_masks(
            query_mask, value_mask, key_mask, mask
        )
        query_mask, value_mask = _inputs.keras_masks(
            type(self).__name__, mask, query_mask, value_mask
        )
        if _leading_axes.is_folded(query.shape):
            return _leading_axes.call(
                type(self).__name__,
                self.call,
                query,
                value,
                key,
                {
                    **self._masks(
                        query_mask, value_mask, key_mask, attention_mask
                    ),
                    "attention_bias": attention_bias,
                },
                use_causal_mask=use_causal_mask,
                return_attention_scores=return_attention_scores,
                training=training,
                score_mod=score_mod,
                mask_mod=mask_mod,
            )
        logits, mask, squeeze = self._weights_and_mask(
            query,
            value,
            key,
            query_mask,
            value_mask,
            key_mask,
            attention_mask,
            use_causal_mask,
        )
        logits, mask = _mods.apply_to_logits(
            logits,
            mask,
            score_mods=(self.score_mod, score_mod),
            mask_mods=(self.mask_mod, mask_mod),
            bias=attention_bias,
        )
        context, weights = ka_ops.attend(
            logits,
            query if value is None else value,
            mask,
            dropout_fn=lambda w: self._dropout_layer(w, training=training),
        )
        if self.penalty_coefficient > 0:
            self.add_loss(
                self.penalty_coefficient * ka_ops.frobenius_penalty(weights)
            )
        if squeeze:
            context = ops.squeeze(context, 1)
            weights = ops.squeeze(weights, 1)
        if return_attention_scores:
            return context, weights
        return context

    def _calculate_scores(self, query, key):
        """The logits `(batch_size, Tq, Tv)`, Keras's override point."""
        return self.score(query, key)

    def _calculate_score_mask(self, scores, v_mask, use_causal_mask):
        """Keras's score mask: `v_mask` `(batch_size, Tv)` with causality."""
        if not use_causal_mask:
            return v_mask
        shape = ops.shape(scores)
        mask = ka_ops.combine_masks(
            shape[-2], shape[-1], value_mask=v_mask, use_causal_mask=True
        )
        # Keras's shape: `(1, Tq, Tv)` without `v_mask`.
        return mask if len(mask.shape) == 3 else ops.expand_dims(mask, 0)

    def compute_mask(self, inputs, mask=None):
        # The output has the query's positions, so the query's mask.
        if isinstance(mask, (list, tuple)):
            mask = mask[0] if mask else None
        return None if mask is None else ops.convert_to_tensor(mask)

    def compute_output_shape(
        self, query_shape=None, value_shape=None, key_shape=None, **kwargs
    ):
        query_shape = kwargs.pop("input_shape", query_shape)
        if self.accepts_list_call and _inputs.is_list_of_shapes(query_shape):
            query_shape, value_shape, key_shape = _inputs.unpack_list_call(
                query_shape, value_shape, key_shape
            )
        value_shape = query_shape if value_shape is None else value_shape
        return tuple(query_shape[:-1]) + (value_shape[-1],)

    def compute_output_spec(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        mask=None,
        score_mod=None,
        mask_mod=None,
        attention_bias=None,
    ):
        query, value, key = _inputs.unpack_list_call(query, value, key)
        query_mask, value_mask, key_mask, mask = _inputs.list_masks(
            query_mask, value_mask, key_mask, mask
        )
        query_mask, value_mask = _inputs.keras_masks(
            type(self).__name__, mask, query_mask, value_mask
        )
        value = query if value is None else value
        self._check_inputs(
            query,
            value,
            key,
            self._masks(query_mask, value_mask, key_mask, attention_mask),
        )
        shape = self.compute_output_shape(query.shape, value.shape)
        context = keras.KerasTensor(shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return context
        weights_shape = tuple(query.shape[:-1]) + (value.shape[-2],)
        return context, keras.KerasTensor(
            weights_shape, dtype=self.compute_dtype
        )

    def get_config(self):
        return {
            **super().get_config(),
            "score": scores_lib.serialize(self.score),
            "dropout": self.dropout,
            "seed": self.seed,
            "attention_width": self.attention_width,
            "attention_activation": _logit_activation.serialize(
                self.attention_activation
            ),
            "use_attention_bias": self.use_attention_bias,
            "penalty_coefficient": self.penalty_coefficient,
            "score_mod": _mods.serialize("score_mod", self.score_mod),
            "mask_mod": _mods.serialize("mask_mod", self.mask_mod),
            **self._keras_config(),
        }

    def _keras_config(self):
        """Keras's arguments; the score is then theirs, not ours."""
        if self.score_mode is None and not self.use_scale:
            return {}
        return {
            "score": None,
            "use_scale": self.use_scale,
            "score_mode": self.score_mode,
        }
