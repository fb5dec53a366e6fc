"""The additive family: `vᵀ tanh(q' + k')` with learnt projections.

`BaseAdditiveScore` holds what the additive scores share: the key-side
projection computed once (`project_keys`), the hidden layer
`tanh(q' + k')` of every (query, key) pair and its weighting by the output
vector. A subclass says how it projects the query and the keys and, if it
is not `v`, what the output vector is: `AdditiveScore` (Bahdanau),
`ConcatScore` (Luong's concat) and `NormalizedAdditiveScore` (Bahdanau
with weight normalisation, tfa's `normalize=True`).
"""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention.scores.base import ParametricScore
from keras_attention.scores.base import project

_PACKAGE = "keras_attention"


class BaseAdditiveScore(ParametricScore):
    """Base class of the additive scores, `Σ_u w_u tanh(q'_iu + k'_ju)`.

    Subclasses create `v` (and their kernels) in `build` and implement
    `_project_query(query)` and `_project_keys(key)`; `w` is `v` unless
    `_output_vector` says otherwise. It costs `O(Tq·Tk·units)` memory.

    Args:
        units: Size of the hidden layer. Defaults to `None`, the key depth.
        **kwargs: As for the parametric scores (`kernel_initializer`,
            `kernel_regularizer`) and base layer keyword arguments.

    Example:

    >>> score = keras_attention.scores.ConcatScore(units=8)
    >>> isinstance(score, keras_attention.scores.BaseAdditiveScore)
    True
    >>> tuple(score(np.ones((2, 3, 4)), np.ones((2, 5, 6))).shape)
    (2, 3, 5)
    """

    has_additive_form = True
    has_key_projection = True

    def __init__(self, units=None, **kwargs):
        super().__init__(**kwargs)
        self.units = _validation.positive_int("units", units, allow_none=True)

    @property
    def dense_bytes_per_logit(self):
        """The dense path holds `units` float32 values per pair (the
        hidden `tanh`); the key depth when `units` is `None` (known once
        built)."""
        units = self.units
        if units is None and getattr(self, "v", None) is not None:
            units = int(self.v.shape[0])
        return 4 * (units or 1)

    def _output_vector(self, dtype):
        """The vector that weighs the hidden units, `(units,)`."""
        return self._weight(self.v, dtype)

    def _hidden(self, query, projected_keys):
        """`tanh(q' + k')` of every pair, `(..., Tq, Tk, units)`."""
        q = self._project_query(query)
        # (..., Tq, 1, units) + (..., 1, Tk, units)
        return ops.tanh(
            ops.expand_dims(q, -2) + ops.expand_dims(projected_keys, -3)
        )

    def additive_form(self, query, key):
        q = self._project_query(query)
        k = self._project_keys(key)
        return q, k, self._output_vector(query.dtype)

    def _projected_logits(self, query, projected_keys):
        hidden = self._hidden(query, projected_keys)
        return ops.sum(hidden * self._output_vector(query.dtype), axis=-1)

    def _logits(self, query, key):
        return self._projected_logits(query, self._project_keys(key))

    def get_config(self):
        return {**super().get_config(), "units": self.units}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class AdditiveScore(BaseAdditiveScore):
    """Additive score `s(q, k) = vᵀ tanh(q W_q + k W_k)` (Bahdanau et al.).

    The full form of Bahdanau attention, with both projections (Keras's own
    `AdditiveAttention` has neither). It costs `O(Tq·Tk·units)` memory.

    Args:
        units: Size of the hidden layer. Defaults to `None`, the key depth.
        use_bias: Whether to add a bias inside the `tanh`. Defaults to
            `False`.
        bias_initializer: Initializer of `bias`. Defaults to `"zeros"`.

    Keyword arguments:
        kernel_initializer: Initializer of the kernels and `v`. Defaults to
            `"glorot_uniform"`.
        kernel_regularizer: Optional regularizer of the kernels and `v`.

    Weights:
        `query_kernel (Dq, units)`, `key_kernel (Dk, units)`, `v (units,)`
        and, with `use_bias=True`, `bias (units,)`.

    Example:

    >>> score = keras_attention.scores.AdditiveScore(units=8)
    >>> tuple(score(np.ones((2, 3, 4)), np.ones((2, 5, 6))).shape)
    (2, 3, 5)

    References:
        - [Bahdanau et al., 2014](https://arxiv.org/abs/1409.0473)
    """

    def __init__(
        self,
        units=None,
        use_bias=False,
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(units=units, **kwargs)
        self.use_bias = bool(use_bias)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        self._check_depths(query_shape, key_shape)
        units = self.units or key_shape[-1]
        self.query_kernel = self._add_kernel(
            "query_kernel", (query_shape[-1], units)
        )
        self.key_kernel = self._add_kernel("key_kernel", (key_shape[-1], units))
        self.v = self._add_kernel("v", (units,))
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias", shape=(units,), initializer=self.bias_initializer
            )

    def _project_query(self, query):
        dtype = query.dtype
        q = project(query, self._weight(self.query_kernel, dtype))
        if self.use_bias:
            q = q + self._weight(self.bias, dtype)
        return q

    def _project_keys(self, key):
        return project(key, self._weight(self.key_kernel, key.dtype))

    def get_config(self):
        return {
            **super().get_config(),
            "use_bias": self.use_bias,
            "bias_initializer": keras.initializers.serialize(
                self.bias_initializer
            ),
        }


