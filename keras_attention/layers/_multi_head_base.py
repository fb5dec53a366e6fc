"""The one multi-head engine: `MultiHeadAttention`, `SelfAttention` and
`GroupedQueryAttention` are this layer with their constructors and names.

`num_heads` query heads share `num_key_value_heads` key/value heads (as
many by default: multi-head attention). The engine owns the projections,
the rotary positions, the cache (`_cache.KeyValueCache`), the masks
(always one `ops.masks.AttentionMasks`) and one call: project, rotate and
update the cache, ask `ops.plan_attention` for the path, run its kernel
(`_heads`), project out (private module).
"""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention import scores as scores_lib
from keras_attention.layers import _cache
from keras_attention.layers import _heads
from keras_attention.layers import _local_window
from keras_attention.layers import _logit_activation
from keras_attention.layers import _mask_shapes
from keras_attention.layers import _mods
from keras_attention.layers import _multi_head_checks as checks
from keras_attention.layers import _projections
from keras_attention.ops import ring as ring_lib

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


class MultiHeadBase(_projections.HeadProjections):
    """The multi-head engine: `num_heads` query heads over
    `num_key_value_heads` key/value heads (as many by default).

    One call (`_attention_call`): `_open_cache` (the call's
    `_cache.AttentionCache`), `_project` (the heads, rotated, through the
    cache), `ops.plan_attention` for the path, its kernel (`_heads`), then
    `_project_out`. A variant overrides those three hooks
    (`MultiHeadLatentAttention`) or is a constructor
    (`GroupedQueryAttention`).

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
    # Whether flash attention runs `keras.ops.dot_product_attention`'s
    # flash kernel (MultiHeadAttention) or the fused kernel of this package
    # (GroupedQueryAttention, whose flag only refuses dropout and scores).
    keras_flash_kernel = True

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
        num_key_value_heads=None,
        rotary_embedding=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = _validation.positive_int("num_heads", num_heads)
        # Key/value heads: as many as query heads unless grouped.
        self._kv_heads = num_key_value_heads or self.num_heads
        self.rotary_embedding = _cache.get_rotary(rotary_embedding)
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
        self._return_attention_scores = False
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

    def _check_masks(self, query_shape, value_shape, key_shape, masks):
        """Explicit masks of the wrong shape: a `ValueError` naming them."""
        _mask_shapes.check_heads_masks(
            type(self).__name__,
            (query_shape, value_shape, key_shape),
            masks,
            self.num_heads,
        )

    def _attention_call(
        self, inputs, masks, training, return_weights, mods, layout=None
    ):
        """The one call: project, rotate and update the cache, plan,
        attend, project out.

        `inputs` is `(query, value, key, cache, cache_update_index)`;
        `masks` the keyword arguments of `_compute_attention_mask`
        (`query_mask`, `value_mask`, `key_mask`, `attention_mask`,
        `use_causal_mask`); `mods` the call's `(score_mod, mask_mod,
        attention_bias)`. Returns keras-hub's `output[, scores][, cache]`.
        """
        query, value, key, cache, index = inputs
        name = type(self).__name__
        cache = self._open_cache(cache, index, self.compute_dtype)
        axes = self._axes
        flat = axes is None or axes.is_plain
        if not flat and (cache or self.rotary_embedding is not None):
            raise ValueError(
                f"{name}: `cache` and `rotary_embedding` need inputs "
                "`(batch_size, time, dim)` attended over time. Received: "
                f"attention_axes={getattr(self, 'attention_axes', None)!r}"
            )
        if cache is None:
            self._check_masks(query.shape, value.shape, key.shape, masks)
        q, k, v = self._project(query, value, key, cache, layout)
        call = (masks, training, return_weights, mods, cache)
        if flat:
            context, weights = self._attend(query, value, (q, k, v), call)
        else:
            heads = (axes.heads(q), axes.heads(k), axes.heads(v))
            call = (axes.masks(masks, query.shape, key.shape),) + call[1:]
            context, weights = self._attend(heads[0], heads[2], heads, call)
            context = axes.context(context, query.shape)
            weights = axes.weights(weights, query.shape, key.shape)
        output = self._project_out(context, query, layout)
        tensor = None if cache is None else cache.tensor
        return _cache.outputs(output, weights, tensor, return_weights)

    def _open_cache(self, cache, index, dtype=None):
        """The call's `_cache.AttentionCache` (keras-hub's layout), or
        `None`; a layout of another variant overrides it."""
        return _cache.KeyValueCache.open(
            type(self).__name__, cache, index, dtype
        )

    def _project(self, query, value, key, cache, layout=None):
        """The heads `(q, k, v)`: projected, rotated at their positions,
        the keys and values through the cache. `layout` is a variant's
        (MLA's absorbed or expanded heads)."""
        start = 0 if cache is None else cache.start
        rotate = self.rotary_embedding
        q = _cache.rotate(rotate, self._query_dense(query), start)

        def project_key():
            return _cache.rotate(rotate, self._key_dense(key), start)

        if cache is None:
            return q, project_key(), self._value_dense(value)
        k, v = cache.update(project_key, lambda: self._value_dense(value))
        return q, k, v

    def _project_out(self, context, query, layout=None):
        """The output from the heads' context `(B, Tq, H, Dv)`: the gate,
        then the output projection."""
        if getattr(self, "use_gate", False):
            context = context * ops.cast(self._gate_dense(query), context.dtype)
        return self._output_dense(ops.cast(context, self.compute_dtype))

    def _attend(self, query, value, heads, call):
        """`(context, weights)` of the heads `(q, k, v)` on the planned path.

        `query` and `value` are what `_compute_attention_mask` gets (the
        layer's inputs, as in Keras); `call` is `(masks, training,
        return_weights, mods, cache)`.
        """
        masks, training, return_weights, mods, cache = call
        plan = self._plan(heads, call)
        if plan.path == "ring":
            return self._ring(heads, plan, call), None
        if plan.flex:
            return self._flex(heads, plan, call)
        if plan.path == "blocks":
            q, k, v = heads
            flags = self._attention_masks(masks)
            context = _heads.blocks(self.score, q, k, v, flags, plan.block_size)
            return context, None
        if cache is None:
            mask = self._compute_attention_mask(query, value, **masks)
        else:
            mask = cache.dense_mask(
                ops.shape(heads[0])[1],
                ops.shape(heads[1])[1],
                masks,
                self._sliding_window,
                self._band(masks),
            )
        penalty = self.penalty_coefficient > 0
        context, weights = self._call_compute_attention(
            *heads, mask, training, return_weights or penalty
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

    def _plan(self, heads, call):
        """`ops.plan_attention` for this layer and call."""
        masks, training, return_weights, mods, cache = call
        q, k = heads[0], heads[1]
        own = self._mods_holder.value
        flags = dict(
            weights=bool(return_weights) or self.penalty_coefficient > 0,
            dropout=self._dropout_active(training),
            mods=any(m is not None for m in (*own, *mods)),
            tensor_mask=masks.get("attention_mask") is not None,
            cached=cache is not None,
            grouped=k.shape[2] != q.shape[2],
            causal=bool(masks.get("use_causal_mask")),
            ring=ring_lib.current() is not None,
        )
        return ka_ops.plan_attention(
            self.score.form,
            (q.shape[0], q.shape[2], q.shape[1], k.shape[1]),
            self.chunk_size,
            **flags,
            **self._plan_flags(self._logits_hook()),
        )

    def _plan_flags(self, logits_hook):
        """What the planner needs of the layer itself."""
        return dict(
            flash=bool(self._flash_attention),
            logits_hook=logits_hook,
            score=self.score.name,
            bytes_per_logit=self.score.dense_bytes_per_logit,
        )

    def _logits_hook(self):
        """Why this layer forms its logits densely, or `None`: an
        overridden Keras hook, `attention_activation`, a penalty."""
        if self.overridden_hooks:
            return f"overridden {sorted(self.overridden_hooks)[0]}"
        if self.attention_activation is not None:
            return "attention_activation"
        if self.penalty_coefficient > 0:
            return "penalty_coefficient"
        return None

    def _dropout_active(self, training):
        return self.dropout > 0 and training not in (None, False)

    def _flex(self, heads, plan, call):
        """`(context, weights)` by `flex_attention`: the mods, and the
        masks as one mask mod (over the cache's slots, at absolute query
        positions, with a cache)."""
        masks, training, return_weights, mods, cache = call
        q, k, scale = self.score.dot_product_form(heads[0], heads[1])
        own = self._mods_holder.value
        window, band = self._sliding_window, self._band(masks)
        if cache is None:
            score_mod = _mods.score_mod_of(own[0], mods[0], mods[2])
            flags = self._attention_masks(masks, (own[1], mods[1]))
            mask_mod = flags.mask_mod()
        else:
            score_mod = _mods.score_mod_of(
                cache.shift(own[0]), cache.shift(mods[0]), mods[2]
            )
            mask_mod = cache.mask_mod(masks, own[1], mods[1], window, band)
        dropout_fn = None
        if self._dropout_active(training):

            def dropout_fn(weights):
                return self._dropout_layer(weights, training=training)

        chunk = plan.block_size[0] if plan.path == "blocks" else 0
        return _heads.flex(
            (q, k, heads[2]),
            1.0 if scale is None else scale,
            score_mod,
            mask_mod,
            (chunk, dropout_fn, return_weights),
        )

    def _ring(self, heads, plan, call):
        """The context of `ops.ring_attention`: the heads' sequence split
        over the devices of the active `ContextParallel`."""
        masks, _, _, mods, _ = call
        q, k, scale = self.score.dot_product_form(heads[0], heads[1])
        own = self._mods_holder.value
        flags = self._attention_masks(masks, (own[1], mods[1]))
        return _heads.ring(
            (q, k, heads[2]),
            1.0 if scale is None else scale,
            _mods.score_mod_of(own[0], mods[0], mods[2]),
            flags,
            plan.block_size[0],
        )

    def _band(self, masks):
        """`SelfAttention`'s `attention_width` as a `(left, right)` band."""
        if self._attention_width is None:
            return None
        causal = bool(masks.get("use_causal_mask"))
        return _local_window.band(self._attention_width, causal)

    def _attention_masks(self, masks, mask_mods=()):
        """The layer's mask flags as one `ka_ops.masks.AttentionMasks`.

        `masks` holds the keyword arguments of `_compute_attention_mask`;
        `sliding_window=n` (MultiHeadAttention, GQA) is `|i - j| < n`,
        `attention_width` (SelfAttention) keras-self-attention's window
        (`_local_window.band`). Every path takes its masks from here.
        """
        return ka_ops.masks.attention_masks(
            **masks,
            sliding_window=self._sliding_window,
            band=self._band(masks),
            mask_mods=mask_mods,
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
        """The combined mask, broadcastable to `(B, heads, Tq, Tv)`."""
        checks.attention_mask_rank(
            type(self).__name__, attention_mask, query, value
        )
        masks = dict(
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )
        return self._dense_mask(query, value, masks, heads_axis=True)

    def _dense_mask(self, query, value, masks, heads_axis):
        """The call's masks as one boolean tensor over `(Tq, Tv)`."""
        flags = self._attention_masks(masks)
        shape = (ops.shape(query)[1], ops.shape(value)[1])
        return flags.dense(*shape, heads_axis=heads_axis)

    def _call_compute_attention(self, q, k, v, mask, training, weights):
        """Calls Keras's hook `_compute_attention` with its signature."""
        return self._compute_attention(q, k, v, mask, training, weights)

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
        unless `return_attention_scores`). The dense path of
        `ops.plan_attention`: flash, the fused kernel
        `keras_attention.ops.dot_product_attention`, or the logits.
        """
        mask = ka_ops.combine_masks(
            ops.shape(query)[1],
            ops.shape(key)[1],
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            heads_axis=True,
        )
        custom_softmax = "_masked_softmax" in self.overridden_hooks
        hook = "_masked_softmax" if custom_softmax else None
        if self.attention_activation is not None:
            hook = "attention_activation"
        # The dense paths only (`chunk_size=0`): an overridden hook that
        # calls this one keeps the fused kernel.
        plan = ka_ops.plan_attention(
            self.score.form,
            (query.shape[0], query.shape[2], query.shape[1], key.shape[1]),
            0,
            weights=bool(return_attention_scores),
            dropout=self._dropout_active(training),
            grouped=key.shape[2] != query.shape[2],
            **self._plan_flags(hook),
        )
        if plan.path in ("flash", "fused"):
            q, k, scale = self.score.dot_product_form(query, key)
            grouped = key.shape[2] != query.shape[2]
            if plan.path == "flash" and self.keras_flash_kernel and not grouped:
                return _heads.flash(q, k, value, mask, scale), None
            return _heads.fused(q, k, value, mask, scale), None
        softmax = self._masked_softmax if custom_softmax else None
        dropout_fn = None
        if self.dropout > 0:

            def dropout_fn(weights):
                return self._dropout_layer(weights, training=training)

        logits = _heads.logits(self.score, query, key)
        logits = _logit_activation.apply(logits, self.attention_activation)
        return _heads.dense(logits, value, mask, softmax, dropout_fn)

    def _check_plan(self):
        """The constructor's arguments against the planner's refusals
        (a positive `chunk_size` with a logits hook, say), at once."""
        mods = any(m is not None for m in self._mods_holder.value)
        ka_ops.plan_attention(
            self.score.form,
            (None, self.num_heads, None, None),
            self.chunk_size,
            mods=mods,
            **self._plan_flags(self._logits_hook()),
        )

    def _engine_config(self):
        """The config every layer of the engine shares."""
        rotary = self.rotary_embedding
        return {
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            **_projections.projection_config(self),
            "seed": self.seed,
            "score": scores_lib.serialize(self.score),
            "chunk_size": self.chunk_size,
            "score_mod": _mods.serialize("score_mod", self.score_mod),
            "mask_mod": _mods.serialize("mask_mod", self.mask_mod),
            "rotary_embedding": None
            if rotary is None
            else keras.saving.serialize_keras_object(rotary),
        }

    def get_config(self):
        config = {
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            **self._engine_config(),
            "attention_activation": _logit_activation.serialize(
                self.attention_activation
            ),
            "penalty_coefficient": self.penalty_coefficient,
        }
        config = {**super().get_config(), **config}
        config["dtype"] = self._dtype_policy_config()
        return config
