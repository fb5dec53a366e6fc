"""The one multi-head engine: `MultiHeadAttention`, `SelfAttention`,
`GroupedQueryAttention` and `MultiHeadLatentAttention` are this layer
with their constructors and names.

`num_heads` query heads share `num_key_value_heads` key/value heads (as
many by default: multi-head attention). The engine holds every
constructor argument's default and check, the projections, the rotary
positions, the cache, and one call: project, rotate and update the cache,
make the call's one `ops.engine.AttentionCall`, plan it once, run its
kernel (through Keras's hooks where a subclass overrides them,
`_keras_hooks.py`), project out (private module). `layer.explain(...)`
stops that call once planned (`_explain.py`).
"""

import dataclasses

import keras
from keras import ops

from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention import scores as scores_lib
from keras_attention.layers import _cache
from keras_attention.layers import _layer_call
from keras_attention.layers import _local_window
from keras_attention.layers import _logit_activation
from keras_attention.layers import _mask_shapes
from keras_attention.layers import _mods
from keras_attention.layers import _projections
from keras_attention.layers import _query_key_norm
from keras_attention.layers import _rotation
from keras_attention.layers._caching import CachedAttention
from keras_attention.layers._explain import Explains
from keras_attention.layers._holders import Sinks
from keras_attention.layers._holders import Untracked
from keras_attention.layers._keras_hooks import KerasHooks
from keras_attention.layers._options import EngineOptions
from keras_attention.ops import engine
from keras_attention.ops import ring as ring_lib

# SelfAttention's padding mask is `mask`.
_MASK_ARGUMENTS = (
    "mask",
    "query_mask",
    "value_mask",
    "key_mask",
    "attention_mask",
)


def _flash(flash_attention):
    """`(flash_attention, whether to use it)`: Keras's rule, the argument,
    or else the global setting (`None`, "when available", unless
    `keras.config.disable_flash_attention`)."""
    flash_attention = _validation.optional_bool(
        "flash_attention", flash_attention
    )
    use = flash_attention or keras.config.is_flash_attention_enabled()
    return flash_attention, bool(use)