@keras.saving.register_keras_serializable(package=_PACKAGE)
class ConcatScore(BaseAdditiveScore):
    """Concat score `s(q, k) = vᵀ tanh([q; k] W)` (Luong et al.'s "concat").

    `[q; k] W` is computed as `q W[:Dq] + k W[Dq:]`, the same number without
    materialising every concatenated pair.

    Args:
        units: Size of the hidden layer. Defaults to `None`, the key depth.

    Keyword arguments:
        kernel_initializer: Initializer of `kernel` and `v`. Defaults to
            `"glorot_uniform"`.
        kernel_regularizer: Optional regularizer of `kernel` and `v`.

    Weights:
        `kernel (Dq + Dk, units)` and `v (units,)`.

    Example:

    >>> score = keras_attention.scores.ConcatScore(units=8)
    >>> tuple(score(np.ones((2, 3, 4)), np.ones((2, 5, 6))).shape)
    (2, 3, 5)

    References:
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
    """

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        self._check_depths(query_shape, key_shape)
        units = self.units or key_shape[-1]
        self._query_depth = query_shape[-1]
        self.kernel = self._add_kernel(
            "kernel", (query_shape[-1] + key_shape[-1], units)
        )
        self.v = self._add_kernel("v", (units,))

    def _project_keys(self, key):
        kernel = self._weight(self.kernel, key.dtype)
        return project(key, kernel[self._query_depth :])

    def _project_query(self, query):
        kernel = self._weight(self.kernel, query.dtype)
        return project(query, kernel[: self._query_depth])


@keras.saving.register_keras_serializable(package=_PACKAGE)
class NormalizedAdditiveScore(AdditiveScore):
    """Weight-normalised additive score (tfa's `normalize=True`).

    `s(q, k) = (g v / ‖v‖)ᵀ tanh(q W_q + k W_k + b)`.

    Salimans & Kingma's weight normalisation of `v`: the direction of `v`
    and its length `g` are learnt separately, `g` starting at
    `sqrt(1 / units)`, and a bias `b` sits inside the `tanh`.

    Args:
        units: Size of the hidden layer. Defaults to `None`, the key depth.
        **kwargs: As for `keras_attention.scores.AdditiveScore`;
            `use_bias` is always `True`.

    Returns:
        Logits `(..., Tq, Tk)`, in `float32` for half-precision inputs.

    Weights:
        Those of `AdditiveScore(use_bias=True)` and the scalar `g`.

    Example:

    >>> score = keras_attention.scores.NormalizedAdditiveScore(units=8)
    >>> tuple(score(np.ones((2, 3, 4)), np.ones((2, 5, 6))).shape)
    (2, 3, 5)

    References:
        - [Salimans & Kingma, 2016](https://arxiv.org/abs/1602.07868)
        - [Bahdanau et al., 2014](https://arxiv.org/abs/1409.0473)
    """

    def __init__(self, units=None, **kwargs):
        kwargs.pop("use_bias", None)
        super().__init__(units=units, use_bias=True, **kwargs)

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        units = self.units or key_shape[-1]
        self.g = self.add_weight(
            name="g",
            shape=(),
            initializer=keras.initializers.Constant((1.0 / units) ** 0.5),
        )

    # Not on the chunked path (as before the additive family shared a
    # base): its gradient there, through `g / ‖v‖`, has no test yet.
    has_additive_form = False

    def _output_vector(self, dtype):
        v = self._weight(self.v, dtype)
        g = self._weight(self.g, dtype)
        return g * v / ops.sqrt(ops.sum(ops.square(v)))

    def get_config(self):
        config = super().get_config()
        config.pop("use_bias")
        return config
