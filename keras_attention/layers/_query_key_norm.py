"""The per-head query/key RMSNorm of the multi-head engine
(`query_key_norm="rms"`), before the rotation, as Qwen3's and Gemma 3's
attention, and Gemma's query scale `query_pre_attn_scalar` (private
module).

Each projected head `x (..., head_dim)` becomes
`x * rsqrt(mean(x**2) + epsilon) * scale`, computed in float32 and cast
back, with one multiplying `scale` of shape `(head_dim,)` for the
queries (`query_norm`) and one for the keys (`key_norm`), initialized to
ones: keras-hub's `Qwen3LayerNorm`, and `keras.layers.RMSNormalization`.
Gemma's `1 + scale` form is a mapping of the weights (`hub.py`).
"""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention import scores as scores_lib

# The forms `query_key_norm` takes (`None`: no normalization).
FORMS = (None, "rms")


def checked(query_key_norm, epsilon):
    """`(query_key_norm, query_key_norm_epsilon)` checked."""
    if query_key_norm not in FORMS:
        raise _validation.invalid(
            "query_key_norm", query_key_norm, 'None or "rms"'
        )
    epsilon = _validation.positive_number("query_key_norm_epsilon", epsilon)
    return query_key_norm, epsilon


def pre_attn_scalar(value, score):
    """`query_pre_attn_scalar` checked: `None`, or a positive number that
    replaces `head_dim` in the scaled dot score's `1 / sqrt(head_dim)`."""
    if value is None:
        return None
    value = _validation.positive_number("query_pre_attn_scalar", value)
    if not isinstance(score, scores_lib.ScaledDotScore):
        raise ValueError(
            "`query_pre_attn_scalar` replaces the head size in the scaled "
            'dot score\'s scale; it needs score="scaled_dot". Received: '
            f"query_pre_attn_scalar={value}, score={type(score).__name__}"
        )
    return value


def rms_norm(x, scale, epsilon):
    """`x * rsqrt(mean(x**2, -1) + epsilon) * scale` in float32, cast back
    to `x`'s dtype."""
    dtype = x.dtype
    x = ops.cast(x, "float32")
    variance = ops.mean(ops.square(x), axis=-1, keepdims=True)
    x = x * ops.rsqrt(variance + epsilon)
    return ops.cast(x * ops.cast(scale, "float32"), dtype)


class QueryKeyNorm(keras.layers.Layer):
    """Holds the weights `query_norm` and `key_norm`, `(head_dim,)` each,
    so that they follow the projections' (Keras's variables first)."""

    def __init__(self, head_dim, epsilon, **kwargs):
        super().__init__(name="query_key_norm", **kwargs)
        self.head_dim = head_dim
        self.epsilon = epsilon

    def build(self, input_shape=None):
        for name in ("query_norm", "key_norm"):
            weight = self.add_weight(
                name=name, shape=(self.head_dim,), initializer="ones"
            )
            setattr(self, name, weight)
        self.built = True

    def query(self, heads):
        """The query heads `(..., head_dim)`, normalized."""
        return rms_norm(heads, self.query_norm, self.epsilon)

    def key(self, heads):
        """The key heads `(..., head_dim)`, normalized."""
        return rms_norm(heads, self.key_norm, self.epsilon)
