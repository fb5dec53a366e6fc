"""Grouped-query attention (Ainslie et al.) on `flex_attention`."""

import keras
from keras import ops

from keras_attention import _policies
from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention import scores as scores_lib
from keras_attention.layers import _cache
from keras_attention.layers import _grouped as grouped
from keras_attention.layers import _mods
from keras_attention.layers import _multi_head_checks as checks
from keras_attention.layers import _projections


def _and_mods(*mods):
    return ka_ops.masks.AttentionMasks(mask_mods=mods).mask_mod()


def _positive_or_none(name, value):
    return _validation.positive_int(name, value, allow_none=True)


@keras.saving.register_keras_serializable(package="keras_attention")
class GroupedQueryAttention(keras.layers.Layer):
    """Grouped-query attention, a drop-in for Keras's `GroupQueryAttention`.

    `num_query_heads` query heads share `num_key_value_heads` key/value
    heads (Ainslie et al. 2023): query head `h` attends with key/value head
    `h // (num_query_heads // num_key_value_heads)`; one K/V head is
    multi-query attention, as many as query heads is multi-head attention.
    Keras's constructor, call and variables (`query`, `key`, [`gate`],
    `value`, `attention_output`, in that order and shape), so
    `ours.set_weights(keras_layer.get_weights())` gives Keras's outputs and
    scores. The K/V heads are never repeated in memory (Keras repeats
    them): the query heads of a group are folded into the query axis of
    the fused kernel `keras_attention.ops.dot_product_attention`, or, when
    the weights are returned, with dropout or mods, broadcast inside
    `keras_attention.ops.flex_attention`, whose blocks take long sequences
    (memory linear in the length). Beyond Keras: a pluggable `score` (as
    on `MultiHeadAttention`), `score_mod` / `mask_mod`,
    `chunk_size`, `rotary_embedding`, a key/value cache for decoding, and
    a query whose keys are all masked gets zero weights and a zero context
    (Keras: uniform weights). The projections' `kernel_initializer`,
    `bias_initializer`, `kernel_regularizer`, `bias_regularizer`,
    `activity_regularizer`, `kernel_constraint` and `bias_constraint`
    are Keras's arguments.

    Args:
        head_dim: Size of each attention head.
        num_query_heads: Number of query heads.
        num_key_value_heads: Number of key/value heads; divides
            `num_query_heads`.
        dropout: Dropout rate on the attention weights. Defaults to `0.0`.
        use_bias: Whether the projections have biases. Defaults to `True`.
        sliding_window: Optional positive integer `w`: query `i` sees keys
            `|i - j| < w` (with `use_causal_mask`, the `w` most recent).
            Defaults to `None`.
        flash_attention: Keras's flag. `True` refuses dropout and
            returning scores, as Keras does; the kernel is ours either way.
            Defaults to `None`.
        use_gate: Whether a sigmoid gate of the query multiplies each
            head's output (Keras's `gate` projection). Defaults to `False`.
        seed: Seed of the dropout. Defaults to `None`.
        chunk_size: `None` (blocks when the dense weights would be large
            and no scores are asked for), `0` (dense) or the block size.
            Defaults to `None`.
        rotary_embedding: Optional `keras_attention.RotaryEmbedding`,
            applied to the projected queries and keys at their positions
            (which follow `cache_update_index`). Defaults to `None`.
        score_mod: Optional score mod of `keras_attention.ops.mods` (e.g.
            `soft_cap(cap)`, `alibi(num_heads)`) on every call, saved with
            the layer. Defaults to `None`.
        mask_mod: Optional mask mod (e.g. `sliding_window(w)`,
            `prefix_lm(n)`) on every call. Defaults to `None`.
        score: The score of `MultiHeadAttention`: a name (`"scaled_dot"`,
            `"dot"`, `"cosine"`, `"bilinear"`, `"additive"`, `"concat"`),
            a score config dict or a `keras_attention.scores.Score`,
            shared by the heads (its weights come after Keras's variables).
            A dot-product score transforms the queries and keys and runs
            in the fused, flex or chunked kernels; any other (additive,
            concat, location) attends densely with the query heads of a
            group folded into the query axis (K/V still not repeated),
            or, for additive and concat with a positive `chunk_size` (or
            `None` and large weights) on an uncached call, in the blocks
            of `keras_attention.ops.chunked_attention`, one call per
            position in the group, which take padding masks, causal
            masking and `sliding_window` but not `attention_mask`; it
            refuses mods and flash attention.
            Defaults to `"scaled_dot"`.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        query: `(batch_size, Tq, dim)`.
        value: `(batch_size, Tv, dim)`.
        key: Optional `(batch_size, Tv, dim)`. Defaults to `value`.
        query_mask, value_mask, key_mask: Optional boolean padding masks
            (taken from the inputs' Keras masks).
        attention_mask: Optional boolean `(batch_size, Tq, Tv)`; with a
            cache `(batch_size, Tq, max_length)`.
        return_attention_scores: Whether to also return the weights
            `(batch_size, num_query_heads, Tq, Tv)`. Defaults to `False`.
        training: Whether dropout is active.
        use_causal_mask: Whether query `i` only sees keys `j <= i`.
        cache: Optional `(batch_size, 2, max_length, num_key_value_heads,
            head_dim)` keys and values (keras-hub's layout).
        cache_update_index: Where the call's keys and values are written
            in `cache`; `None` attends to the cache as it is.
        score_mod: Optional `flex_attention` score mod, after the
            constructor's.
        mask_mod: Optional `flex_attention` mask mod, ANDed with the
            constructor's.

    Returns:
        The output `(batch_size, Tq, dim)`; then the scores with
        `return_attention_scores=True`; then the updated cache when a
        cache is given.

    Example:

    >>> layer = keras_attention.GroupedQueryAttention(
    ...     head_dim=4, num_query_heads=4, num_key_value_heads=2
    ... )
    >>> x = np.random.rand(2, 5, 8).astype("float32")
    >>> out, scores = layer(x, x, return_attention_scores=True)
    >>> tuple(out.shape), tuple(scores.shape)
    ((2, 5, 8), (2, 4, 5, 5))

    References:
        - [Ainslie et al., 2023](https://arxiv.org/abs/2305.13245)
        - [Shazeer, 2019](https://arxiv.org/abs/1911.02150)
    """

    def __init__(
        self,
        head_dim,
        num_query_heads,
        num_key_value_heads,
        dropout=0.0,
        use_bias=True,
        sliding_window=None,
        flash_attention=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        use_gate=False,
        seed=None,
        chunk_size=None,
        rotary_embedding=None,
        score_mod=None,
        mask_mod=None,
        score="scaled_dot",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.supports_masking = True
        self.head_dim = _validation.positive_int("head_dim", head_dim)
        self.num_query_heads = _validation.positive_int(
            "num_query_heads", num_query_heads
        )
        self.num_key_value_heads = _validation.positive_int(
            "num_key_value_heads", num_key_value_heads
        )
        if num_query_heads % num_key_value_heads:
            raise ValueError(
                "`num_query_heads` must be divisible by "
                "`num_key_value_heads`. Received: "
                f"num_query_heads={num_query_heads}, "
                f"num_key_value_heads={num_key_value_heads}"
            )
        self.num_repeats = num_query_heads // num_key_value_heads
        self.dropout = _validation.rate("dropout", dropout)
        self.use_bias = bool(use_bias)
        self.use_gate = bool(use_gate)
        self.sliding_window = _positive_or_none(
            "sliding_window", sliding_window
        )
        self.flash_attention = flash_attention
        # Keras's rule: the argument, or else the global setting.
        self._flash_attention = bool(
            flash_attention or keras.config.is_flash_attention_enabled()
        )
        # Built and tracked in `build`, after Keras's variables.
        self._score_holder = grouped.Untracked(
            scores_lib.get(score, dtype=self.dtype_policy)
        )
        checks.flash_attention(self._flash_attention, self.score, self.dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.projection_activity_regularizer = keras.regularizers.get(
            activity_regularizer
        )
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.seed = seed
        self.chunk_size = checks.chunk_size(
            chunk_size, self.score, self.dropout
        )
        self.rotary_embedding = _cache.get_rotary(rotary_embedding)
        self.score_mod, self.mask_mod = _mods.checked(score_mod, mask_mod)
        grouped.check_score(self.score, (score_mod, mask_mod))
        self._dropout_layer = keras.layers.Dropout(
            self.dropout, seed=seed, dtype=self.dtype_policy
        )
        self._return_attention_scores = False
        self._call_mods = (None, None)

    def _get_common_kwargs_for_sublayer(self):
        """Keras's hook: what every projection shares (fresh initializers)."""
        return {
            "kernel_initializer": _projections.clone_initializer(
                self.kernel_initializer
            ),
            "bias_initializer": _projections.clone_initializer(
                self.bias_initializer
            ),
            "kernel_regularizer": self.kernel_regularizer,
            "bias_regularizer": self.bias_regularizer,
            "activity_regularizer": self.projection_activity_regularizer,
            "kernel_constraint": self.kernel_constraint,
            "bias_constraint": self.bias_constraint,
            "dtype": self.dtype_policy,
        }

    def _dense(self, name, equation, heads, bias_axes, activation=None):
        output_shape = (None, heads, self.head_dim) if heads else (None, None)
        return keras.layers.EinsumDense(
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes if self.use_bias else None,
            activation=activation,
            name=name,
            **self._get_common_kwargs_for_sublayer(),
        )

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        grouped.check_shapes(query_shape, value_shape, key_shape)
        self.feature_dim = query_shape[-1]
        q_heads, kv_heads = self.num_query_heads, self.num_key_value_heads
        self._query_dense = self._dense("query", "bqm,muh->bquh", q_heads, "uh")
        self._query_dense.build(query_shape)
        self._key_dense = self._dense("key", "bkm,mvh->bkvh", kv_heads, "vh")
        self._key_dense.build(key_shape)
        if self.use_gate:
            self._gate_dense = self._dense(
                "gate", "bqm,muh->bquh", q_heads, "uh", activation="sigmoid"
            )
            self._gate_dense.build(query_shape)
        self._value_dense = self._dense(
            "value", "bkm,mvh->bkvh", kv_heads, "vh"
        )
        self._value_dense.build(value_shape)
        self._output_dense = keras.layers.EinsumDense(
            "bquh,uhm->bqm",
            output_shape=(None, self.feature_dim),
            bias_axes="m" if self.use_bias else None,
            name="attention_output",
            **self._get_common_kwargs_for_sublayer(),
        )
        self._output_dense.build((None, None, q_heads, self.head_dim))
        # Tracked only now, so that score weights follow Keras's variables.
        self._score_layer = self.score
        if not self.score.built:
            shape = (query_shape[0], kv_heads, None, self.head_dim)
            self.score.build(shape, shape)

    @property
    def score(self):
        """The score layer, shared by all heads."""
        return self._score_holder.value

    @property
    def query_dense(self):
        return self._query_dense

    @property
    def key_dense(self):
        return self._key_dense

    @property
    def value_dense(self):
        return self._value_dense

    @property
    def output_dense(self):
        return self._output_dense

    def _compute_attention_mask(
        self,
        query,
        value,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
    ):
        """Keras's hook: the boolean mask `(batch_size, Tq, Tv)` or `None`."""
        if attention_mask is not None:
            attention_mask = ops.cast(attention_mask, "bool")
        return ka_ops.combine_masks(
            ops.shape(query)[1],
            ops.shape(value)[1],
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            sliding_window=self.sliding_window,
        )

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        use_causal_mask=False,
    ):
        """Keras's hook: `(output (B, Tq, H, head_dim), scores or None)`
        on the projected tensors. Unlike Keras, `key` and `value` keep
        their `num_key_value_heads` heads (they are not repeated); the
        call's `score_mod` / `mask_mod` and `return_attention_scores` are
        read from the layer, as Keras reads the latter."""
        score_mod, mask_mod = self._call_mods
        return_attention_scores = self._return_attention_scores
        if not self.score.is_dot_product:
            return self._score_attention(
                query, key, value, attention_mask, training, use_causal_mask
            )
        if use_causal_mask:
            mask_mod = _and_mods(ka_ops.mods.causal(), mask_mod)
        if self._flash_attention and return_attention_scores:
            raise ValueError(
                "Returning attention scores is not supported when flash "
                "attention is enabled. Please disable flash attention to "
                "access attention scores."
            )
        dropout = self.dropout > 0 and training
        need_weights = return_attention_scores or dropout
        query, key, scale = self.score.dot_product_form(query, key)
        scale = 1.0 if scale is None else scale
        if not (need_weights or score_mod or mask_mod) and grouped.folds(
            self, query, key
        ):
            if attention_mask is not None:
                attention_mask = ops.broadcast_to(
                    ops.cast(attention_mask, "bool"),
                    (ops.shape(query)[0], query.shape[1], key.shape[1]),
                )
            return grouped.folded_attention(
                query, key, value, attention_mask, scale
            ), None
        batch, q_len = ops.shape(query)[0], ops.shape(query)[1]
        k_len = ops.shape(key)[1]
        tensor_mask = None
        if attention_mask is not None:
            tensor_mask = grouped.TensorMask(
                attention_mask, batch, q_len, k_len
            )
        mask_mod = _and_mods(tensor_mask, mask_mod)
        result = ka_ops.flex_attention(
            query,
            key,
            value,
            score_mod=score_mod,
            mask_mod=mask_mod,
            scale=scale,
            chunk_size=0 if need_weights else self.chunk_size,
            return_attention_scores=need_weights,
        )
        if not need_weights:
            return result, None
        output, weights = result
        if dropout:
            dropped = self._dropout_layer(weights, training=training)
            output = grouped.grouped_weighted_sum(
                dropped, ops.cast(value, dropped.dtype)
            )
        return output, weights

    def _score_attention(
        self, query, key, value, mask, training, use_causal_mask
    ):
        """`(output, scores or None)` of a score with no dot-product form:
        dense, the query heads of a group folded into its query axis."""
        grouped.check_score(self.score, self._call_mods)
        if use_causal_mask:
            mask = ka_ops.combine_masks(
                ops.shape(query)[1],
                ops.shape(key)[1],
                attention_mask=mask,
                use_causal_mask=True,
            )
        weights = grouped.score_weights(self.score, query, key, mask)
        used = weights
        if self.dropout > 0 and training:
            used = self._dropout_layer(weights, training=training)
        output = grouped.grouped_weighted_sum(used, ops.cast(value, used.dtype))
        if not self._return_attention_scores:
            return output, None
        # The weights in the layer's dtype, as on the dot-product paths.
        return output, ops.cast(weights, self.compute_dtype)

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
        score_mod=None,
        mask_mod=None,
    ):
        name = type(self).__name__
        _validation.floating_inputs(name, query=query, value=value, key=key)
        _cache.check_cache(name, cache, cache_update_index)
        key = value if key is None else key
        gate = self._gate_dense(query) if self.use_gate else None
        start = _cache.start_of(cache_update_index)
        query_heads = _cache.rotate(
            self.rotary_embedding, self._query_dense(query), start
        )
        key_heads, value_heads, cache = self._keys_values(
            key, value, cache, cache_update_index
        )
        self._return_attention_scores = return_attention_scores
        block = grouped.cached_score_block(
            self, query_heads, key_heads, cache, attention_mask, training
        )
        if block[0]:
            grouped.check_score(self.score, (score_mod, mask_mod))
            output = grouped.chunked_score_attention(
                self.score,
                query_heads,
                key_heads,
                value_heads,
                grouped.padding_masks(
                    self, query_mask, value_mask, key_mask, use_causal_mask
                ),
                block,
            )
            return self._outputs(output, None, None, gate, False)
        padding = {
            "query_mask": query_mask,
            "value_mask": value_mask,
            "key_mask": key_mask,
        }
        mask = self._call_mask(
            query,
            value,
            key_heads,
            cache,
            start,
            padding,
            attention_mask,
            use_causal_mask,
        )
        # The mods read absolute positions: the queries of a cached call
        # begin at `cache_update_index`.
        self._call_mods = (
            _cache.shifted(
                _mods.score_mod_of(self.score_mod, score_mod, None), start
            ),
            _cache.shifted(_and_mods(self.mask_mod, mask_mod), start),
        )
        output, scores = self._compute_attention(
            query_heads, key_heads, value_heads, mask, training
        )
        return self._outputs(
            output, scores, cache, gate, return_attention_scores
        )

    def _call_mask(
        self, query, value, keys, cache, start, padding, attention_mask, causal
    ):
        """The dense path's boolean mask: Keras's hook without a cache,
        the cache's slots (`_cache.cache_mask`) with one."""
        if cache is None:
            return self._compute_attention_mask(
                query,
                value,
                **padding,
                attention_mask=attention_mask,
                use_causal_mask=causal,
            )
        masks = {"attention_mask": attention_mask, "use_causal_mask": causal}
        return _cache.cache_mask(
            query,
            keys,
            masks,
            start,
            heads_axis=False,
            sliding_window=self.sliding_window,
        )

    def _outputs(self, output, scores, cache, gate, return_attention_scores):
        """The call's result from the heads' `(B, Tq, H, head_dim)`."""
        output = ops.cast(output, self.compute_dtype)
        if gate is not None:
            output = output * ops.cast(gate, output.dtype)
        output = self._output_dense(output)
        return _cache.outputs(output, scores, cache, return_attention_scores)

    def _keys_values(self, key, value, cache, cache_update_index):
        """Projected (and rotated) keys and values, through the cache."""
        start = _cache.start_of(cache_update_index)

        def project_key():
            keys = self._key_dense(key)
            return _cache.rotate(self.rotary_embedding, keys, start)

        if cache is None:
            return project_key(), self._value_dense(value), None
        cache = ops.cast(cache, self.compute_dtype)
        return _cache.cached_keys_values(
            cache,
            cache_update_index,
            project_key,
            lambda: self._value_dense(value),
        )

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        grouped.check_shapes(query_shape, value_shape, key_shape)
        return tuple(query_shape)

    def compute_output_spec(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
        score_mod=None,
        mask_mod=None,
    ):
        _cache.check_cache(type(self).__name__, cache, cache_update_index)
        return grouped.output_spec(
            self, query, value, key, cache, return_attention_scores
        )

    def get_config(self):
        serialize = keras.saving.serialize_keras_object
        return {
            **super().get_config(),
            "head_dim": self.head_dim,
            "num_query_heads": self.num_query_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "use_bias": self.use_bias,
            "use_gate": self.use_gate,
            "sliding_window": self.sliding_window,
            "dropout": self.dropout,
            "flash_attention": self.flash_attention,
            **_projections.projection_config(self),
            "seed": self.seed,
            "chunk_size": self.chunk_size,
            "rotary_embedding": None
            if self.rotary_embedding is None
            else serialize(self.rotary_embedding),
            "score_mod": _mods.serialize("score_mod", self.score_mod),
            "mask_mod": _mods.serialize("mask_mod", self.mask_mod),
            "score": scores_lib.serialize(self.score),
            "dtype": self._dtype_policy_config(),
        }

    def _dtype_policy_config(self):
        """The dtype policy, with the projections' own after `quantize`."""
        if not self.built:
            return keras.dtype_policies.serialize(self.dtype_policy)
        denses = [self._query_dense, self._key_dense, self._value_dense]
        denses += [getattr(self, "_gate_dense", None), self._output_dense]
        return _policies.policy_config(self, denses)


GroupQueryAttention = GroupedQueryAttention
