"""Multi-head attention, a drop-in for `keras.layers.MultiHeadAttention`."""

import math

import keras
from keras import ops

from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention import scores as scores_lib
from keras_attention.layers import _common

_PACKAGE = "keras_attention"


_invalid = _validation.invalid
_positive_int = _validation.positive_int


def _output_shape_tuple(output_shape):
    if output_shape is None:
        return None
    shape = (output_shape,) if isinstance(output_shape, int) else output_shape
    if (
        not isinstance(shape, (tuple, list))
        or not shape
        or any(
            isinstance(d, bool) or not isinstance(d, int) or d <= 0
            for d in shape
        )
    ):
        raise _invalid(
            "output_shape",
            output_shape,
            "None, a positive integer or a tuple of positive integers",
        )
    return tuple(shape)


def _attention_axes_tuple(attention_axes):
    """Only attention over the sequence axis of `(B, T, dim)` inputs."""
    if attention_axes is None:
        return None
    axes = (
        (attention_axes,) if isinstance(attention_axes, int) else attention_axes
    )
    # Keras resolves negative axes against the projected `(B, T, N, H)`
    # tensor, so -2 names the sequence axis just like 1 does.
    if not isinstance(axes, (tuple, list)) or tuple(axes) not in ((1,), (-2,)):
        raise ValueError(
            "Only attention over the sequence axis of `(batch_size, T, dim)` "
            "inputs is supported: `attention_axes` must be None or 1. "
            f"Received: attention_axes={attention_axes!r}"
        )
    return tuple(axes)


def _clone(initializer):
    # A fresh initializer object per sublayer, so that an unseeded
    # initializer does not give every projection the same values.
    return initializer.__class__.from_config(initializer.get_config())


def _sliding_window_mask(query_length, key_length, window):
    rows = ops.expand_dims(ops.arange(query_length), -1)
    cols = ops.expand_dims(ops.arange(key_length), 0)
    return ops.less(ops.abs(rows - cols), window)


_DOT_SCORES = (scores_lib.DotScore, scores_lib.ScaledDotScore)


def _softmax(logits, mask):
    """`ka_ops.masked_softmax`, with the fused softmax when nothing is masked.

    Without a mask the backend's own softmax is one fused kernel, faster than
    the written-out masked form; it is skipped for a single key, where
    `keras.ops.softmax` warns.
    """
    if mask is None and logits.shape[-1] != 1:
        dtype = ka_ops.logits_dtype(logits.dtype)
        return ops.softmax(ops.cast(logits, dtype), axis=-1)
    return ka_ops.masked_softmax(logits, mask)


def _dot_attention(query, key, value, mask):
    """`softmax(q·k) v` on `(B, T, heads, depth)`, with its own gradient.

    The backward pass is the one of FlashAttention (Dao et al. 2022): the
    row term of the softmax gradient, `Σ_k w_qk dw_qk`, equals
    `dout_q · out_q`, a sum over `depth` instead of over `Tk`, which saves
    two passes over the `(Tq, Tk)` weights. The `(Tq, Tk)` tensors are the
    right-hand operand of the contractions over the query axis: under XLA
    the swapped order measured about 1.4x slower (see BENCHMARKS.md).
    `query` and `key` come in the logits dtype, `value` in the compute
    dtype.
    """

    @ops.custom_gradient
    def attend(query, key, value):
        weights = _softmax(ops.einsum("bqnd,bknd->bnqk", query, key), mask)
        cast_weights = ops.cast(weights, value.dtype)
        output = ops.einsum("bnqk,bknd->bqnd", cast_weights, value)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            d_value = ops.einsum("bqnd,bnqk->bknd", upstream, cast_weights)
            # `d_weights` and `row` are formed in the logits dtype: where
            # the weights are one-hot the two cancel exactly, and rounding
            # either one to float16 leaves a spurious gradient that can
            # overflow float16 (where autodiff gives 0).
            dtype = weights.dtype
            upstream_wide = ops.cast(upstream, dtype)
            d_weights = ops.einsum(
                "bqnd,bknd->bnqk", upstream_wide, ops.cast(value, dtype)
            )
            row = ops.sum(upstream_wide * ops.cast(output, dtype), axis=-1)
            row = ops.expand_dims(ops.transpose(row, (0, 2, 1)), -1)
            d_logits = weights * (d_weights - row)
            d_query = ops.einsum("bnqk,bknd->bqnd", d_logits, key)
            d_key = ops.einsum("bqnd,bnqk->bknd", query, d_logits)
            return d_query, d_key, d_value

        return output, grad

    return attend(query, key, value)


