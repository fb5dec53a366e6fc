"""The scores of `keras.layers.Attention` and `AdditiveAttention`.

Keras computes these inside its layers, with the weights on the layer;
here they are scores (`keras_attention.scores.Score`), so the attend step,
the masks and the chunked path are those of every other score. The
weights keep Keras's names, order, shapes and initializers, so
`ours.set_weights(keras_layer.get_weights())` gives Keras's logits;
`score_from` reads Keras's `use_scale` / `score_mode` as one of them.
"""

import keras
from keras import ops

from keras_attention import scores as scores_lib

_PACKAGE = "keras_attention"


class _KerasScore(scores_lib.Score):
    def __init__(self, use_scale=False, **kwargs):
        super().__init__(**kwargs)
        self.use_scale = bool(use_scale)

    def _same_depth(self, query_shape, key_shape):
        self._check_ranks(query_shape, key_shape)
        dq, dk = query_shape[-1], key_shape[-1]
        if dq is not None and dk is not None and dq != dk:
            raise ValueError(
                f"{type(self).__name__} needs query and key of the same "
                f"depth. Received: query.shape={tuple(query_shape)}, "
                f"key.shape={tuple(key_shape)}"
            )

    def get_config(self):
        return {**super().get_config(), "use_scale": self.use_scale}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class KerasDotScore(_KerasScore):
    """`keras.layers.Attention(score_mode="dot")`: `s(q, k) = g · q·k`.

    `g` is the scalar weight `scale` (initialized to 1) with
    `use_scale=True`, else 1.
    """

    def build(self, query_shape, key_shape):
        self._same_depth(query_shape, key_shape)
        self.scale = None
        if self.use_scale:
            self.scale = self.add_weight(
                name="scale", shape=(), initializer="ones"
            )

    def dot_product_form(self, query, key):
        scale = None
        if self.scale is not None:
            scale = self._weight(self.scale, query.dtype)
        return query, key, scale


@keras.saving.register_keras_serializable(package=_PACKAGE)
class KerasConcatScore(_KerasScore):
    """`keras.layers.Attention(score_mode="concat")`.

    `s(q, k) = c · Σ_d tanh(g (q_d + k_d))` with the scalar weights
    `scale` `g` (with `use_scale=True`) and `concat_score_weight` `c`,
    both initialized to 1.
    """

    def build(self, query_shape, key_shape):
        self._same_depth(query_shape, key_shape)
        self.scale = None
        if self.use_scale:
            self.scale = self.add_weight(
                name="scale", shape=(), initializer="ones"
            )
        self.concat_score_weight = self.add_weight(
            name="concat_score_weight", shape=(), initializer="ones"
        )

    def additive_form(self, query, key):
        if self.scale is not None:
            scale = self._weight(self.scale, query.dtype)
            query, key = query * scale, key * scale
        weight = self._weight(self.concat_score_weight, query.dtype)
        return query, key, weight * ops.ones((query.shape[-1],), query.dtype)

    def _logits(self, query, key):
        query, key, v = self.additive_form(query, key)
        hidden = ops.tanh(ops.expand_dims(query, -2) + ops.expand_dims(key, -3))
        return ops.sum(hidden * v, axis=-1)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class KerasAdditiveScore(_KerasScore):
    """`keras.layers.AdditiveAttention`'s `s(q, k) = Σ_d g_d tanh(q_d + k_d)`.

    `g` is the weight `scale` `(dim,)` (Glorot-uniform) with
    `use_scale=True`, else ones.
    """

    def __init__(self, use_scale=True, **kwargs):
        super().__init__(use_scale=use_scale, **kwargs)

    def build(self, query_shape, key_shape):
        self._same_depth(query_shape, key_shape)
        self.scale = None
        if self.use_scale:
            self.scale = self.add_weight(
                name="scale",
                shape=(query_shape[-1],),
                initializer="glorot_uniform",
            )

    def additive_form(self, query, key):
        if self.scale is None:
            return query, key, ops.ones((query.shape[-1],), query.dtype)
        return query, key, self._weight(self.scale, query.dtype)

    def _logits(self, query, key):
        query, key, v = self.additive_form(query, key)
        hidden = ops.tanh(ops.expand_dims(query, -2) + ops.expand_dims(key, -3))
        return ops.sum(hidden * v, axis=-1)


_SCORE_MODES = {"dot": KerasDotScore, "concat": KerasConcatScore}


def score_from(score, use_scale, score_mode):
    """Our `score`, or Keras's `use_scale` / `score_mode` as a score."""
    if score_mode is None and not use_scale:
        return "scaled_dot" if score is None else score
    if score is not None:
        raise ValueError(
            "Pass either `score` or keras.layers.Attention's `use_scale` / "
            f"`score_mode`, not both. Received: score={score!r}, "
            f"use_scale={use_scale!r}, score_mode={score_mode!r}"
        )
    score_mode = "dot" if score_mode is None else score_mode
    if score_mode not in _SCORE_MODES:
        raise ValueError(
            "Invalid value for argument score_mode. Expected one of "
            "{'dot', 'concat'}. Received: score_mode=" + repr(score_mode)
        )
    return _SCORE_MODES[score_mode](use_scale=use_scale)
