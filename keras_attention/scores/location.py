"""Luong's location score: one logit per key position, keys ignored."""

import keras
from keras import ops

from keras_attention.scores.base import ParametricScore
from keras_attention.scores.base import shape_str

_PACKAGE = "keras_attention"


@keras.saving.register_keras_serializable(package=_PACKAGE)
class LocationScore(ParametricScore):
    """Location-based score `s(q, k_j) = (q W)_j` (Luong et al.).

    The logit of key position `j` depends on the query and on `j` only; the
    keys' contents are ignored. Keys beyond `max_length` cannot be scored.

    Args:
        max_length: Largest number of key positions. Required.

    Keyword arguments:
        kernel_initializer: Initializer of `kernel`. Defaults to
            `"glorot_uniform"`.
        kernel_regularizer: Optional regularizer of `kernel`.

    Weights:
        `kernel (Dq, max_length)`.

    Example:

    >>> score = keras_attention.scores.LocationScore(max_length=10)
    >>> tuple(score(np.ones((2, 3, 4)), np.ones((2, 5, 6))).shape)
    (2, 3, 5)

    References:
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
    """

    def __init__(self, max_length, **kwargs):
        super().__init__(**kwargs)
        if (
            isinstance(max_length, bool)
            or not isinstance(max_length, int)
            or max_length <= 0
        ):
            raise ValueError(
                "Received an invalid value for argument `max_length`, "
                "expected a positive integer. "
                f"Received: max_length={max_length!r}"
            )
        self.max_length = max_length

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        if query_shape[-1] is None:
            raise ValueError(
                "LocationScore needs the last axis of query to be known. "
                f"Received: {shape_str(query_shape, key_shape)}"
            )
        self._check_length(key_shape)
        self.kernel = self._add_kernel(
            "kernel", (query_shape[-1], self.max_length)
        )

    def _check_length(self, key_shape):
        if key_shape[-2] is not None and key_shape[-2] > self.max_length:
            raise ValueError(
                f"LocationScore(max_length={self.max_length}) cannot score "
                f"{key_shape[-2]} key positions. Received: "
                f"key.shape={tuple(key_shape)}"
            )

    def call(self, query, key):
        self._check_length(key.shape)
        return super().call(query, key)

    def _logits(self, query, key):
        logits = ops.matmul(query, self._weight(self.kernel, query.dtype))
        return logits[..., : ops.shape(key)[-2]]

    def get_config(self):
        return {**super().get_config(), "max_length": self.max_length}