_CHUNKABLE_SCORES = _DOT_SCORES + (scores_lib.CosineScore,)

# With `chunk_size=None`, the chunked path is taken when the dense weights
# (batch × heads × Tq × Tk floats, batch 1 when it is not static) would
# exceed this many bytes. The chunked path is slower on CPU (about 4x at
# N=4096, see BENCHMARKS.md), so it is chosen only where memory is the
# limit: from N=8192 for one example with 8 heads.
AUTO_CHUNK_MIN_BYTES = 2**31
AUTO_CHUNK_SIZE = 512


def _check_chunk_size(chunk_size, score, dropout):
    if chunk_size is None:
        return None
    if (
        isinstance(chunk_size, bool)
        or not isinstance(chunk_size, int)
        or chunk_size < 0
    ):
        raise _invalid(
            "chunk_size", chunk_size, "None, 0 or a positive integer"
        )
    if chunk_size > 0 and type(score) not in _CHUNKABLE_SCORES:
        raise ValueError(
            "Chunked attention needs a dot-product score ('dot', "
            "'scaled_dot' or 'cosine'); other scores need every (query, key) "
            f"pair at once. Received: chunk_size={chunk_size}, "
            f"score={type(score).__name__}"
        )
    if chunk_size > 0 and dropout > 0:
        raise ValueError(
            "Chunked attention never forms the attention weights, so it "
            "cannot apply dropout to them; use chunk_size=None or 0 with "
            f"dropout. Received: chunk_size={chunk_size}, dropout={dropout}"
        )
    return chunk_size


