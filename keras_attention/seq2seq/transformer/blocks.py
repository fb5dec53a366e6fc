"""The pre-norm Transformer blocks of `TransformerTranslator`.

Each block is made of this package's layers: `SelfAttention` (or
`GroupedQueryAttention` when the keys and values have fewer heads) with
rotary position embeddings, `MultiHeadAttention` over the encoder memory,
and a two-layer feed-forward network, each behind a `LayerNormalization`
and added back to its input (Xiong et al., 2020's pre-norm order).
The decoder block also runs one step at a time with keras-hub's
key/value cache semantics (`cache`, `cache_update_index`).
"""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention.layers.grouped_query import GroupedQueryAttention
from keras_attention.layers.multi_head import MultiHeadAttention
from keras_attention.layers.rotary import RotaryEmbedding
from keras_attention.layers.self_attention import SelfAttention
from keras_attention.ops import checks as ops_checks
from keras_attention.seq2seq import checks

EPSILON = 1e-6


def _attention(
    kind,
    num_heads,
    key_dim,
    num_key_value_heads,
    dropout,
    name,
    sliding_window=None,
    rotates=True,
):
    """A self-attention (`kind="self"`) or cross-attention layer; a local
    self-attention (`sliding_window`) is a `GroupedQueryAttention`, whose
    window is `|i - j| < sliding_window`; a self-attention rotates its
    queries and keys unless `rotates` is `False` (a NoPE layer)."""
    grouped = num_key_value_heads not in (None, num_heads)
    rotary = RotaryEmbedding() if kind == "self" and rotates else None
    local = kind == "self" and sliding_window is not None
    if grouped or local:
        return GroupedQueryAttention(
            head_dim=key_dim,
            num_query_heads=num_heads,
            num_key_value_heads=num_key_value_heads or num_heads,
            dropout=dropout,
            rotary_embedding=rotary,
            sliding_window=sliding_window if local else None,
            name=name,
        )
    if kind == "self":
        return SelfAttention(
            num_heads,
            key_dim,
            dropout=dropout,
            rotary_embedding=rotary,
            name=name,
        )
    return MultiHeadAttention(num_heads, key_dim, dropout=dropout, name=name)


def _self_attend(
    layer, x, mask, causal, training, cache=None, index=None, scores=False
):
    """`layer` over `x` itself, whichever class it is; the cache if given."""
    options = {"use_causal_mask": causal, "training": training}
    if scores:
        options["return_attention_scores"] = True
    if cache is not None:
        options.update(cache=cache, cache_update_index=index)
    if isinstance(layer, SelfAttention):
        return layer(x, mask=mask, **options)
    return layer(x, x, query_mask=mask, value_mask=mask, **options)


def _build(layer, *shapes):
    """Builds `layer` unless a call already did."""
    if not layer.built:
        layer.build(*shapes)


