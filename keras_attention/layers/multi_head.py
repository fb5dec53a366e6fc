"""Multi-head attention, a drop-in for `keras.layers.MultiHeadAttention`."""

import math
import string

import keras
from keras import ops

from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention.layers import _axes
from keras_attention.layers import _layer_call
from keras_attention.layers import _multi_head_checks as checks
from keras_attention.layers._layer_call import LayerCall
from keras_attention.layers._multi_head_base import MultiHeadBase
from keras_attention.ops import checks as ops_checks

_PACKAGE = "keras_attention"


def _keras_alias(name):
    """A property that reads and sets the attribute `name`."""
    return property(
        lambda self: getattr(self, name),
        lambda self, value: setattr(self, name, value),
        doc=f"Keras's private name of `{name}`.",
    )


@keras.saving.register_keras_serializable(package=_PACKAGE)
class MultiHeadAttention(MultiHeadBase, hooks_are_defaults=True):
    """Multi-head attention (Vaswani et al.), compatible with Keras's layer.

    Each head `i` projects the inputs, `Q_i = Q W^Q_i`, `K_i = K W^K_i`,
    `V_i = V W^V_i`, attends with `head_i = softmax(s(Q_i, K_i)) V_i`
    (`s(q, k) = q·k / sqrt(key_dim)` by default) and the concatenated heads
    are projected back: `output = concat(head_1, ..., head_h) W^O`.

    The constructor, `call` and the variables (names, shapes, order) are those
    of `keras.layers.MultiHeadAttention` (Keras 3.15), so
    `layer.set_weights(keras_mha.get_weights())` reproduces Keras's outputs
    and attention scores. Two things differ: a query whose keys are all masked
    (or that `query_mask` masks) gets all-zero weights and a zero context
    on every path (Keras 3.15 gives zero weights when it returns them, but
    its fused path, taken when it does not, averages the values), and the
    score is pluggable.

    The score is any of `keras_attention.scores`. It runs on
    `(batch_size, num_heads, T, key_dim)` tensors, so one score layer serves
    every head: the weights of a parametric score (e.g. the `kernel` of
    `"bilinear"`, `(key_dim, key_dim)`) are shared by all heads. They come
    after Keras's variables in `layer.weights`, so `set_weights` with Keras's
    weights followed by the score's lines up.

    Inputs of any rank are accepted, as in Keras: `(batch_size, T, dim)`
    attends over `T`; `(batch_size, d_1, ..., d_k, dim)` over the
    `attention_axes` (all of `d_1..d_k` by default), which are flattened
    into one sequence (row-major) for the masks, the causal mask and the
    chunked path, with the other axes batch-like. The weights then come
    back as `(batch_size, other axes..., num_heads, query attention
    axes..., key attention axes...)`, Keras's layout; an `attention_mask`
    broadcasts to that layout without the heads axis. N-D inputs need
    their middle axes to be known.

    The attention of the projected heads is computed by the methods Keras
    documents as override points, `_compute_attention_mask(query, value,
    query_mask, value_mask, key_mask, attention_mask, use_causal_mask)`
    and `_compute_attention(query, key, value, attention_mask, training,
    return_attention_scores, use_causal_mask)`; a subclass that overrides
    either one is always called (the chunked path, which bypasses them, is
    then never chosen by itself). A subclass written for Keras's layer (as
    keras-hub's are) also finds what it reads there: `_build_attention(rank)`
    (the rank of the projected tensors) and what it sets,
    `_dot_product_equation`, `_combine_equation`, `_softmax` and
    `_masked_softmax`; `_dropout_layer`, `_inverse_sqrt_key_dim`,
    `_get_common_kwargs_for_sublayer()`, and the constructor arguments
    under Keras's private names (`_num_heads`, `_key_dim`, `_value_dim`,
    `_use_bias`, ...).

    Args:
        num_heads: Number of attention heads.
        key_dim: Size of each head for query and key.
        value_dim: Size of each head for value. Defaults to `None`, meaning
            `key_dim`.
        dropout: Dropout rate on the attention weights. Defaults to `0.0`.
        use_bias: Whether the projections have biases. Defaults to `True`.
        output_shape: Shape of the output besides the batch and sequence
            axes: an integer or a tuple. Defaults to `None`, the query's
            last axis.
        attention_axes: The axes attention is applied over, as in Keras:
            `None` (default) means every axis between the batch axis and
            the features (the sequence axis of `(batch_size, T, dim)`
            inputs); for `(batch_size, d_1, ..., d_k, dim)` inputs the other
            middle axes are batch-like. Negative axes count from the end of
            the projected `(..., heads, depth)` tensor, as in Keras.
        sliding_window: Optional positive integer: query `i` only attends to
            keys `j` with `|i - j| < sliding_window`. Defaults to `None`.

    Keyword Args:
        flash_attention: As in Keras: `True` computes the attention with
            `keras.ops.dot_product_attention(..., flash_attention=True)`,
            which raises where the backend and device have no fused kernel
            (on CPU, for instance). Needs a dot-product score and no
            dropout, and returns no attention scores; a fully masked query
            row then gets what the backend kernel gives, not zeros. `None`
            (default) and `False` use this package's own fused kernel:
            Keras's "flash when available" choice cannot be detected with
            public APIs, so it is not made for you.
        kernel_initializer: Initializer of the projection kernels. Defaults
            to `"glorot_uniform"`.
        bias_initializer: Initializer of the biases. Defaults to `"zeros"`.
        kernel_regularizer: Optional regularizer of the kernels.
        bias_regularizer: Optional regularizer of the biases.
        activity_regularizer: Optional regularizer of each projection's
            output, as in Keras.
        kernel_constraint: Optional constraint of the kernels.
        bias_constraint: Optional constraint of the biases.
        use_gate: Whether to gate the heads with `sigmoid(query W^G)` before
            the output projection, as Keras does. Defaults to `False`.
        seed: Seed of the dropout. Defaults to `None`.
        score: A score name (`"scaled_dot"`, `"dot"`, `"cosine"`,
            `"bilinear"`, `"additive"`, `"concat"`), a score config dict or a
            `keras_attention.scores.Score` instance, shared by the heads.
            Defaults to `"scaled_dot"`.
        chunk_size: Memory-efficient attention for long sequences: the
            block kernel (blocks of queries and keys with an online
            softmax and a recomputing backward pass, so memory grows
            linearly with the length). `None` (default) lets
            `keras_attention.ops.plan_attention` choose once per call: the
            blocks where one dense step would hold more than 1 GiB of
            `(Tq, Tk)` tensors (on a GPU or TPU a quarter of its memory)
            or where a band or a mask leaves few pairs of blocks to
            visit, else dense; never with attention scores requested or
            dropout active. `0` is always dense. A positive value is the
            block size, and then an unsupported combination raises
            `ValueError`. Both paths give the same outputs and gradients
            (to float32 rounding). The blocks take every score but
            `"location"`, masks, mods, windows (skipping the blocks
            outside them) and a cache, but not `attention_activation` or
            `penalty_coefficient`: with those `None` is dense and a
            positive value raises `ValueError`.
        attention_activation: Optional activation (name or callable)
            applied to the logits before the softmax (keras-self-attention's
            semantics); masked keys still get weight exactly 0. Defaults to
            `None`.
        penalty_coefficient: Non-negative weight `c` of Lin et al.'s
            penalty, for each head `h` `c · mean_batch ‖A_h A_hᵀ − I‖²_F`,
            summed over the heads and added with `add_loss`. Defaults to
            `0.0`, none.
        score_mod: Optional score mod `score_mod(score, batch, head, q_idx,
            kv_idx)` on the scaled logits (`keras_attention.ops.mods`, a
            registered function, or a layer such as
            `keras_attention.RelativePositionBias`), saved in the config.
            Defaults to `None`.
        mask_mod: Optional mask mod `mask_mod(batch, head, q_idx, kv_idx)`,
            ANDed with the other masks, saved in the config; every
            kernel but the fused one applies the mods (dense, or in
            blocks with `chunk_size`). Defaults to `None`.
        rotary_embedding: Optional `keras_attention.RotaryEmbedding`,
            applied to the projected queries and keys at their positions
            (which follow `cache_update_index`). Defaults to `None`.
        use_sinks: Whether each head has a learned sink, one logit in
            each row's softmax denominator that takes no value (gpt-oss's
            attention sinks): a weight `sinks` of shape `(num_heads,)`.
            The returned weights are then those of the real keys, and sum
            to less than 1. Defaults to `False`.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        query: `(batch_size, Tq, dim)`.
        value: `(batch_size, Tv, dim)`.
        key: Optional `(batch_size, Tv, dim)`. Defaults to `value`.
        query_mask: Optional boolean `(batch_size, Tq)`; a masked query gets
            zero weights and a zero context. Taken from `query`'s Keras mask
            when not given.
        value_mask: Optional boolean `(batch_size, Tv)`. Taken from
            `value`'s Keras mask when not given.
        key_mask: Optional boolean `(batch_size, Tv)`. Taken from `key`'s
            Keras mask when not given.
        attention_mask: Optional boolean `(batch_size, Tq, Tv)`, `(Tq, Tv)`
            or `(batch_size, num_heads, Tq, Tv)`; `True` = attend.
        return_attention_scores: Whether to also return the weights.
            Defaults to `False`.
        score_mod: Optional score mod of this call, applied after the
            constructor's (e.g. one that reads per-batch tensors).
        mask_mod: Optional mask mod of this call, e.g.
            `keras_attention.ops.mods.document(segment_ids)`.
        attention_bias: Optional float tensor added to the logits,
            broadcastable to `(batch_size, num_heads, Tq, Tk)`.
        training: Whether dropout is active.
        use_causal_mask: Whether query `i` only sees keys `j <= i`. Defaults
            to `False`.

    Returns:
        The output, `(batch_size, Tq, dim)` or `(batch_size, Tq,
        *output_shape)`, and with `return_attention_scores=True` also the
        post-softmax weights `(batch_size, num_heads, Tq, Tv)`.

    Example:

    >>> layer = keras_attention.MultiHeadAttention(num_heads=2, key_dim=8)
    >>> query = np.random.rand(3, 5, 16).astype("float32")
    >>> value = np.random.rand(3, 7, 16).astype("float32")
    >>> output, weights = layer(query, value, return_attention_scores=True)
    >>> tuple(output.shape), tuple(weights.shape)
    ((3, 5, 16), (3, 2, 5, 7))

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_shape=None,
        attention_axes=None,
        sliding_window=None,
        **kwargs,
    ):
        super().__init__(
            num_heads,
            _validation.positive_int("key_dim", key_dim),
            value_dim,
            dropout,
            use_bias,
            **kwargs,
        )
        self._output_shape = checks.output_shape_tuple(output_shape)
        self.attention_axes = checks.attention_axes_tuple(attention_axes)
        self.sliding_window = _validation.positive_int(
            "sliding_window", sliding_window, allow_none=True
        )
        self._set_window(sliding_window=self.sliding_window)

    # Like Keras, `output_shape` is not exposed: it would clash with the
    # `output_shape` of functional models in `summary()`.

    # Keras's private names for the constructor arguments, which subclasses
    # of its layer read, and set (keras-hub's `build` overrides, for one).
    _num_heads = _keras_alias("num_heads")
    _key_dim = _keras_alias("key_dim")
    _dropout = _keras_alias("dropout")
    _use_bias = _keras_alias("use_bias")
    _use_gate = _keras_alias("use_gate")
    _sliding_window = _keras_alias("sliding_window")
    _kernel_initializer = _keras_alias("kernel_initializer")
    _bias_initializer = _keras_alias("bias_initializer")
    _kernel_regularizer = _keras_alias("kernel_regularizer")
    _bias_regularizer = _keras_alias("bias_regularizer")
    _activity_regularizer = _keras_alias("projection_activity_regularizer")
    _kernel_constraint = _keras_alias("kernel_constraint")
    _bias_constraint = _keras_alias("bias_constraint")

    @property
    def _value_dim(self):
        return self.value_dim or self.key_dim

    @_value_dim.setter
    def _value_dim(self, value):
        self.value_dim = value

    @property
    def _inverse_sqrt_key_dim(self):
        # Read-only: the score scales the logits, so setting it would be
        # silently ignored.
        return 1.0 / math.sqrt(float(self.key_dim))

    def build(self, query_shape, value_shape, key_shape=None):
        _layer_call.query_value_key_shapes(query_shape, value_shape, key_shape)
        key_shape = value_shape if key_shape is None else key_shape
        # Keras's hook takes the rank of the projected `(B, ..., heads,
        # depth)` tensors, one more than the inputs'.
        self._build_attention(len(query_shape) + 1)
        checks.free_axes(self._axes, query_shape, value_shape)
        value_dim = self.value_dim or self.key_dim
        out = self._output_shape or (query_shape[-1],)
        self._build_layers(
            query_shape,
            key_shape,
            value_shape,
            self.key_dim,
            value_dim,
            out,
            gate=self.use_gate,
        )

    def _build_attention(self, rank):
        """Keras's hook: the attention of projected tensors of `rank`.

        `rank` is that of the projected `(B, d..., heads, depth)` tensors,
        as in Keras (a subclass that overrides `build` calls it so). Sets
        what Keras sets for a subclass's `_compute_attention`:
        `_attention_axes`, `_dot_product_equation` (`key, query ->
        scores`), `_combine_equation` (`scores, value -> context`), and
        `_softmax` over the key attention axes.
        """
        self._attention_axes = _axes.normalize_axes(
            self.attention_axes, rank - 1
        )
        axes = _axes.AttentionAxes(rank - 1, self._attention_axes)
        # `None` for inputs `(B, T, dim)` attended over `T`: the engine
        # reads it on every call, so it is decided here, once.
        self._axes = None if axes.is_plain else axes
        dot, combine = _attention_equations(rank, self._attention_axes)
        self._dot_product_equation, self._combine_equation = dot, combine
        n = len(self._attention_axes)
        scores_rank = rank - 1 + n
        self._softmax = keras.layers.Softmax(
            axis=tuple(range(scores_rank - n, scores_rank)),
            dtype=self.dtype_policy,
        )

    def _masked_softmax(self, attention_scores, attention_mask=None):
        """Keras's hook: softmax over the key attention axes, masked.

        The mask lacks the heads axis (it is inserted, as in Keras). As in
        Keras's, masked keys get weight exactly 0 and a query whose keys are
        all masked gets all-zero weights; half-precision scores are
        normalised in float32 (`keras_attention.ops.masked_softmax`).
        """
        n = len(self._attention_axes)
        if attention_mask is not None:
            while len(attention_mask.shape) < len(attention_scores.shape):
                attention_mask = ops.expand_dims(attention_mask, -2 * n - 1)
            attention_mask = ops.broadcast_to(
                ops.cast(attention_mask, "bool"), ops.shape(attention_scores)
            )
        if n == 1:
            return ka_ops.masked_softmax(attention_scores, attention_mask)
        shape = ops.shape(attention_scores)
        flat = tuple(shape[:-n]) + (-1,)
        if attention_mask is not None:
            attention_mask = ops.reshape(attention_mask, flat)
        weights = ka_ops.masked_softmax(
            ops.reshape(attention_scores, flat), attention_mask
        )
        return ops.reshape(weights, shape)

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
        score_mod=None,
        mask_mod=None,
        attention_bias=None,
        cache=None,
        cache_update_index=None,
        cache_update_mask=None,
    ):
        ops_checks.floating(
            type(self).__name__, query=query, value=value, key=key
        )
        # Built once, called again: a batch mismatch is ours to name
        # rather than the backend's matmul error.
        _layer_call.query_value_key_shapes(
            query.shape, value.shape, None if key is None else key.shape
        )
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
                attention_bias=attention_bias,
            )
        )

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        _layer_call.query_value_key_shapes(query_shape, value_shape, key_shape)
        out = self._output_shape or (query_shape[-1],)
        return tuple(query_shape[:-1]) + tuple(out)

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
        score_mod=None,
        mask_mod=None,
        attention_bias=None,
    ):
        ops_checks.floating(
            type(self).__name__, query=query, value=value, key=key
        )
        key_shape = None if key is None else key.shape
        shape = self.compute_output_shape(query.shape, value.shape, key_shape)
        self._check_masks(
            query.shape,
            value.shape,
            value.shape if key is None else key.shape,
            {
                "query_mask": query_mask,
                "value_mask": value_mask,
                "key_mask": key_mask,
                "attention_mask": attention_mask,
            },
        )
        output = keras.KerasTensor(shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        rank = len(query.shape)
        axes = _axes.AttentionAxes(
            rank, _axes.normalize_axes(self.attention_axes, rank)
        )
        weights_shape = axes.weights_shape(
            query.shape, value.shape, self.num_heads
        )
        return output, keras.KerasTensor(
            weights_shape, dtype=self.compute_dtype
        )

    def get_config(self):
        config = {
            **super().get_config(),
            "output_shape": self._output_shape,
            "attention_axes": self.attention_axes,
            "sliding_window": self.sliding_window,
        }
        return config


def _attention_equations(rank, attention_axes):
    """Keras's einsum equations for projected tensors of `rank`.

    The query is `(B, d..., heads, depth)`; the key and value have their
    own letters on the attention axes. The scores are `(B, free...,
    heads, query attention axes..., key attention axes...)`. Returns the
    `key, query -> scores` and `scores, value -> context` equations.
    """
    letters = string.ascii_lowercase
    query = letters[:rank]
    fresh = iter(letters[rank:])
    key = "".join(
        next(fresh) if i in attention_axes else c for i, c in enumerate(query)
    )
    batch = [i for i in range(rank - 1) if i not in attention_axes]
    scores = "".join(query[i] for i in batch)
    scores += "".join(query[i] for i in attention_axes)
    scores += "".join(key[i] for i in attention_axes)
    return f"{key},{query}->{scores}", f"{scores},{key}->{query}"