class _Untracked:
    """Hides a layer from Keras's attribute tracking until `build`.

    The score layer is tracked only after the projections, so that its
    weights come after them and `set_weights` with the weights of a
    `keras.layers.MultiHeadAttention` lines up.
    """

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class _MultiHeadBase(keras.layers.Layer):
    """Projections, attention and output projection shared by the layers.

    The variables are those of `keras.layers.MultiHeadAttention`: `EinsumDense`
    sublayers `query`, `key`, (`gate`), `value` and `attention_output` with
    kernels `(dim, num_heads, head_dim)` and `(num_heads, value_dim, out)`.
    The projections are computed as plain matmuls on those kernels.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim,
        dropout,
        use_bias,
        kernel_initializer,
        bias_initializer,
        kernel_regularizer,
        bias_regularizer,
        activity_regularizer,
        kernel_constraint,
        bias_constraint,
        seed,
        score,
        chunk_size=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = _positive_int("num_heads", num_heads)
        self.key_dim = key_dim
        self.value_dim = _positive_int("value_dim", value_dim, allow_none=True)
        self.dropout = _common.check_rate("dropout", dropout)
        self.use_bias = bool(use_bias)
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
        self._score_holder = _Untracked(scores_lib.get(score))
        self.chunk_size = _check_chunk_size(
            chunk_size, self.score, self.dropout
        )
        self.supports_masking = True
        self._dropout_layer = keras.layers.Dropout(
            self.dropout, seed=seed, dtype=self.dtype_policy
        )

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

    def _dense(self, name, equation, output_shape, bias_axes, activation=None):
        return keras.layers.EinsumDense(
            equation,
            output_shape=output_shape,
            activation=activation,
            bias_axes=bias_axes if self.use_bias else None,
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            activity_regularizer=self.projection_activity_regularizer,
            kernel_constraint=self.kernel_constraint,
            bias_constraint=self.bias_constraint,
            name=name,
            dtype=self.dtype_policy,
        )

    def _projection(self, name, input_shape, depth, activation=None):
        dense = self._dense(
            name,
            "abc,cde->abde",
            (None, self.num_heads, depth),
            "de",
            activation=activation,
        )
        dense.build(tuple(input_shape))
        return dense

    def _build_layers(
        self,
        query_shape,
        key_shape,
        value_shape,
        key_dim,
        value_dim,
        out,
        gate=False,
    ):
        """Creates the variables in the order of Keras's layer."""
        self._query_dense = self._projection("query", query_shape, key_dim)
        self._key_dense = self._projection("key", key_shape, key_dim)
        if gate:
            self._gate_dense = self._projection(
                "gate", query_shape, value_dim, activation="sigmoid"
            )
        self._value_dense = self._projection("value", value_shape, value_dim)
        letters = "efghijklmnopqrstuvwxyz"[: len(out)]
        self._output_dense = self._dense(
            "attention_output",
            f"abcd,cd{letters}->ab{letters}",
            (None,) + tuple(out),
            letters,
        )
        self._output_dense.build(
            (query_shape[0], query_shape[1], self.num_heads, value_dim)
        )
        self._out_dims = tuple(out)
        # Tracked only now, so that score weights follow Keras's variables.
        self._score_layer = self.score
        if not self.score.built:
            batch = query_shape[0]
            self.score.build(
                (batch, self.num_heads, query_shape[1], key_dim),
                (batch, self.num_heads, key_shape[1], key_dim),
            )

    def _activity(self, x):
        """Activity regularisation of a projection, as its sublayer would."""
        regularizer = self.projection_activity_regularizer
        if regularizer is None:
            return
        batch = ops.cast(ops.shape(x)[0], "float32")
        loss = ops.cast(regularizer(x), "float32")
        self.add_loss(ops.divide_no_nan(loss, batch))

    def _linear(self, x, dense, kernel=None, bias=None):
        """`x (B, T, Din) @ kernel` flattened to `(B, T, units)`."""
        if kernel is None:
            kernel = dense.kernel
            bias = dense.bias if self.use_bias else None
        units = math.prod(kernel.shape) // x.shape[-1]
        y = ops.matmul(x, ops.reshape(kernel, (x.shape[-1], units)))
        if bias is not None:
            y = ops.add(y, ops.reshape(bias, (units,)))
        return y

    def _split_heads(self, x, depth):
        """`(B, T, heads·depth)` → `(B, T, heads, depth)`, a free reshape."""
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.reshape(x, (batch, length, self.num_heads, depth))

    def _project(self, x, dense, depth):
        y = self._linear(x, dense)
        self._activity(y)
        return self._split_heads(y, depth)

    def _mask(
        self,
        query,
        value,
        query_mask,
        value_mask,
        key_mask,
        attention_mask,
        use_causal_mask,
        window=None,
    ):
        """The combined mask, broadcastable to `(B, heads, Tq, Tv)`."""
        query_length, key_length = ops.shape(query)[1], ops.shape(value)[1]
        per_head = None
        if attention_mask is not None:
            rank = len(attention_mask.shape)
            if rank not in (2, 3, 4):
                raise ValueError(
                    f"{type(self).__name__} expects `attention_mask` of shape "
                    "`(Tq, Tv)`, `(batch_size, Tq, Tv)` or `(batch_size, "
                    "num_heads, Tq, Tv)`. Received: attention_mask.shape="
                    f"{tuple(attention_mask.shape)}, query.shape="
                    f"{tuple(query.shape)}, value.shape={tuple(value.shape)}"
                )
            if rank == 4:
                # combine_masks would align a per-head mask with the
                # `(B, Tq, Tv)` masks from the right; it joins after them.
                per_head, attention_mask = attention_mask, None
        if window is not None:
            band = _sliding_window_mask(query_length, key_length, window)
            attention_mask = (
                band
                if attention_mask is None
                else ops.logical_and(ops.cast(attention_mask, "bool"), band)
            )
        mask = ka_ops.combine_masks(
            query_length,
            key_length,
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )
        if mask is not None:
            mask = ops.expand_dims(mask, -3)
        if per_head is not None:
            per_head = ops.cast(per_head, "bool")
            mask = per_head if mask is None else ops.logical_and(mask, per_head)
        return mask

    def _dot_inputs(self, query, key):
        """Query and key of a dot score, in the logits dtype, query scaled."""
        dtype = ka_ops.logits_dtype(query.dtype)
        query, key = ops.cast(query, dtype), ops.cast(key, dtype)
        if type(self.score) is scores_lib.ScaledDotScore:
            # Scaling the query costs `T·depth`, scaling logits `Tq·Tk`.
            query = query * (1.0 / math.sqrt(query.shape[-1]))
        return query, key

    def _logits(self, query, key):
        """Logits `(B, heads, Tq, Tk)` from `(B, T, heads, depth)` heads."""
        if type(self.score) in _DOT_SCORES:
            # Without moving the heads in front: one einsum that the
            # backends turn into a batched matmul.
            query, key = self._dot_inputs(query, key)
            return ops.einsum("bqnd,bknd->bnqk", query, key)
        # Scores take `(..., T, depth)`, so the heads become a batch axis.
        return self.score(
            ops.transpose(query, (0, 2, 1, 3)),
            ops.transpose(key, (0, 2, 1, 3)),
        )

    def _chunk_block(
        self,
        batch_size,
        query_length,
        key_length,
        attention_mask,
        window,
        return_weights,
        training,
    ):
        """The block size of the chunked path, or 0 for the dense one."""
        unsupported = {
            "attention_mask": attention_mask is not None,
            "sliding_window": window is not None,
            "return_attention_scores": return_weights,
        }
        if self.chunk_size:
            for name, used in unsupported.items():
                if used:
                    raise ValueError(
                        "Chunked attention supports padding masks and "
                        f"causal masking only, not `{name}`: pass "
                        f"chunk_size=0 or None to use `{name}`. Received: "
                        f"chunk_size={self.chunk_size}"
                    )
            return self.chunk_size
        if self.chunk_size == 0 or any(unsupported.values()):
            return 0
        if type(self.score) not in _CHUNKABLE_SCORES:
            return 0
        if self.dropout > 0 and training is not False:
            return 0
        if not all(isinstance(n, int) for n in (query_length, key_length)):
            return 0
        batch = batch_size if isinstance(batch_size, int) else 1
        dense_bytes = 4 * batch * self.num_heads * query_length * key_length
        if dense_bytes < AUTO_CHUNK_MIN_BYTES:
            return 0
        return AUTO_CHUNK_SIZE

    def _chunked_attend(
        self, query, key, value, query_mask, key_masks, causal, block
    ):
        """Chunked attention on `(B, T, heads, depth)` heads."""
        key_mask = None
        for m in key_masks:
            if m is not None:
                m = ops.cast(m, "bool")
                key_mask = (
                    m if key_mask is None else ops.logical_and(key_mask, m)
                )
        scale = None  # ScaledDotScore: 1 / sqrt(depth)
        if type(self.score) is scores_lib.CosineScore:
            dtype = ka_ops.logits_dtype(query.dtype)

            def unit(x):
                x = ops.cast(x, dtype)
                norm = ops.sqrt(ops.sum(ops.square(x), -1, keepdims=True))
                return x / ops.maximum(norm, self.score.epsilon)

            query, key, scale = unit(query), unit(key), 1.0
        elif type(self.score) is scores_lib.DotScore:
            scale = 1.0
        heads_first = (0, 2, 1, 3)
        context = ka_ops.chunked_attention(
            ops.transpose(query, heads_first),
            ops.transpose(key, heads_first),
            ops.transpose(value, heads_first),
            scale=scale,
            query_mask=query_mask,
            key_mask=key_mask,
            causal=causal,
            query_chunk_size=block,
            key_chunk_size=block,
        )
        return ops.transpose(context, heads_first)

    def _attend(self, query, key, value, mask, training, return_weights):
        """Attention on `(B, T, heads, depth)` heads.

        Returns the context `(B, Tq, heads, Dv)` and the weights
        `(B, heads, Tq, Tk)` (`None` unless `return_weights`).
        """
        dropout = self.dropout > 0 and training is not None
        dropout = dropout and training is not False
        if type(self.score) in _DOT_SCORES and not (dropout or return_weights):
            query, key = self._dot_inputs(query, key)
            return _dot_attention(query, key, value, mask), None
        weights = _softmax(self._logits(query, key), mask)
        weights = ops.cast(weights, value.dtype)
        applied = weights
        if self.dropout > 0:
            applied = self._dropout_layer(weights, training=training)
        return ops.einsum("bnqk,bknd->bqnd", applied, value), weights

    def _output(self, context, gate_input=None):
        """`(B, Tq, heads, Dv)` context → output `(B, Tq, *out)`."""
        batch, length = ops.shape(context)[0], ops.shape(context)[1]
        depth = self.num_heads * context.shape[-1]
        context = ops.reshape(context, (batch, length, depth))
        if gate_input is not None:
            gate = ops.sigmoid(self._linear(gate_input, self._gate_dense))
            self._activity(gate)
            context = context * gate
        output = self._linear(context, self._output_dense)
        self._activity(output)
        if len(self._out_dims) > 1:
            output = ops.reshape(output, (batch, length) + self._out_dims)
        return output

    def get_config(self):
        config = {
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(
                self.kernel_initializer
            ),
            "bias_initializer": keras.initializers.serialize(
                self.bias_initializer
            ),
            "kernel_regularizer": keras.regularizers.serialize(
                self.kernel_regularizer
            ),
            "bias_regularizer": keras.regularizers.serialize(
                self.bias_regularizer
            ),
            "activity_regularizer": keras.regularizers.serialize(
                self.projection_activity_regularizer
            ),
            "kernel_constraint": keras.constraints.serialize(
                self.kernel_constraint
            ),
            "bias_constraint": keras.constraints.serialize(
                self.bias_constraint
            ),
            "seed": self.seed,
            "score": scores_lib.serialize(self.score),
            "chunk_size": self.chunk_size,
        }
        return {**super().get_config(), **config}