class Block(keras.layers.Layer):
    """What the blocks share (these two and `linear_block`'s
    `GatedDeltaBlock`): sizes, the feed-forward network, config."""

    def __init__(
        self,
        model_dim,
        num_heads,
        feed_forward_dim,
        num_key_value_heads=None,
        dropout=0.0,
        sliding_window=None,
        use_rotary_embedding=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.model_dim = _validation.positive_int("model_dim", model_dim)
        if not isinstance(use_rotary_embedding, bool):
            raise _validation.invalid(
                "use_rotary_embedding", use_rotary_embedding, "a bool"
            )
        self.use_rotary_embedding = use_rotary_embedding
        self.sliding_window = _validation.positive_int(
            "sliding_window", sliding_window, allow_none=True
        )
        self.num_heads = _validation.positive_int("num_heads", num_heads)
        if model_dim % num_heads:
            raise ValueError(
                "`model_dim` must be a multiple of `num_heads`. Received: "
                f"model_dim={model_dim}, num_heads={num_heads}"
            )
        self.feed_forward_dim = _validation.positive_int(
            "feed_forward_dim", feed_forward_dim
        )
        self.num_key_value_heads = _validation.positive_int(
            "num_key_value_heads", num_key_value_heads, allow_none=True
        )
        if num_key_value_heads is not None and num_heads % num_key_value_heads:
            raise ValueError(
                "`num_heads` must be a multiple of `num_key_value_heads`. "
                f"Received: num_heads={num_heads}, "
                f"num_key_value_heads={num_key_value_heads}"
            )
        self.dropout = _validation.rate("dropout", dropout)
        self.key_dim = model_dim // num_heads
        self.feed_forward_norm = keras.layers.LayerNormalization(
            epsilon=EPSILON, name="feed_forward_norm"
        )
        self.feed_forward_inner = keras.layers.Dense(
            feed_forward_dim, activation="relu", name="feed_forward_inner"
        )
        self.feed_forward_outer = keras.layers.Dense(
            model_dim, name="feed_forward_outer"
        )
        self.dropout_layer = keras.layers.Dropout(self.dropout)

    def _check(self, **tensors):
        """Floating `(batch, time, model_dim)` tensors of one batch size."""
        name = type(self).__name__
        ops_checks.floating(name, **tensors)
        for argument, tensor in tensors.items():
            shape = tuple(tensor.shape)
            if len(shape) != 3 or shape[-1] not in (None, self.model_dim):
                raise ValueError(
                    f"{name} expects `{argument}` of shape `(batch_size, "
                    f"time, {self.model_dim})` (model_dim). Received: "
                    f"{argument}.shape={shape}"
                )
        if len(tensors) > 1:
            checks.batch_sizes(
                name, **{k: tuple(v.shape) for k, v in tensors.items()}
            )

    def _attention(self, kind, name):
        return _attention(
            kind,
            self.num_heads,
            self.key_dim,
            self.num_key_value_heads,
            self.dropout,
            name,
            self.sliding_window,
            self.use_rotary_embedding,
        )

    def _build_self_attention(self, shape):
        if isinstance(self.self_attention, SelfAttention):
            _build(self.self_attention, shape)
        else:
            _build(self.self_attention, shape, shape)

    def _build_feed_forward(self, shape):
        _build(self.feed_forward_inner, shape)
        _build(self.feed_forward_outer, shape[:-1] + (self.feed_forward_dim,))

    def _feed_forward(self, x, training):
        h = self.feed_forward_inner(self.feed_forward_norm(x))
        h = self.feed_forward_outer(self._dropout(h, training))
        return x + self._dropout(h, training)

    def _residual(self, x, sublayer_output, training):
        return x + self._dropout(sublayer_output, training)

    def _dropout(self, x, training):
        # No call at rate 0: a layer call costs more than the step's
        # arithmetic when decoding one token eagerly (PyTorch).
        if not self.dropout:
            return x
        return self.dropout_layer(x, training=training)

    def get_config(self):
        return {
            **super().get_config(),
            "model_dim": self.model_dim,
            "num_heads": self.num_heads,
            "feed_forward_dim": self.feed_forward_dim,
            "num_key_value_heads": self.num_key_value_heads,
            "dropout": self.dropout,
            "sliding_window": self.sliding_window,
            "use_rotary_embedding": self.use_rotary_embedding,
        }


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerEncoderBlock(Block):
    """Pre-norm encoder block: `x + SelfAttention(LN(x))`, then `+ FFN(LN)`.

    The self-attention rotates its queries and keys with a
    `RotaryEmbedding` (positions from 0) and masks padded keys.

    Args:
        model_dim: Width of the residual stream (inputs and outputs).
        num_heads: Attention heads; `model_dim // num_heads` each.
        feed_forward_dim: Width of the feed-forward network's hidden layer.
        **kwargs: `num_key_value_heads` and `dropout` (below) and the layer
            keyword arguments.

    Keyword arguments:
        num_key_value_heads: Key/value heads (`GroupedQueryAttention`);
            `None` (the default) or `num_heads` is `SelfAttention`.
        dropout: Rate on the attention weights, the feed-forward hidden
            layer and each sublayer's output. Defaults to `0.0`.
        sliding_window: A local block: each position sees the positions
            `|i - j| < sliding_window` (a `GroupedQueryAttention` with
            that window). Defaults to `None`, all.
        use_rotary_embedding: Whether the self-attention rotates its
            queries and keys; `False` is a NoPE block (SmolLM3's every
            fourth layer, Llama 4's): no position but the causal mask.
            Defaults to `True`.

    Call arguments:
        inputs: `(batch_size, time, model_dim)`.
        padding_mask: Optional boolean `(batch_size, time)`, `False` at
            padding (keras-hub's `TransformerEncoder` argument).
        training: Whether dropout is active.
        return_attention_scores: Whether to return the self-attention
            weights too. Defaults to `False`.
        use_causal_mask: Whether position `i` sees only `j <= i` (a
            decoder-only model's block, GPT's). Defaults to `False`.
        cache: Optional cache of the self-attention (a cache tensor or any
            `keras_attention.AttentionCache` it takes): `inputs` are the
            positions from `cache_update_index` on, written into it.
        cache_update_index: The position of `inputs`' first step, with
            `cache`.

    Returns:
        `(batch_size, time, model_dim)`; with `return_attention_scores`,
        `(outputs, weights)`, the weights per head `(batch_size, heads,
        time, time)`; with `cache`, the updated cache last.

    Example:

    >>> block = keras_attention.models.TransformerEncoderBlock(8, 2, 16)
    >>> tuple(block(np.random.rand(2, 5, 8).astype("float32")).shape)
    (2, 5, 8)
    """

    def __init__(self, model_dim, num_heads, feed_forward_dim, **kwargs):
        super().__init__(model_dim, num_heads, feed_forward_dim, **kwargs)
        self.self_attention_norm = keras.layers.LayerNormalization(
            epsilon=EPSILON, name="self_attention_norm"
        )
        self.self_attention = self._attention("self", "self_attention")

    def build(self, inputs_shape):
        shape = tuple(inputs_shape)
        for norm in (self.self_attention_norm, self.feed_forward_norm):
            _build(norm, shape)
        self._build_self_attention(shape)
        self._build_feed_forward(shape)

    def call(
        self,
        inputs,
        padding_mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
    ):
        self._check(inputs=inputs)
        h = self.self_attention_norm(inputs)
        h = _self_attend(
            self.self_attention,
            h,
            padding_mask,
            bool(use_causal_mask),
            training,
            cache,
            cache_update_index,
            scores=return_attention_scores,
        )
        if cache is not None:
            *h, cache = h
            h = h[0] if len(h) == 1 else tuple(h)
        weights = None
        if return_attention_scores:
            h, weights = h
        outputs = self._feed_forward(
            self._residual(inputs, h, training), training
        )
        result = (outputs,)
        if return_attention_scores:
            result += (weights,)
        if cache is not None:
            result += (cache,)
        return result[0] if len(result) == 1 else result


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerDecoderBlock(Block):
    """Pre-norm decoder block: causal self-attention, cross-attention, FFN.

    `h = y + SelfAttention(LN(y), causal)`, `h = h + MHA(LN(h), memory)`,
    `h + FFN(LN(h))`. With `self_cache` the block runs from
    `cache_update_index` on (one step when decoding), reading and writing
    the keys and values of its self-attention in the cache; with
    `cross_cache` (from `cross_cache(memory)`) the memory's keys and values
    are not projected again.

    Args:
        model_dim: Width of the residual stream; also the memory's depth.
        num_heads: Attention heads; `model_dim // num_heads` each.
        feed_forward_dim: Width of the feed-forward network's hidden layer.
        **kwargs: `num_key_value_heads` and `dropout` (below) and the layer
            keyword arguments.

    Keyword arguments:
        num_key_value_heads: Key/value heads of both attentions
            (`GroupedQueryAttention`); `None` (the default) or `num_heads`
            is `SelfAttention` and `MultiHeadAttention`.
        dropout: Rate on the attention weights, the feed-forward hidden
            layer and each sublayer's output. Defaults to `0.0`.
        sliding_window: A local block: its causal self-attention sees the
            `sliding_window` most recent positions (a
            `GroupedQueryAttention` with that window; decoding keeps a
            `RollingCache` of them). Defaults to `None`, all.
        use_rotary_embedding: Whether the self-attention rotates its
            queries and keys (`False`: a NoPE block). Defaults to `True`.

    Call arguments:
        inputs: `(batch_size, time, model_dim)`.
        memory: The encoder outputs `(batch_size, source_time, model_dim)`.
        memory_mask: Optional boolean `(batch_size, source_time)`.
        inputs_mask: Optional boolean `(batch_size, time)` (training).
        self_cache: Optional cache of the self-attention: `(batch_size, 2,
            max_length, heads, key_dim)` or any `keras_attention`
            `AttentionCache` it takes.
        cross_cache: Optional `cross_cache(memory)`.
        cache_update_index: The position of `inputs`' first step; needed
            with `self_cache`.
        training: Whether dropout is active.

    Returns:
        `(outputs, alignments)`, the cross-attention weights averaged over
        heads `(batch_size, time, source_time)`; and the updated self
        cache last when `self_cache` is given.

    Example:

    >>> block = keras_attention.models.TransformerDecoderBlock(8, 2, 16)
    >>> y, memory = np.ones((2, 3, 8), "float32"), np.ones((2, 5, 8), "float32")
    >>> outputs, alignments = block(y, memory)
    >>> tuple(outputs.shape), tuple(alignments.shape)
    ((2, 3, 8), (2, 3, 5))
    """

    def __init__(self, model_dim, num_heads, feed_forward_dim, **kwargs):
        super().__init__(model_dim, num_heads, feed_forward_dim, **kwargs)
        self.self_attention_norm = keras.layers.LayerNormalization(
            epsilon=EPSILON, name="self_attention_norm"
        )
        self.self_attention = self._attention("self", "self_attention")
        self.cross_attention_norm = keras.layers.LayerNormalization(
            epsilon=EPSILON, name="cross_attention_norm"
        )
        self.cross_attention = self._attention("cross", "cross_attention")

    def build(self, inputs_shape, memory_shape=None):
        shape = tuple(inputs_shape)
        memory_shape = shape if memory_shape is None else tuple(memory_shape)
        checks.batch_sizes(
            type(self).__name__, inputs=shape, memory=memory_shape
        )
        for norm in (
            self.self_attention_norm,
            self.cross_attention_norm,
            self.feed_forward_norm,
        ):
            _build(norm, shape)
        self._build_self_attention(shape)
        _build(self.cross_attention, shape, memory_shape)
        self._build_feed_forward(shape)

    def cross_cache(self, memory):
        """The memory's projected keys and values, `(B, 2, S, heads, dim)`."""
        attention = self.cross_attention
        return ops.stack(
            (attention.key_dense(memory), attention.value_dense(memory)),
            axis=1,
        )

    def call(
        self,
        inputs,
        memory,
        memory_mask=None,
        inputs_mask=None,
        self_cache=None,
        cross_cache=None,
        cache_update_index=None,
        training=None,
    ):
        self._check(inputs=inputs, memory=memory)
        h = self.self_attention_norm(inputs)
        if self_cache is None:
            h = _self_attend(
                self.self_attention, h, inputs_mask, True, training
            )
        else:
            h, self_cache = _self_attend(
                self.self_attention,
                h,
                None,
                True,
                training,
                self_cache,
                cache_update_index,
            )
        h = self._residual(inputs, h, training)
        context, weights = self._cross_attend(
            self.cross_attention_norm(h),
            memory,
            memory_mask,
            cross_cache,
            training,
        )
        outputs = self._feed_forward(
            self._residual(h, context, training), training
        )
        alignments = ops.mean(ops.cast(weights, "float32"), axis=1)
        if self_cache is None:
            return outputs, alignments
        return outputs, alignments, self_cache

    def _cross_attend(self, query, memory, memory_mask, cross_cache, training):
        """Attention over the memory: `(context, weights (B, H, T, S))`."""
        if cross_cache is None:
            return self.cross_attention(
                query,
                memory,
                value_mask=memory_mask,
                return_attention_scores=True,
                training=training,
            )
        attention_mask = None
        if memory_mask is not None:
            attention_mask = ops.repeat(
                ops.expand_dims(ops.cast(memory_mask, "bool"), 1),
                ops.shape(query)[1],
                axis=1,
            )
        context, weights, _ = self.cross_attention(
            query,
            memory,
            attention_mask=attention_mask,
            cache=cross_cache,
            return_attention_scores=True,
            training=training,
        )
        return context, weights
