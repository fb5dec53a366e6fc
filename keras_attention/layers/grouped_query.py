"""Grouped-query attention (Ainslie et al.): the multi-head engine with
fewer key/value heads than query heads, Keras's constructor and names."""

import keras

from keras_attention import _validation
from keras_attention.layers import _cache
from keras_attention.layers import _cache_call
from keras_attention.layers import _layer_call
from keras_attention.layers._keras_hooks import GroupedHooks
from keras_attention.layers._layer_call import LayerCall
from keras_attention.layers._multi_head_base import MultiHeadBase
from keras_attention.ops import checks as ops_checks


def _positive_or_none(name, value):
    return _validation.positive_int(name, value, allow_none=True)


@keras.saving.register_keras_serializable(package="keras_attention")
class GroupedQueryAttention(
    GroupedHooks, MultiHeadBase, hooks_are_defaults=True
):
    """Grouped-query attention, a drop-in for Keras's `GroupQueryAttention`.

    `num_query_heads` query heads share `num_key_value_heads` key/value
    heads (Ainslie et al. 2023): query head `h` attends with key/value head
    `h // (num_query_heads // num_key_value_heads)`; one K/V head is
    multi-query attention, as many as query heads is multi-head attention.
    Keras's constructor, call and variables (`query`, `key`, [`gate`],
    `value`, `attention_output`, in that order and shape), so
    `ours.set_weights(keras_layer.get_weights())` gives Keras's outputs and
    scores. The K/V heads are never repeated in memory (Keras repeats
    them): every kernel of the engine (fused, dense, blocks, whose memory
    is linear in the length) broadcasts them over the query heads of
    their group. Beyond Keras: a pluggable `score` (as
    on `MultiHeadAttention`), `score_mod` / `mask_mod`,
    `chunk_size`, `rotary_embedding`, attention sinks, a key/value cache
    for decoding, and
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

    Keyword Args:
        flash_attention: Keras's flag. `True` refuses dropout and
            returning scores, as Keras does; the kernel is ours either way.
            Defaults to `None`.
        use_gate: Whether a sigmoid gate of the query multiplies each
            head's output (Keras's `gate` projection). Defaults to `False`.
        seed: Seed of the dropout. Defaults to `None`.
        kernel_initializer: Initializer of the projection kernels.
            Defaults to `"glorot_uniform"`.
        bias_initializer: Initializer of the biases. Defaults to `"zeros"`.
        kernel_regularizer: Optional regularizer of the kernels.
        bias_regularizer: Optional regularizer of the biases.
        activity_regularizer: Optional regularizer of each projection's
            output, as in Keras.
        kernel_constraint: Optional constraint of the kernels.
        bias_constraint: Optional constraint of the biases.
        score: The score of `MultiHeadAttention`: a name (`"scaled_dot"`,
            `"dot"`, `"cosine"`, `"bilinear"`, `"additive"`, `"concat"`),
            a score config dict or a `keras_attention.scores.Score`,
            shared by the heads (its weights come after Keras's variables).
            A dot-product score runs in every kernel (fused, dense,
            blocks); an additive one (additive, concat) in the dense
            kernel and the blocks, and a score with neither form
            (location) densely. Defaults to `"scaled_dot"`.
        chunk_size: `None` (automatic: `keras_attention.ops.plan_attention`
            takes the blocks where the dense step would be large, or where
            a band or mask leaves few blocks), `0` (dense) or the block
            size. Defaults to `None`.
        rotary_embedding: Optional `keras_attention.RotaryEmbedding`,
            applied to the projected queries and keys at their positions
            (which follow `cache_update_index`). Defaults to `None`.
        score_mod: Optional score mod of `keras_attention.ops.mods` (e.g.
            `soft_cap(cap)`, `alibi(num_heads)`) on every call, saved with
            the layer. Defaults to `None`.
        mask_mod: Optional mask mod (e.g. `sliding_window(w)`,
            `prefix_lm(n)`) on every call. Defaults to `None`.
        attention_activation: As `MultiHeadAttention`'s. Defaults to
            `None`.
        penalty_coefficient: As `MultiHeadAttention`'s. Defaults to `0.0`.
        use_sinks: As `MultiHeadAttention`'s: a learned sink logit per
            query head (gpt-oss), a weight `sinks` of shape
            `(num_query_heads,)`. Defaults to `False`.
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
        cache_update_mask: Optional `(batch_size, Tq)` booleans: a `False`
            token's keys and values are not written, its slot keeps what
            the cache held (keras-hub's Gemma 3). Needs
            `cache_update_index`; a `KeyValueCache` or `QuantizedCache`.
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
    native_flash = False

    def __init__(
        self,
        head_dim,
        num_query_heads,
        num_key_value_heads,
        dropout=0.0,
        use_bias=True,
        sliding_window=None,
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
        head_dim = positive("head_dim", head_dim)
        super().__init__(
            heads,
            head_dim,
            head_dim,
            dropout,
            use_bias,
            **kwargs,
        )
        self._kv_heads = kv_heads
        self.head_dim, self.num_query_heads = head_dim, heads
        self.num_key_value_heads, self.num_repeats = kv_heads, heads // kv_heads
        self.sliding_window = _positive_or_none(
            "sliding_window", sliding_window
        )
        self._set_window(sliding_window=self.sliding_window)

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
        cache_update_mask=None,
        score_mod=None,
        mask_mod=None,
    ):
        name = type(self).__name__
        ops_checks.floating(name, query=query, value=value, key=key)
        return self._attention_call(
            LayerCall(
                query,
                value,
                key,
                query_mask=query_mask,
                value_mask=value_mask,
                key_mask=key_mask,
                attention_mask=attention_mask,
                use_causal_mask=use_causal_mask,
                cache=cache,
                cache_update_index=cache_update_index,
                cache_update_mask=cache_update_mask,
                training=training,
                return_weights=return_attention_scores,
                score_mod=score_mod,
                mask_mod=mask_mod,
            )
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
        _cache_call.check_no_index(
            type(self).__name__, cache, cache_update_index
        )
        shape = self.compute_output_shape(
            query.shape, value.shape, None if key is None else key.shape
        )
        dtype = self.compute_dtype
        k_len = (value if key is None else key).shape[1]
        cache_spec = _cache_call.output_spec(cache)
        if cache is not None:
            # Keras-hub's tensor: its slots; another kind says at the call.
            tensor = not isinstance(cache, _cache.AttentionCache)
            k_len = cache.shape[2] if tensor else None
        scores = keras.KerasTensor(
            (query.shape[0], self.num_query_heads, query.shape[1], k_len),
            dtype=dtype,
        )
        output = keras.KerasTensor(shape, dtype=dtype)
        return _layer_call.outputs(
            output, scores, cache_spec, return_attention_scores
        )

    def get_config(self):
        config = {
            **keras.layers.Layer.get_config(self),
            "head_dim": self.head_dim,
            "num_query_heads": self.num_query_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "sliding_window": self.sliding_window,
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