def _check_shapes(query_shape, value_shape, key_shape):
    shapes = (
        f"query.shape={tuple(query_shape)}, value.shape={tuple(value_shape)}"
    )
    if key_shape is not None:
        shapes += f", key.shape={tuple(key_shape)}"
    key_shape = value_shape if key_shape is None else key_shape
    if any(len(s) != 3 for s in (query_shape, value_shape, key_shape)):
        raise ValueError(
            "MultiHeadAttention expects `query`, `value` and `key` of shape "
            "`(batch_size, T, dim)` (attention over one sequence axis). "
            f"Received: {shapes}"
        )
    if any(s[-1] is None for s in (query_shape, value_shape, key_shape)):
        raise ValueError(
            "MultiHeadAttention needs the last axis of `query`, `value` and "
            f"`key` to be known. Received: {shapes}"
        )
    if (
        key_shape[1] is not None
        and value_shape[1] is not None
        and key_shape[1] != value_shape[1]
    ):
        raise ValueError(
            "MultiHeadAttention needs `key` and `value` with the same number "
            f"of positions (axis 1). Received: {shapes}"
        )


@keras.saving.register_keras_serializable(package=_PACKAGE)
class MultiHeadAttention(_MultiHeadBase):
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
    (Keras spreads it uniformly), and the score is pluggable.

    The score is any of `keras_attention.scores`. It runs on
    `(batch_size, num_heads, T, key_dim)` tensors, so one score layer serves
    every head: the weights of a parametric score (e.g. the `kernel` of
    `"bilinear"`, `(key_dim, key_dim)`) are shared by all heads. They come
    after Keras's variables in `layer.weights`, so `set_weights` with Keras's
    weights followed by the score's lines up.

    Only inputs of shape `(batch_size, T, dim)` are supported (attention
    over their sequence axis); `flash_attention=True` is not supported.

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
        attention_axes: Kept for compatibility; only `None` (or `1`, the
            sequence axis) is supported.
        sliding_window: Optional positive integer: query `i` only attends to
            keys `j` with `|i - j| < sliding_window`. Defaults to `None`.
        flash_attention: Kept for compatibility; only `None` or `False`.
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
        chunk_size: Memory-efficient attention for long sequences
            (`keras_attention.ops.chunked_attention`: blocks of queries and
            keys with an online softmax and a recomputing backward pass, so
            memory grows linearly with the length). `None` (default) uses it
            by itself when the dense weights (batch × heads × Tq × Tk
            floats, with batch 1 when it is not static) would take 2 GiB
            or more, the lengths are static, the score is a dot product
            (`"dot"`, `"scaled_dot"`, `"cosine"`), no attention scores are
            requested, no dropout is active and there is no
            `attention_mask` or sliding window; otherwise the dense path.
            `0` is always dense. A positive value is the block size, and
            then an unsupported combination raises `ValueError`. Both paths
            give the same outputs and gradients (to float32 rounding).
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
        score="scaled_dot",
        chunk_size=None,
        **kwargs,
    ):
        super().__init__(
            num_heads=num_heads,
            key_dim=_positive_int("key_dim", key_dim),
            value_dim=value_dim,
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
            **kwargs,
        )
        self._output_shape = _output_shape_tuple(output_shape)
        self.attention_axes = _attention_axes_tuple(attention_axes)
        self.sliding_window = _positive_int(
            "sliding_window", sliding_window, allow_none=True
        )
        if flash_attention:
            raise ValueError(
                "Flash attention is not supported by "
                "keras_attention.MultiHeadAttention; pass None or False. "
                f"Received: flash_attention={flash_attention!r}"
            )
        self.flash_attention = flash_attention
        self.use_gate = bool(use_gate)

    # Like Keras, `output_shape` is not exposed: it would clash with the
    # `output_shape` of functional models in `summary()`.

    def build(self, query_shape, value_shape, key_shape=None):
        _check_shapes(query_shape, value_shape, key_shape)
        key_shape = value_shape if key_shape is None else key_shape
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
    ):
        if key is None:
            key = value
        value_dim = self.value_dim or self.key_dim
        q = self._project(query, self._query_dense, self.key_dim)
        k = self._project(key, self._key_dense, self.key_dim)
        v = self._project(value, self._value_dense, value_dim)
        block = self._chunk_block(
            query.shape[0],
            query.shape[1],
            value.shape[1],
            attention_mask,
            self.sliding_window,
            return_attention_scores,
            training,
        )
        if block:
            context, weights = (
                self._chunked_attend(
                    q,
                    k,
                    v,
                    query_mask,
                    (value_mask, key_mask),
                    use_causal_mask,
                    block,
                ),
                None,
            )
        else:
            mask = self._mask(
                query,
                value,
                query_mask,
                value_mask,
                key_mask,
                attention_mask,
                use_causal_mask,
                window=self.sliding_window,
            )
            context, weights = self._attend(
                q, k, v, mask, training, return_attention_scores
            )
        output = self._output(context, query if self.use_gate else None)
        if return_attention_scores:
            return output, weights
        return output

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        _check_shapes(query_shape, value_shape, key_shape)
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
    ):
        key_shape = None if key is None else key.shape
        shape = self.compute_output_shape(query.shape, value.shape, key_shape)
        output = keras.KerasTensor(shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        weights_shape = (
            query.shape[0],
            self.num_heads,
            query.shape[1],
            value.shape[1],
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
            "flash_attention": self.flash_attention,
            "use_gate": self.use_gate,
        }
        return config
