"""The machinery shared by `MultiHeadAttention` and `SelfAttention`.

Projections into heads, the attention of the heads (dense, fused or
chunked, all through `keras_attention.ops`) and the output projection
(private module; the public layers are in `multi_head.py` and
`self_attention.py`).
"""

import keras
from keras import ops

from keras_attention import _policies
from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention import scores as scores_lib
from keras_attention.layers import _chunking
from keras_attention.layers import _local_window
from keras_attention.layers import _logit_activation
from keras_attention.layers import _mask_shapes
from keras_attention.layers import _mods
from keras_attention.layers import _multi_head_checks as checks
from keras_attention.layers import _projections

_HEADS_FIRST = (0, 2, 1, 3)
_HOOKS = ("_compute_attention", "_compute_attention_mask", "_masked_softmax")


class _Untracked:
    """Hides a layer from Keras's attribute tracking until `build`.

    The score layer (and a layer mod) is tracked only after the
    projections, so that `set_weights` with the weights of a
    `keras.layers.MultiHeadAttention` lines up.
    """

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class MultiHeadBase(keras.layers.Layer):
    """Projections, attention and output projection shared by the layers.

    The variables are those of `keras.layers.MultiHeadAttention`: `EinsumDense`
    sublayers `query`, `key`, (`gate`), `value` and `attention_output` with
    kernels `(dim, num_heads, head_dim)` and `(num_heads, value_dim, out)`,
    called as sublayers (so quantization, LoRA, dtype policies, constraints
    and activity regularizers apply to them as to Keras's layer).

    `overridden_hooks`, a class attribute, names Keras's override points
    (`_HOOKS`) a subclass redefines (set when the class is created, unless
    it passes `hooks_are_defaults=True`): such a layer always attends
    through `_compute_attention`, and its `_masked_softmax` is used.
    """

    overridden_hooks = frozenset()

    def __init_subclass__(cls, hooks_are_defaults=False, **kwargs):
        super().__init_subclass__(**kwargs)
        if not hooks_are_defaults:
            defined = {name for name in _HOOKS if name in vars(cls)}
            cls.overridden_hooks = cls.overridden_hooks | defined

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
        attention_activation=None,
        penalty_coefficient=0.0,
        score_mod=None,
        mask_mod=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = _validation.positive_int("num_heads", num_heads)
        self.key_dim = key_dim
        self.value_dim = _validation.positive_int(
            "value_dim", value_dim, allow_none=True
        )
        self.dropout = _validation.rate("dropout", dropout)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = _validation.initializer(
            "kernel_initializer", kernel_initializer
        )
        self.bias_initializer = _validation.initializer(
            "bias_initializer", bias_initializer
        )
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.projection_activity_regularizer = keras.regularizers.get(
            activity_regularizer
        )
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.seed = seed
        self._score_holder = _Untracked(
            scores_lib.get(score, dtype=self.dtype_policy)
        )
        self.chunk_size = checks.chunk_size(
            chunk_size, self.score, self.dropout
        )
        self.attention_activation = _logit_activation.get(attention_activation)
        self.penalty_coefficient = _validation.non_negative(
            "penalty_coefficient", penalty_coefficient, finite=True
        )
        # Tracked only in `build` (a layer mod's weights after Keras's).
        self._mods_holder = _Untracked(
            tuple(
                _mods.check(name, _mods.deserialize(mod))
                for name, mod in (
                    ("score_mod", score_mod),
                    ("mask_mod", mask_mod),
                )
            )
        )
        self.supports_masking = True
        self._sliding_window = None
        # keras-self-attention's local window (`SelfAttention` only).
        self._attention_width = None
        self._flash_attention = False
        self._axes = None
        self._dropout_layer = keras.layers.Dropout(
            self.dropout, seed=seed, dtype=self.dtype_policy
        )

    @property
    def score(self):
        """The score layer, shared by all heads."""
        return self._score_holder.value

    score_mod = property(lambda self: self._mods_holder.value[0])
    mask_mod = property(lambda self: self._mods_holder.value[1])

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

    def _get_common_kwargs_for_sublayer(self):
        """Keras's hook: the `EinsumDense` arguments every projection shares.

        Fresh initializer objects each call; the regularizers, constraints
        and the dtype policy of the layer.
        """
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

    def _dense(self, name, equation, output_shape, bias_axes, activation=None):
        return keras.layers.EinsumDense(
            equation,
            output_shape=output_shape,
            activation=activation,
            bias_axes=bias_axes if self.use_bias else None,
            name=name,
            **self._get_common_kwargs_for_sublayer(),
        )

    def _projection(self, name, input_shape, depth, activation=None):
        # `(B, d..., dim)` → `(B, d..., heads, depth)`: "abc,cde->abde" for
        # rank 3, the equations of Keras's layer for any rank.
        rank = len(input_shape)
        inputs, heads = "abcdefghij"[:rank], "klmn"[:2]
        dense = self._dense(
            name,
            f"{inputs},{inputs[-1]}{heads}->{inputs[:-1]}{heads}",
            (None,) * (rank - 2) + (self.num_heads, depth),
            heads,
            activation=activation,
        )
        dense.build(tuple(input_shape))
        # The layer itself combines the Keras masks of its inputs; a
        # projection only passes a mask through instead of warning that it
        # drops it.
        dense.supports_masking = True
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
        rank = len(query_shape)
        heads = "abcdefghijk"[: rank + 1]
        letters = "nopqrstuvwxyz"[: len(out)]
        self._output_dense = self._dense(
            "attention_output",
            f"{heads},{heads[-2:]}{letters}->{heads[:-2]}{letters}",
            (None,) * (rank - 2) + tuple(out),
            letters,
        )
        self._output_dense.build(
            tuple(query_shape[:-1]) + (self.num_heads, value_dim)
        )
        # Tracked only now, so that score weights follow Keras's variables.
        self._score_layer = self.score
        mods = self._mods_holder.value
        self._mod_layers = [m for m in mods if isinstance(m, keras.Layer)]
        if not self.score.built:
            batch = query_shape[0]
            self.score.build(
                (batch, self.num_heads, None, key_dim),
                (batch, self.num_heads, None, key_dim),
            )

    def _check_masks(self, query_shape, value_shape, key_shape, masks):
        """Explicit masks of the wrong shape: a `ValueError` naming them."""
        _mask_shapes.check_heads_masks(
            type(self).__name__,
            (query_shape, value_shape, key_shape),
            masks,
            self.num_heads,
        )

    def _multi_head_call(
        self,
        query,
        value,
        key,
        masks,
        training,
        return_weights,
        gate=False,
        mods=(None, None, None),
    ):
        """Projects, attends and projects back.

        `masks` holds the keyword arguments of `_compute_attention_mask`
        (`query_mask`, `value_mask`, `key_mask`, `attention_mask`,
        `use_causal_mask`); `mods` the call's `(score_mod, mask_mod,
        attention_bias)`.
        """
        self._check_masks(query.shape, value.shape, key.shape, masks)
        q = self._query_dense(query)
        k = self._key_dense(key)
        v = self._value_dense(value)
        axes = self._axes
        if axes is None or axes.is_plain:
            context, weights = self._attend_heads(
                query, value, q, k, v, masks, training, return_weights, mods
            )
        else:
            flat_masks = axes.masks(masks, query.shape, key.shape)
            q, k, v = axes.heads(q), axes.heads(k), axes.heads(v)
            context, weights = self._attend_heads(
                q, v, q, k, v, flat_masks, training, return_weights, mods
            )
            context = axes.context(context, query.shape)
            weights = axes.weights(weights, query.shape, key.shape)
        if gate:
            context = context * self._gate_dense(query)
        output = self._output_dense(context)
        if return_weights:
            return output, weights
        return output

    def _attend_heads(
        self,
        query,
        value,
        q,
        k,
        v,
        masks,
        training,
        return_weights,
        mods=(None, None, None),
    ):
        """Chunked, or through Keras's hooks: `(context, weights)`.

        `query` and `value` are what `_compute_attention_mask` gets (the
        layer's inputs, as in Keras); `q`, `k`, `v` the projected heads
        `(B, T, heads, depth)`. With a score or mask mod (or a bias) the
        heads attend through `flex_attention`.
        """
        if any(m is not None for m in mods + self._mods_holder.value):
            return self._flex_heads(
                q, k, v, masks, training, return_weights, mods
            )
        shapes = (q.shape[0], q.shape[1], v.shape[1])
        dense_features = self._dense_only_features()
        block = _chunking.block_size(
            self,
            shapes,
            masks["attention_mask"],
            return_weights,
            training,
            dense_only=self._flash_attention
            or bool(self.overridden_hooks)
            or bool(dense_features),
            causal=bool(masks["use_causal_mask"]),
        )
        if block[0]:
            flags = self._attention_masks(masks)
            context = _chunking.chunked_heads_attention(
                self.score,
                q,
                k,
                v,
                flags.query_mask,
                (flags.key_mask,),
                False,
                block,
                band=flags.limits,
            )
            return context, None
        mask = self._compute_attention_mask(query, value, **masks)
        penalty = self.penalty_coefficient > 0
        context, weights = self._compute_attention(
            q, k, v, mask, training, return_weights or penalty
        )
        if penalty:
            # Lin et al.'s penalty for each head, averaged over the batch
            # and summed over the heads.
            self.add_loss(
                self.penalty_coefficient
                * self.num_heads
                * ka_ops.frobenius_penalty(weights)
            )
        return context, weights

    def _flex_heads(self, q, k, v, masks, training, return_weights, mods):
        """`(context, weights)` by `flex_attention` (`_mods.flex_heads`)."""
        _mods.check_flex(
            self, self._dense_only_features(), self._flash_attention
        )
        q, k, scale = self.score.dot_product_form(q, k)
        dropout_fn = None
        if self.dropout > 0 and training not in (None, False):

            def dropout_fn(weights):
                return self._dropout_layer(weights, training=training)

        own = self._mods_holder.value
        return _mods.flex_heads(
            (q, k, v),
            1.0 if scale is None else scale,
            _mods.score_mod_of(own[0], mods[0], mods[2]),
            self._attention_masks(masks, (own[1], mods[1])).mask_mod(),
            (self.chunk_size, dropout_fn, return_weights),
        )

    def _attention_masks(self, masks, mask_mods=()):
        """The layer's mask flags as one `ka_ops.masks.AttentionMasks`.

        `masks` holds the keyword arguments of `_compute_attention_mask`;
        `sliding_window=n` (MultiHeadAttention) is `|i - j| < n`,
        `attention_width` (SelfAttention) keras-self-attention's window
        (`_local_window.band`). The dense, chunked and flex paths all
        take their masks from here.
        """
        band = None
        if self._attention_width is not None:
            causal = bool(masks.get("use_causal_mask"))
            band = _local_window.band(self._attention_width, causal)
        return ka_ops.masks.attention_masks(
            **masks,
            sliding_window=self._sliding_window,
            band=band,
            mask_mods=mask_mods,
        )

    def _dense_only_features(self):
        """The features the chunked path does not take (names), checked.

        A positive `chunk_size` with one of them raises; with
        `chunk_size=None` they make the layer attend densely.
        """
        features = [
            name
            for name, used in (
                ("attention_activation", self.attention_activation),
                ("penalty_coefficient", self.penalty_coefficient > 0),
            )
            if used
        ]
        if features and self.chunk_size:
            raise ValueError(
                f"The chunked path does not support `{features[0]}` yet: "
                f"pass chunk_size=None or 0 to use it. Received: "
                f"chunk_size={self.chunk_size}, {features[0]}="
                f"{getattr(self, features[0])!r}"
            )
        return features

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
        """The combined mask, broadcastable to `(B, heads, Tq, Tv)`."""
        checks.attention_mask_rank(
            type(self).__name__, attention_mask, query, value
        )
        flags = self._attention_masks(
            dict(
                query_mask=query_mask,
                value_mask=value_mask,
                key_mask=key_mask,
                attention_mask=attention_mask,
                use_causal_mask=use_causal_mask,
            )
        )
        return flags.dense(
            ops.shape(query)[1], ops.shape(value)[1], heads_axis=True
        )

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
    ):
        """Attention of projected heads `(B, T, heads, depth)`.

        Keras's override point, with its arguments: `attention_mask` is
        `(B, Tq, Tk)`, `(Tq, Tk)` or per head `(B, heads, Tq, Tk)`, and
        `use_causal_mask` adds the causal mask to it. Returns the context
        `(B, Tq, heads, Dv)` and the weights `(B, heads, Tq, Tk)` (`None`
        unless `return_attention_scores`). Without dropout or weights to
        return, a dot-product score runs in the fused kernel
        `keras_attention.ops.dot_product_attention`.
        """
        if self._flash_attention and return_attention_scores:
            raise ValueError(
                "Returning attention scores is not supported when flash "
                "attention is enabled. Please disable flash attention to "
                "access attention scores."
            )
        mask = self._heads_mask(query, key, attention_mask, use_causal_mask)
        dropout = self.dropout > 0 and training is not None
        dropout = dropout and training is not False
        activation = self.attention_activation
        custom_softmax = "_masked_softmax" in self.overridden_hooks
        if self.score.is_dot_product and not (
            dropout
            or return_attention_scores
            or activation is not None
            or custom_softmax
        ):
            query, key, scale = self.score.dot_product_form(query, key)
            if self._flash_attention:
                return self._flash(query, key, value, mask, scale), None
            context = ka_ops.dot_product_attention(
                query, key, value, mask, scale=scale
            )
            return context, None
        logits = self.score(
            ops.transpose(query, _HEADS_FIRST),
            ops.transpose(key, _HEADS_FIRST),
        )
        logits = _logit_activation.apply(logits, activation)
        dropout_fn = None
        if self.dropout > 0:

            def dropout_fn(weights):
                return self._dropout_layer(weights, training=training)

        value = ops.transpose(value, _HEADS_FIRST)
        if custom_softmax:
            weights = self._masked_softmax(logits, mask)
            used = weights if dropout_fn is None else dropout_fn(weights)
            context = ops.matmul(ops.cast(used, value.dtype), value)
        else:
            context, weights = ka_ops.attend(
                logits, value, mask, dropout_fn=dropout_fn
            )
        return ops.transpose(context, _HEADS_FIRST), weights

    def _heads_mask(self, query, key, attention_mask, use_causal_mask):
        """`attention_mask` (and the causal mask) with a heads axis."""
        return ka_ops.combine_masks(
            ops.shape(query)[1],
            ops.shape(key)[1],
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            heads_axis=True,
        )

    def _flash(self, query, key, value, mask, scale):
        """`keras.ops.dot_product_attention` with `flash_attention=True`."""
        if mask is not None:
            mask = ops.cast(mask, "bool")
            while len(mask.shape) < 4:
                mask = ops.expand_dims(mask, 0)
        dtype = value.dtype
        context = ops.dot_product_attention(
            ops.cast(query, dtype),
            ops.cast(key, dtype),
            value,
            mask=mask,
            scale=1.0 if scale is None else scale,
            flash_attention=True,
        )
        return context

    def get_config(self):
        config = {
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            **_projections.projection_config(self),
            "seed": self.seed,
            "score": scores_lib.serialize(self.score),
            "chunk_size": self.chunk_size,
            "attention_activation": _logit_activation.serialize(
                self.attention_activation
            ),
            "penalty_coefficient": self.penalty_coefficient,
            "score_mod": _mods.serialize("score_mod", self.score_mod),
            "mask_mod": _mods.serialize("mask_mod", self.mask_mod),
        }
        config = {**super().get_config(), **config}
        config["dtype"] = self._dtype_policy_config()
        return config

    def _dtype_policy_config(self):
        """The dtype policy, with the projections' own where they differ."""
        if not self.built:
            return keras.dtype_policies.serialize(self.dtype_policy)
        denses = [self._query_dense, self._key_dense, self._value_dense]
        denses += [getattr(self, "_gate_dense", None), self._output_dense]
        return _policies.policy_config(self, denses)