class MultiHeadBase(
    KerasHooks,
    Explains,
    EngineOptions,
    CachedAttention,
    _projections.HeadProjections,
):
    """The multi-head engine: `num_heads` query heads over
    `num_key_value_heads` key/value heads (as many by default).

    One call (`_attention_call`): `_open_cache` (the call's
    `_cache.AttentionCache`), `_project` (the heads, rotated, through the
    cache), one `ops.engine.AttentionCall`, planned once
    (`ops.plan_attention`), its kernel, then `_project_out`. A variant
    overrides those three hooks (`MultiHeadLatentAttention`) or is a
    constructor (`GroupedQueryAttention`).

    The variables are those of `keras.layers.MultiHeadAttention`: `EinsumDense`
    sublayers `query`, `key`, (`gate`), `value` and `attention_output` with
    kernels `(dim, num_heads, head_dim)` and `(num_heads, value_dim, out)`,
    called as sublayers (so quantization, LoRA, dtype policies, constraints
    and activity regularizers apply to them as to Keras's layer); then the
    score's, and `sinks` with `use_sinks=True`.

    `overridden_hooks`, a class attribute, names Keras's override points
    a subclass redefines (`_keras_hooks.KerasHooks`): such a layer attends
    through `_compute_attention`, and its `_masked_softmax` is used.
    `takes` names the engine's options (`ENGINE_OPTIONS`) the layer takes;
    a variant that takes fewer refuses the others (`_refuse_untaken`).
    `native_flash` says whether `flash_attention=True` runs Keras's flash
    kernel (MultiHeadAttention) or this package's fused one with the
    flag's refusals (GroupedQueryAttention).
    """

    native_flash = True

    def __init__(
        self,
        num_heads,
        key_dim=None,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
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
        attention_activation=None,
        penalty_coefficient=0.0,
        score_mod=None,
        mask_mod=None,
        rotary_embedding=None,
        use_sinks=False,
        query_key_norm=None,
        query_key_norm_epsilon=1e-6,
        query_pre_attn_scalar=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        positive = _validation.positive_int
        self.num_heads = positive("num_heads", num_heads)
        # Key/value heads: as many as query heads (GQA sets its own).
        self._kv_heads = self.num_heads
        self.key_dim = positive("key_dim", key_dim, allow_none=True)
        self.value_dim = positive("value_dim", value_dim, allow_none=True)
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
        self.use_gate = bool(use_gate)
        self.seed = seed
        self._score_holder = Untracked(
            scores_lib.get(score, dtype=self.dtype_policy)
        )
        self.chunk_size = chunk_size
        self.attention_activation = _logit_activation.get(attention_activation)
        self.penalty_coefficient = _validation.non_negative(
            "penalty_coefficient", penalty_coefficient, finite=True
        )
        # Tracked only in `build` (a layer mod's weights after Keras's).
        self._mods_holder = Untracked(_mods.checked(score_mod, mask_mod))
        self.rotary_embedding = _rotation.get_rotary(rotary_embedding)
        self.use_sinks = _validation.optional_bool("use_sinks", use_sinks)
        self.use_sinks = bool(self.use_sinks)
        self.query_key_norm, self.query_key_norm_epsilon = (
            _query_key_norm.checked(query_key_norm, query_key_norm_epsilon)
        )
        self.query_pre_attn_scalar = _query_key_norm.pre_attn_scalar(
            query_pre_attn_scalar, self.score
        )
        self.flash_attention, self._flash_attention = _flash(flash_attention)
        self.supports_masking = True
        self._return_attention_scores = False
        # The window: the band `(left, right)` of an uncausal call, then of
        # a causal one (`_set_window`).
        self._bands = (None, None)
        self._axes = None
        self._running = Untracked(None)
        self._explaining = Untracked(False)
        self._dropout_layer = keras.layers.Dropout(
            self.dropout, seed=seed, dtype=self.dtype_policy
        )
        self._check_plan()

    def __call__(self, *args, **kwargs):
        """Checks the masks' dtypes before Keras converts the arguments
        (on JAX and PyTorch a string mask fails inside that conversion)."""
        for name in _MASK_ARGUMENTS:
            ka_ops.checks.mask_dtype(name, kwargs.get(name))
        return super().__call__(*args, **kwargs)

    @property
    def score(self):
        """The score layer, shared by all heads."""
        return self._score_holder.value

    score_mod = property(lambda self: self._mods_holder.value[0])
    mask_mod = property(lambda self: self._mods_holder.value[1])

    def _set_window(self, sliding_window=None, attention_width=None):
        """The one band behind `sliding_window` (MultiHeadAttention, GQA:
        `|i - j| < w`) and `attention_width` (SelfAttention:
        keras-self-attention's window, centred, or the history when
        causal)."""
        if sliding_window is not None:
            band = (sliding_window - 1, sliding_window - 1)
            self._bands = (band, band)
        elif attention_width is not None:
            self._bands = tuple(
                _local_window.band(attention_width, causal)
                for causal in (False, True)
            )

    def _band(self, causal):
        return self._bands[bool(causal)]

    def _check_masks(self, query_shape, value_shape, key_shape, masks):
        """Explicit masks of the wrong shape: a `ValueError` naming them."""
        _mask_shapes.check_heads_masks(
            type(self).__name__,
            (query_shape, value_shape, key_shape),
            masks,
            self.num_heads,
        )

    def _attention_call(self, call):
        """The one call of a `LayerCall`: project, rotate and update the
        cache, attend on the planned kernel, project out. Returns
        keras-hub's `output[, scores][, cache]`."""
        cache = self._open_cache(call) if call.opens_cache else None
        axes = self._axes
        flat = axes is None
        if not flat and (cache or self.rotary_embedding is not None):
            raise ValueError(
                f"{type(self).__name__}: `cache` and `rotary_embedding` need "
                "inputs `(batch_size, time, dim)` attended over time. "
                f"Received: attention_axes="
                f"{getattr(self, 'attention_axes', None)!r}"
            )
        query, value, key = call.query, call.value, call.key
        ka_ops.checks.positions(type(self).__name__, **call.shapes())
        if cache is not None:
            self._check_cached_masks(call, cache)
        elif call.has_masks:
            if flat:
                _mask_shapes.attention_mask_rank(
                    type(self).__name__, call.attention_mask, query, value
                )
            self._check_masks(
                query.shape, value.shape, key.shape, call.mask_flags()
            )
        heads = self._project(query, value, key, cache, call.layout)
        if flat:
            context, weights = self._attend(call, heads, cache)
        else:
            masks = axes.masks(call.mask_flags(), query.shape, key.shape)
            heads = tuple(axes.heads(x) for x in heads)
            flat_call = dataclasses.replace(
                call, query=heads[0], value=heads[2], key=heads[1], **masks
            )
            context, weights = self._attend(flat_call, heads, cache)
            context = axes.context(context, query.shape)
            weights = axes.weights(weights, query.shape, key.shape)
        output = self._project_out(context, query, call.layout)
        returned = None if cache is None else cache.output
        return _layer_call.outputs(
            output, weights, returned, call.return_weights
        )

    def _project(self, query, value, key, cache, layout=None):
        """The heads `(q, k, v)`: projected, rotated at their positions,
        the keys and values through the cache. `layout` is a variant's
        (MLA's absorbed or expanded heads)."""
        rotary = self.rotary_embedding
        start = 0 if cache is None else cache.start
        norm = getattr(self, "_query_key_norm", None)
        q = self._query_dense(query)
        q = q if norm is None else norm.query(q)
        if cache is not None and not cache.writes:
            if rotary is not None:
                q = _rotation.rotate(rotary, q, start)
            return (self._scaled(q), *cache.read())
        k = self._key_dense(key)
        k = k if norm is None else norm.key(k)
        if rotary is not None:
            q, k = _rotation.rotate_pair(rotary, q, k, start)
        q, v = self._scaled(q), self._value_dense(value)
        return (q, k, v) if cache is None else (q, *cache.write(k, v))

    def _scaled(self, query):
        """With `query_pre_attn_scalar=s`, the queries times
        `sqrt(head_dim / s)`: the score's `1 / sqrt(head_dim)` then makes
        the logits' scale `s ** -0.5` (Gemma's)."""
        scalar = self.query_pre_attn_scalar
        if scalar is None:
            return query
        factor = (query.shape[-1] / scalar) ** 0.5
        return query * ops.cast(factor, query.dtype)

    def _project_out(self, context, query, layout=None):
        """The output from the heads' context `(B, Tq, H, Dv)`: the gate,
        then the output projection."""
        if self.use_gate:
            context = context * ops.cast(self._gate_dense(query), context.dtype)
        return self._output_dense(ops.cast(context, self.compute_dtype))

    def _record(self, call, heads, cache):
        """The call's one `ops.engine.AttentionCall`: its masks as flags
        (as Keras's hooks take it where the call goes through them,
        `_for_hooks`)."""
        causal = bool(call.use_causal_mask)
        own_score, own_mask = self._mods_holder.value
        attended = _cache.Attended(heads[1:])
        if cache is None:
            padding = dict(
                query_mask=call.query_mask,
                value_mask=call.value_mask,
                key_mask=call.key_mask,
            )
        else:
            attended = cache.attended
            padding = dict(key_mask=attended.key_mask)
        masks = ka_ops.masks.attention_masks(
            **padding,
            attention_mask=call.attention_mask,
            use_causal_mask=causal,
            band=self._band(causal),
            mask_mods=(own_mask, call.mask_mod, *attended.mask_mods),
        )
        scales = attended.scales or (None, None)
        score_mod = own_score
        if call.score_mod is not None:
            score_mod = _mods.chained(own_score, call.score_mod)
        record = engine.AttentionCall(
            *heads,
            self.score,
            masks=masks,
            score_mod=score_mod,
            bias=call.attention_bias,
            query_offset=0 if cache is None else cache.start,
            key_positions=attended.key_positions,
            key_scale=scales[0],
            value_scale=scales[1],
            block_mask=attended.block_mask,
            dropout=self._weights_dropout(call.training),
            weights=self._weights_asked(call),
            sinks=self.sinks if self.use_sinks else None,
            activation=self.attention_activation,
            softmax=self._masked_softmax
            if "_masked_softmax" in self.overridden_hooks
            else None,
        )
        return self._for_hooks(record, call, cache) if self._hooked else record

    def _weights_asked(self, call):
        """The weights are returned, or a penalty reads them."""
        return bool(call.return_weights) or self.penalty_coefficient > 0

    def _weights_dropout(self, training):
        """The dropout of the weights where it is active, else `None`."""
        if not self._dropout_active(training):
            return None

        def dropout(weights):
            return self._dropout_layer(weights, training=training)

        return dropout

    def _flags(self, record, training, cached):
        """What `engine.plan_call` is told beside the record."""
        block_mask = record.block_mask
        return dict(
            backward=training is not False,
            cached=cached,
            ring=bool(ring_lib.ACTIVE),
            block_size=None if block_mask is None else block_mask.block_size,
            **self._layer_flags.value,
        )

    def _attend(self, call, heads, cache):
        """`(context, weights)` of the heads: one record, planned once,
        run on its kernel (through Keras's hooks where a subclass
        overrides them)."""
        record = self._record(call, heads, cache)
        flags = self._flags(record, call.training, cache is not None)
        plan = engine.plan_call(record, self.chunk_size, **flags)
        if self._explaining.value:
            # `explain`: the plan is the answer; no kernel runs.
            return self._explained(record, plan, flags)
        if self._hooked:
            context, weights = self._through_hooks(
                record, plan, call.training, self._weights_asked(call)
            )
        else:
            result = engine.run(record, plan)
            context, weights = result.output, result.weights
        if self.penalty_coefficient > 0:
            # Lin et al.'s penalty for each head, averaged over the batch
            # and summed over the heads.
            self.add_loss(
                self.penalty_coefficient
                * self.num_heads
                * ka_ops.frobenius_penalty(weights)
            )
        return context, weights if call.return_weights else None

    def _logits_hook(self):
        """Why this layer forms its logits densely, or `None`:
        `attention_activation`, a penalty."""
        if self.attention_activation is not None:
            return "attention_activation"
        if self.penalty_coefficient > 0:
            return "penalty_coefficient"
        return None

    def _dropout_active(self, training):
        return self.dropout > 0 and training not in (None, False)

    def _check_plan(self):
        """What the planner needs of the layer itself, the same on every
        call (`_layer_flags`), and the constructor's arguments against
        the planner's refusals (a positive `chunk_size` with a logits
        hook, say), at once."""
        self._layer_flags = Untracked(
            dict(
                flash=self._flash_attention,
                native_flash=self.native_flash,
                logits_hook=self._logits_hook(),
                hook=self._hook,
            )
        )
        ka_ops.plan_attention(
            self.score.form,
            (None, self.num_heads, None, None),
            self.chunk_size,
            mods=any(m is not None for m in self._mods_holder.value),
            dropout=self.dropout > 0,
            lse=self.use_sinks,
            score=type(self.score).__name__,
            **self._layer_flags.value,
        )

    def _track_late(self, heads_shape):
        """Then the score's and the mods' weights, and the sinks."""
        super()._track_late(heads_shape)
        if self.use_sinks:
            self._sinks = Sinks(self.num_heads, dtype=self.dtype_policy)
            self._sinks.build()
        if self.query_key_norm is not None:
            self._query_key_norm = _query_key_norm.QueryKeyNorm(
                heads_shape[-1],
                self.query_key_norm_epsilon,
                dtype=self.dtype_policy,
            )
            self._query_key_norm.build()

    @property
    def sinks(self):
        """The sink logit of each query head, `(num_heads,)` (with
        `use_sinks=True`, once built), else `None`."""
        holder = getattr(self, "_sinks", None)
        return None if holder is None else holder.sinks

    @property
    def query_norm(self):
        """The queries' RMSNorm scale `(head_dim,)` (with
        `query_key_norm="rms"`, once built), else `None`."""
        holder = getattr(self, "_query_key_norm", None)
        return None if holder is None else holder.query_norm

    @property
    def key_norm(self):
        """The keys' RMSNorm scale `(head_dim,)` (with
        `query_key_norm="rms"`, once built), else `None`."""
        holder = getattr(self, "_query_key_norm", None)
        return None if holder is None else holder.key_norm
