"""The dot-product family: dot, scaled dot, cosine and bilinear scores.

Each is a dot product of transformed inputs, written once in
`dot_product_form`; its logits, the fused kernel and the chunked path
all use it (`has_dot_product_form = True`).
"""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention.scores.base import ParametricScore
from keras_attention.scores.base import Score
from keras_attention.scores.base import project
from keras_attention.scores.base import shape_str

_PACKAGE = "keras_attention"


class SameDepthScore(Score):
    """A score that needs `Dq == Dk`."""

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        dq, dk = query_shape[-1], key_shape[-1]
        if dq is not None and dk is not None and dq != dk:
            raise ValueError(
                f"{type(self).__name__} needs query and key of the same "
                "depth (last axis); use 'bilinear' or 'additive' for "
                "different depths. Received: "
                f"{shape_str(query_shape, key_shape)}"
            )


@keras.saving.register_keras_serializable(package=_PACKAGE)
class DotScore(SameDepthScore):
    """Dot-product score `s(q, k) = q·k` (Luong et al. 2015, "dot").

    Example:

    >>> score = keras_attention.scores.DotScore()
    >>> tuple(score(np.ones((2, 3, 4)), np.ones((2, 5, 4))).shape)
    (2, 3, 5)

    References:
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
    """

    has_dot_product_form = True
    keeps_keys = True

    def dot_product_form(self, query, key):
        return query, key, None


@keras.saving.register_keras_serializable(package=_PACKAGE)
class ScaledDotScore(SameDepthScore):
    """Scaled dot-product score `s(q, k) = q·k / sqrt(Dk)`.

    Example:

    >>> score = keras_attention.scores.ScaledDotScore()
    >>> tuple(score(np.ones((2, 3, 4)), np.ones((2, 5, 4))).shape)
    (2, 3, 5)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    has_dot_product_form = True
    keeps_keys = True

    def dot_product_form(self, query, key):
        depth = key.shape[-1]
        if depth is None:
            scale = 1.0 / ops.sqrt(ops.cast(ops.shape(key)[-1], query.dtype))
        else:
            scale = 1.0 / float(depth) ** 0.5
        return query, key, scale


@keras.saving.register_keras_serializable(package=_PACKAGE)
class CosineScore(SameDepthScore):
    """Cosine score `s(q, k) = q·k / (‖q‖‖k‖)`, in `[-1, 1]`.

    A zero vector scores `0` against everything (its norm is clipped at
    `epsilon`).

    Args:
        epsilon: Smallest norm used in the division. Defaults to `1e-12`.

    Example:

    >>> score = keras_attention.scores.CosineScore()
    >>> tuple(score(np.ones((2, 3, 4)), np.ones((2, 5, 4))).shape)
    (2, 3, 5)

    References:
        - [Graves et al., 2014, Neural Turing Machines](
          https://arxiv.org/abs/1410.5401)
    """

    has_dot_product_form = True

    def __init__(self, epsilon=1e-12, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = _validation.positive_number("epsilon", epsilon)

    def dot_product_form(self, query, key):
        def _unit(x):
            norm = ops.sqrt(ops.sum(ops.square(x), axis=-1, keepdims=True))
            return x / ops.maximum(norm, self.epsilon)

        return _unit(query), _unit(key), None

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BilinearScore(ParametricScore):
    """Bilinear score `s(q, k) = q W kᵀ` (Luong et al.'s "general").

    Unlike the dot product it is asymmetric and lets query and key have
    different depths.

    Args:
        kernel_initializer: Initializer of `kernel`. Defaults to
            `"glorot_uniform"`.
        kernel_regularizer: Optional regularizer of `kernel`.

    Weights:
        `kernel` of shape `(Dq, Dk)`.

    Example:

    >>> score = keras_attention.scores.BilinearScore()
    >>> tuple(score(np.ones((2, 3, 4)), np.ones((2, 5, 6))).shape)
    (2, 3, 5)

    References:
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
    """

    has_dot_product_form = True
    keeps_keys = True

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        self._check_depths(query_shape, key_shape)
        self.kernel = self._add_kernel(
            "kernel", (query_shape[-1], key_shape[-1])
        )

    def dot_product_form(self, query, key):
        projected = project(query, self._weight(self.kernel, query.dtype))
        return projected, key, None
