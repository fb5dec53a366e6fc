"""Keras's override points of the multi-head layers, honoured from the
call's one record (private module).

Keras's `MultiHeadAttention` attends through `_compute_attention_mask`
and `_compute_attention` (which calls `_masked_softmax`), and subclasses
(keras-hub's layers among them) override those hooks or call them from
their own `call`. `KerasHooks` keeps that surface on the engine's one
route: a layer call builds one `AttentionCall` and plans it once; where a
subclass overrides `_compute_attention` or `_compute_attention_mask`, the
call goes through them, and the base `_compute_attention` runs the
planned record with the heads and mask the subclass hands it. Called on
its own, `_compute_attention` makes one record of the layer's own score,
mods, window, sinks, dropout and softmax, planned once.
"""

import dataclasses

from keras import ops

from keras_attention import ops as ka_ops
from keras_attention.layers import _mask_shapes
from keras_attention.layers import _mods
from keras_attention.ops import engine

# The hooks a subclass may override and a layer call then goes through
# (an overridden `_masked_softmax` is the dense kernel's own).
_CALLED = frozenset({"_compute_attention", "_compute_attention_mask"})
_HOOKS = (*sorted(_CALLED), "_masked_softmax")


class KerasHooks:
    """Keras's hooks on the engine's record.

    `overridden_hooks`, a class attribute, names the hooks (`_HOOKS`) a
    subclass redefines (set when the class is created, unless it passes
    `hooks_are_defaults=True`). `hook_mask_heads_axis` says whether the
    mask the hooks pass has Keras's heads axis, `(B, 1, Tq, Tk)`
    (`MultiHeadAttention`), or not, `(B, Tq, Tk)` (Keras's
    `GroupedQueryAttention`, `GroupedHooks`).
    """

    overridden_hooks = frozenset()
    hook_mask_heads_axis = True
    # Read by every call, so set once per class with `overridden_hooks`:
    # whether a call goes through an overridden hook, and the one the
    # planner is told of (`_hook_flag`).
    _hooked = False
    _hook = None

    def __init_subclass__(cls, hooks_are_defaults=False, **kwargs):
        super().__init_subclass__(**kwargs)
        if not hooks_are_defaults:
            defined = {name for name in _HOOKS if name in vars(cls)}
            cls.overridden_hooks = cls.overridden_hooks | defined
        cls._hooked = bool(cls.overridden_hooks & _CALLED)
        cls._hook = _hook_flag(cls.overridden_hooks)

    def _for_hooks(self, record, call, cache):
        """The call's record as Keras's hooks take it: floating-point
        heads, and the masks as one tensor (the subclass's
        `_compute_attention_mask` where it has one) beside the mask mods
        (which the hooks never see)."""
        record = engine.dequantize(record)
        if cache is None and "_compute_attention_mask" in self.overridden_hooks:
            mask = self._compute_attention_mask(
                call.query, call.value, **call.mask_flags()
            )
        else:
            mask = record.masks.dense(
                ops.shape(record.query)[1],
                ops.shape(record.key)[1],
                heads_axis=self.hook_mask_heads_axis,
                query_offset=record.query_offset,
                key_positions=record.key_positions,
            )
        masks = ka_ops.masks.AttentionMasks(
            attention_mask=mask, mask_mods=record.masks.mask_mods
        )
        return dataclasses.replace(record, masks=masks)

    def _through_hooks(self, record, plan, training, asked):
        """`(context, weights)` of a hooked call: the subclass's
        `_compute_attention` with the record's heads and mask; the base
        hook runs `(record, plan)`."""
        self._running.value = (record, plan)
        try:
            return self._call_compute_attention(
                record.query,
                record.key,
                record.value,
                record.masks.attention_mask,
                training,
                asked,
            )
        finally:
            self._running.value = None

    def _call_compute_attention(self, q, k, v, mask, training, weights):
        """Calls Keras's hook `_compute_attention` with its signature."""
        return self._compute_attention(q, k, v, mask, training, weights)

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
        """The combined mask, broadcastable to `(B, heads, Tq, Tv)` (with
        `hook_mask_heads_axis`, else `(B, Tq, Tv)`)."""
        if self.hook_mask_heads_axis:
            _mask_shapes.attention_mask_rank(
                type(self).__name__, attention_mask, query, value
            )
        masks = dict(
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )
        flags = ka_ops.masks.attention_masks(
            **masks, band=self._band(use_causal_mask)
        )
        shape = (ops.shape(query)[1], ops.shape(value)[1])
        return flags.dense(*shape, heads_axis=self.hook_mask_heads_axis)

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
        unless `return_attention_scores`). Inside a layer call it runs the
        call's planned record with these heads and mask; called on its
        own (a subclass's `call`, as keras-hub's layers do) it plans one
        record of the layer's own score, mods, window and sinks.
        """
        if use_causal_mask:
            attention_mask = ka_ops.combine_masks(
                ops.shape(query)[1],
                ops.shape(key)[1],
                attention_mask=attention_mask,
                use_causal_mask=True,
                heads_axis=True,
            )
        running = self._running.value
        if running is None:
            record, plan = self._hook_record(
                query,
                key,
                value,
                attention_mask,
                training,
                bool(return_attention_scores),
            )
        else:
            record, plan = running
            masks = record.masks
            if attention_mask is not masks.attention_mask:
                masks = dataclasses.replace(
                    masks, attention_mask=attention_mask
                )
            record = dataclasses.replace(
                record, query=query, key=key, value=value, masks=masks
            )
        if return_attention_scores and not record.weights:
            raise _weights_not_planned(type(self).__name__, plan)
        result = engine.run(record, plan)
        return (
            result.output,
            result.weights if return_attention_scores else None,
        )

    def _hook_record(self, query, key, value, mask, training, weights):
        """The record and plan of `_compute_attention` called on its own:
        the layer's score, mods, window (where it is one band, causal or
        not), sinks, dropout and softmax, with the mask it is given."""
        own_score, own_mask = self._mods_holder.value
        uncausal, causal = self._bands
        band = uncausal if uncausal == causal else None
        masks = ka_ops.masks.attention_masks(
            attention_mask=mask, band=band, mask_mods=(own_mask,)
        )
        dropout = None
        if self._dropout_active(training):

            def dropout(weights):
                return self._dropout_layer(weights, training=training)

        softmax = None
        if "_masked_softmax" in self.overridden_hooks:
            softmax = self._masked_softmax
        record = engine.AttentionCall(
            query,
            key,
            value,
            self.score,
            masks=masks,
            score_mod=_mods.chained(own_score),
            dropout=dropout,
            weights=weights,
            sinks=self.sinks if self.use_sinks else None,
            activation=self.attention_activation,
            softmax=softmax,
        )
        flags = self._layer_flags.value
        plan = engine.plan_call(
            record, 0, backward=training is not False, **flags
        )
        return record, plan


def _hook_flag(overridden):
    """The overridden hook the planner is told of, or `None`: the
    softmax first (it needs the logits), then the called ones."""
    if "_masked_softmax" in overridden:
        return "_masked_softmax"
    called = sorted(overridden & _CALLED)
    return called[0] if called else None


def _weights_not_planned(name, plan):
    """The error of a hook that asks for the weights its call did not."""
    if plan.path == "flash":
        return ValueError(
            "Returning attention scores is not supported when flash "
            "attention is enabled. Please disable flash attention to "
            "access attention scores."
        )
    return ValueError(
        f"{name}: an overridden `_compute_attention` asked for the attention "
        "scores, which its call did not ask for, so the call's one plan "
        f"({plan.path!r}) does not form them: call the layer with "
        "return_attention_scores=True. Received: "
        "return_attention_scores=True in the hook"
    )


class GroupedHooks(KerasHooks, hooks_are_defaults=True):
    """The hooks with the signatures of Keras's `GroupedQueryAttention`:
    its mask has no heads axis, `(B, Tq, Tv)`, and `_compute_attention`
    reads whether to return the scores from the layer
    (`_return_attention_scores`), as Keras's does."""

    hook_mask_heads_axis = False

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
