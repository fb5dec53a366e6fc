"""Grouped-query attention (Ainslie et al.): the multi-head engine with
fewer key/value heads than query heads, Keras's constructor and names."""

import keras

from keras_attention import _validation
from keras_attention.layers import _cache
from keras_attention.layers import _multi_head_checks as checks
from keras_attention.layers._multi_head_base import MultiHeadBase


def _positive_or_none(name, value):
    return _validation.positive_int(name, value, allow_none=True)


@keras.saving.register_keras_serializable(package="keras_attention")
class GroupedQueryAttention(MultiHeadBase, hooks_are_defaults=True):
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

    # Flash attention refuses dropout and scores, as Keras's flag does; the
    # kernel is this package's fused one either way.
    keras_flash_kernel = False

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
        positive = _validation.positive_int
        heads = positive("num_query_heads", num_query_heads)
        kv_heads = positive("num_key_value_heads", num_key_value_heads)
        if heads % kv_heads:
            raise ValueError(
                "`num_query_heads` must be divisible by "
                "`num_key_value_heads`. Received: "
                f"num_query_heads={num_query_heads}, "
                f"num_key_value_heads={num_key_value_heads}"
            )
        super().__init__(
            num_heads=heads,
            key_dim=positive("head_dim", head_dim),
            value_dim=head_dim,
            dropout=dropout,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            seed=seed,
            score=score,
            chunk_size=chunk_size,
            score_mod=score_mod,
            mask_mod=mask_mod,
            num_key_value_heads=kv_heads,
            rotary_embedding=rotary_embedding,
            **kwargs,
        )
        self.head_dim, self.num_query_heads = head_dim, heads
        self.num_key_value_heads, self.num_repeats = kv_heads, heads // kv_heads
        self.use_gate = bool(use_gate)
        self.sliding_window = _positive_or_none(
            "sliding_window", sliding_window
        )
        self._sliding_window = self.sliding_window
        self.flash_attention = flash_attention
        # Keras's rule: the argument, or else the global setting.
        self._flash_attention = bool(
            flash_attention or keras.config.is_flash_attention_enabled()
        )
        checks.flash_attention(self._flash_attention, self.score, self.dropout)
        self._check_plan()

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        _check_shapes(query_shape, value_shape, key_shape)
        self.feature_dim = query_shape[-1]
        self._build_layers(
            query_shape,
            key_shape,
            value_shape,
            self.head_dim,
            self.head_dim,
            (self.feature_dim,),
            gate=self.use_gate,
        )

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
        masks = dict(
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )
        return self._dense_mask(query, value, masks, heads_axis=False)

    def _call_compute_attention(self, q, k, v, mask, training, weights):
        # Keras's hook reads whether to return the scores from the layer.
        self._return_attention_scores = weights
        return self._compute_attention(q, k, v, mask, training)

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
        on the projected tensors; `key` and `value` keep their
        `num_key_value_heads` heads (never repeated), and whether to return
        the scores is read from the layer, as Keras does."""
        return super()._compute_attention(
            query,
            key,
            value,
            attention_mask,
            training,
            self._return_attention_scores,
            use_causal_mask,
        )

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
        key = value if key is None else key
        masks = {
            "query_mask": query_mask,
            "value_mask": value_mask,
            "key_mask": key_mask,
            "attention_mask": attention_mask,
            "use_causal_mask": use_causal_mask,
        }
        return self._attention_call(
            (query, value, key, cache, cache_update_index),
            masks,
            training,
            return_attention_scores,
            (score_mod, mask_mod, None),
        )

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        _check_shapes(query_shape, value_shape, key_shape)
        return tuple(query_shape)

    def compute_output_spec(
        self,
        query,
        value,
        key=None,
        return_attention_scores=False,
        cache=None,
        cache_update_index=None,
        **kwargs,
    ):
        """The output, then the scores `(B, num_query_heads, Tq, Tk or
        max_length)`, then the cache."""
        _cache.check_cache(type(self).__name__, cache, cache_update_index)
        shape = self.compute_output_shape(
            query.shape, value.shape, None if key is None else key.shape
        )
        dtype = self.compute_dtype
        k_len = (value if key is None else key).shape[1]
        cache_spec = None
        if cache is not None:
            k_len = cache.shape[2]
            cache_spec = keras.KerasTensor(cache.shape, dtype=dtype)
        scores = keras.KerasTensor(
            (query.shape[0], self.num_query_heads, query.shape[1], k_len),
            dtype=dtype,
        )
        output = keras.KerasTensor(shape, dtype=dtype)
        return _cache.outputs(
            output, scores, cache_spec, return_attention_scores
        )

    def get_config(self):
        config = {
            **keras.layers.Layer.get_config(self),
            "head_dim": self.head_dim,
            "num_query_heads": self.num_query_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "use_gate": self.use_gate,
            "sliding_window": self.sliding_window,
            "flash_attention": self.flash_attention,
            **self._engine_config(),
        }
        config["dtype"] = self._dtype_policy_config()
        return config


def _check_shapes(query_shape, value_shape, key_shape):
    if query_shape[-1] != value_shape[-1]:
        raise ValueError(
            "The last dimension of `query_shape` and `value_shape` must be "
            f"equal, but are {query_shape[-1]}, {value_shape[-1]}. Received: "
            f"query_shape={tuple(query_shape)}, "
            f"value_shape={tuple(value_shape)}"
        )
    if tuple(value_shape[1:-1]) != tuple(key_shape[1:-1]):
        raise ValueError(
            "All dimensions of `value` and `key`, except the last one, must "
            f"be equal. Received: value_shape={tuple(value_shape)} and "
            f"key_shape={tuple(key_shape)}"
        )
    if len(query_shape) != 3 or len(value_shape) != 3:
        raise ValueError(
            "GroupedQueryAttention expects `query`, `value` and `key` of "
            "shape `(batch_size, time, dim)`. Received: "
            f"query.shape={tuple(query_shape)}, value.shape="
            f"{tuple(value_shape)}, key.shape={tuple(key_shape)}"
        )


GroupQueryAttention = GroupedQueryAttention
