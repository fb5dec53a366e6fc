"""Attention score functions as Keras layers.

A score maps `query (..., Tq, Dq)` and `key (..., Tk, Dk)` to logits
`(..., Tq, Tk)`. Extra leading axes (such as attention heads) are carried
through, so one score serves single-head and multi-head attention alike.
Logits are computed in `float32` when the inputs are half precision.

`get(identifier)` turns a name, a config dict or an instance into a score
layer, like `keras.activations.get`.
"""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention.ops import checks as ops_checks

_PACKAGE = "keras_attention"


def _shape_str(query_shape, key_shape):
    return f"query.shape={tuple(query_shape)}, key.shape={tuple(key_shape)}"


class Score(keras.layers.Layer):
    """Base class of the score layers.

    Subclasses implement `_logits(query, key)` on inputs already cast to the
    logits dtype, or, for a score that is a dot product of transformed
    inputs, `_dot_product_form(query, key)`: then the score's math lives in
    that one method, and the attention kernels that never form all logits
    at once (`keras_attention.ops.dot_product_attention` and
    `chunked_attention`) can run it. Variables are never autocast, so under
    mixed precision the logits are computed from `float32` weights and
    inputs.
    """

    def __init__(self, **kwargs):
        super().__init__(autocast=False, **kwargs)

    def _check_ranks(self, query_shape, key_shape):
        if len(query_shape) < 2 or len(key_shape) < 2:
            raise ValueError(
                f"{type(self).__name__} expects `query` of shape "
                "`(..., Tq, Dq)` and `key` of shape `(..., Tk, Dk)`. "
                f"Received: {_shape_str(query_shape, key_shape)}"
            )
        ops_checks.same_rank_and_batch(
            type(self).__name__, query=query_shape, key=key_shape
        )

    def build(self, query_shape, key_shape):
        self._check_ranks(query_shape, key_shape)

    def call(self, query, key):
        _validation.floating_inputs(type(self).__name__, query=query, key=key)
        self._check_ranks(query.shape, key.shape)
        dtype = ka_ops.logits_dtype(query.dtype)
        return self._logits(ops.cast(query, dtype), ops.cast(key, dtype))

    @property
    def is_dot_product(self):
        """Whether `dot_product_form` gives this score's logits."""
        return type(self)._dot_product_form is not Score._dot_product_form

    def dot_product_form(self, query, key):
        """The score as a dot product: `(query', key', scale)` or `None`.

        For a score whose logits are `scale · query'·key'ᵀ` (dot, scaled
        dot, cosine, bilinear): the transformed inputs, in the logits
        dtype, and the factor `scale` (`None` for no scaling). `None` for a
        score that needs each (query, key) pair (additive, concat) or
        ignores the keys (location).
        """
        dtype = ka_ops.logits_dtype(query.dtype)
        return self._dot_product_form(
            ops.cast(query, dtype), ops.cast(key, dtype)
        )

    def _dot_product_form(self, query, key):
        return None

    @property
    def is_additive(self):
        """Whether `additive_form` gives this score's logits.

        Not for a subclass that overrides `_logits` below the class that
        defines `_additive_form` (its logits are no longer that form).
        """
        form = _defined_in(type(self), "_additive_form")
        return form is not Score and issubclass(
            form, _defined_in(type(self), "_logits")
        )

    @property
    def can_chunk(self):
        """Whether `keras_attention.ops.chunked_attention` can run it."""
        return self.is_dot_product or self.is_additive

    def additive_form(self, query, key):
        """The score as `vᵀ tanh(query' + key')`: `(query', key', v)`.

        For a score whose logits are `Σ_u v_u tanh(query'_iu + key'_ju)`
        (additive, concat): the projected inputs and the vector `v`, in the
        logits dtype, what `chunked_attention(..., additive_v=v)` takes.
        `None` for other scores.
        """
        dtype = ka_ops.logits_dtype(query.dtype)
        return self._additive_form(ops.cast(query, dtype), ops.cast(key, dtype))

    def _additive_form(self, query, key):
        return None

    @property
    def projects_keys(self):
        """Whether `project_keys` does work that `score_projected` reuses.

        `True` for a score with a key-side projection that no query
        changes (`k W_k` of the additive score, the key half of the concat
        score): computed once per set of keys, it serves every query, as
        at each step of an RNN decoder. Not for a subclass that overrides
        `_logits` below the class that defines `_projected_logits`.
        """
        if type(self)._project_keys is Score._project_keys:
            return False
        return issubclass(
            _defined_in(type(self), "_projected_logits"),
            _defined_in(type(self), "_logits"),
        )

    def project_keys(self, key):
        """The key side of the score, `(..., Tk, Dk')` in the logits dtype.

        What does not depend on the query: `key W_k` for the additive
        score, the key half of the concat score's kernel; the key itself
        (in the logits dtype) for the others. `score_projected(query,
        project_keys(key))` equals `score(query, key)`, so keys projected
        once serve every query. The score must be built (called once, or
        built by the layer that owns it).
        """
        if not self.built:
            raise ValueError(
                f"{type(self).__name__}.project_keys needs a built score "
                "(its kernels): call the score or build it first. "
                f"Received: key.shape={tuple(key.shape)}"
            )
        dtype = ka_ops.logits_dtype(key.dtype)
        return self._project_keys(ops.cast(key, dtype))

    def score_projected(self, query, projected_keys):
        """Logits `(..., Tq, Tk)` of `query` against `project_keys(key)`.

        The same numbers as `score(query, key)`, without projecting the
        keys again.
        """
        dtype = ka_ops.logits_dtype(query.dtype)
        return self._projected_logits(
            ops.cast(query, dtype), ops.cast(projected_keys, dtype)
        )

    def _project_keys(self, key):
        return key

    def _projected_logits(self, query, projected_keys):
        return self._logits(query, projected_keys)

    def _logits(self, query, key):
        form = self._dot_product_form(query, key)
        if form is None:
            raise NotImplementedError(
                f"{type(self).__name__} implements neither `_logits` nor "
                "`_dot_product_form`."
            )
        query, key, scale = form
        return ka_ops.dot_product(query, key, scale=scale)

    def compute_mask(self, query, previous_mask):
        # Logits carry no mask: the attention layer combines the masks.
        return None

    def _weight(self, variable, dtype):
        return ops.cast(variable, dtype)

    def compute_output_shape(self, query_shape, key_shape):
        return tuple(query_shape[:-1]) + (key_shape[-2],)

    def compute_output_spec(self, query, key):
        _validation.floating_inputs(type(self).__name__, query=query, key=key)
        shape = self.compute_output_shape(query.shape, key.shape)
        return keras.KerasTensor(shape, dtype=ka_ops.logits_dtype(query.dtype))


def _defined_in(cls, name):
    """The class of `cls`'s method resolution order that defines `name`."""
    return next(c for c in cls.__mro__ if name in vars(c))


def _project(x, kernel):
    """`x @ kernel` over the last axis of `x`, as one 2-D matmul.

    The number `ops.matmul` gives: on TensorFlow a rank-3 `matmul` by a
    matrix is `tf.tensordot`, which runs this same 2-D product between a
    transpose and reshapes, and XLA cannot compile the gradient of that
    transpose inside a loop (an RNN decoder's: "Tensordot/transpose_grad
    ... must be a compile-time constant").
    """
    if len(x.shape) == 2:
        return ops.matmul(x, kernel)
    lead = ops.shape(x)[:-1]
    flat = ops.matmul(ops.reshape(x, (-1, x.shape[-1])), kernel)
    return ops.reshape(flat, (*lead, kernel.shape[-1]))


def _additive_logits(query, key, v):
    """`Σ_u v_u tanh(query_iu + key_ju)`, every pair at once."""
    # (..., Tq, 1, units) + (..., 1, Tk, units)
    hidden = ops.tanh(ops.expand_dims(query, -2) + ops.expand_dims(key, -3))
    return ops.sum(hidden * v, axis=-1)


class _SameDepthScore(Score):
    """A score that needs `Dq == Dk`."""

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        dq, dk = query_shape[-1], key_shape[-1]
        if dq is not None and dk is not None and dq != dk:
            raise ValueError(
                f"{type(self).__name__} needs query and key of the same "
                "depth (last axis); use 'bilinear' or 'additive' for "
                "different depths. Received: "
                f"{_shape_str(query_shape, key_shape)}"
            )


@keras.saving.register_keras_serializable(package=_PACKAGE)
class DotScore(_SameDepthScore):
    """Dot-product score `s(q, k) = q·k` (Luong et al. 2015, "dot").

    Example:

    >>> score = keras_attention.scores.DotScore()
    >>> tuple(score(np.ones((2, 3, 4)), np.ones((2, 5, 4))).shape)
    (2, 3, 5)

    References:
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
    """

    def _dot_product_form(self, query, key):
        return query, key, None


@keras.saving.register_keras_serializable(package=_PACKAGE)
class ScaledDotScore(_SameDepthScore):
    """Scaled dot-product score `s(q, k) = q·k / sqrt(Dk)`.

    Example:

    >>> score = keras_attention.scores.ScaledDotScore()
    >>> tuple(score(np.ones((2, 3, 4)), np.ones((2, 5, 4))).shape)
    (2, 3, 5)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def _dot_product_form(self, query, key):
        depth = key.shape[-1]
        if depth is None:
            scale = 1.0 / ops.sqrt(ops.cast(ops.shape(key)[-1], query.dtype))
        else:
            scale = 1.0 / float(depth) ** 0.5
        return query, key, scale


@keras.saving.register_keras_serializable(package=_PACKAGE)
class CosineScore(_SameDepthScore):
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

    def __init__(self, epsilon=1e-12, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(epsilon, (int, float)) or epsilon <= 0:
            raise ValueError(
                "Received an invalid value for argument `epsilon`, expected "
                f"a positive number. Received: epsilon={epsilon!r}"
            )
        self.epsilon = float(epsilon)

    def _dot_product_form(self, query, key):
        def _unit(x):
            norm = ops.sqrt(ops.sum(ops.square(x), axis=-1, keepdims=True))
            return x / ops.maximum(norm, self.epsilon)

        return _unit(query), _unit(key), None

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


class _ParametricScore(Score):
    def __init__(
        self,
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)

    def _add_kernel(self, name, shape):
        return self.add_weight(
            name=name,
            shape=shape,
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
        )

    def _check_depths(self, query_shape, key_shape):
        if query_shape[-1] is None or key_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} needs the last axis of query and key "
                f"to be known. Received: {_shape_str(query_shape, key_shape)}"
            )

    def get_config(self):
        return {
            **super().get_config(),
            "kernel_initializer": keras.initializers.serialize(
                self.kernel_initializer
            ),
            "kernel_regularizer": keras.regularizers.serialize(
                self.kernel_regularizer
            ),
        }


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BilinearScore(_ParametricScore):
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

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        self._check_depths(query_shape, key_shape)
        self.kernel = self._add_kernel(
            "kernel", (query_shape[-1], key_shape[-1])
        )

    def _dot_product_form(self, query, key):
        projected = _project(query, self._weight(self.kernel, query.dtype))
        return projected, key, None


@keras.saving.register_keras_serializable(package=_PACKAGE)
class AdditiveScore(_ParametricScore):
    """Additive score `s(q, k) = vᵀ tanh(q W_q + k W_k)` (Bahdanau et al.).

    The full form of Bahdanau attention, with both projections (Keras's own
    `AdditiveAttention` has neither). It costs `O(Tq·Tk·units)` memory.

    Args:
        units: Size of the hidden layer. Defaults to `None`, the key depth.
        use_bias: Whether to add a bias inside the `tanh`. Defaults to
            `False`.
        kernel_initializer: Initializer of the kernels and `v`. Defaults to
            `"glorot_uniform"`.
        bias_initializer: Initializer of `bias`. Defaults to `"zeros"`.
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
        super().__init__(**kwargs)
        self.units = _validation.positive_int("units", units, allow_none=True)
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
        q = _project(query, self._weight(self.query_kernel, dtype))
        if self.use_bias:
            q = q + self._weight(self.bias, dtype)
        return q

    def _project_keys(self, key):
        return _project(key, self._weight(self.key_kernel, key.dtype))

    def _additive_form(self, query, key):
        q = self._project_query(query)
        k = self._project_keys(key)
        return q, k, self._weight(self.v, query.dtype)

    def _hidden(self, query, projected_keys):
        """`tanh(q W_q + k W_k (+ bias))` of every pair, `k W_k` given."""
        q = self._project_query(query)
        # (..., Tq, 1, units) + (..., 1, Tk, units)
        return ops.tanh(
            ops.expand_dims(q, -2) + ops.expand_dims(projected_keys, -3)
        )

    def _projected_logits(self, query, projected_keys):
        v = self._weight(self.v, query.dtype)
        return _additive_logits(self._project_query(query), projected_keys, v)

    def _logits(self, query, key):
        return self._projected_logits(query, self._project_keys(key))

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "use_bias": self.use_bias,
            "bias_initializer": keras.initializers.serialize(
                self.bias_initializer
            ),
        }


@keras.saving.register_keras_serializable(package=_PACKAGE)
class ConcatScore(_ParametricScore):
    """Concat score `s(q, k) = vᵀ tanh([q; k] W)` (Luong et al.'s "concat").

    `[q; k] W` is computed as `q W[:Dq] + k W[Dq:]`, the same number without
    materialising every concatenated pair.

    Args:
        units: Size of the hidden layer. Defaults to `None`, the key depth.
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

    def __init__(self, units=None, **kwargs):
        super().__init__(**kwargs)
        self.units = _validation.positive_int("units", units, allow_none=True)

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
        return _project(key, kernel[self._query_depth :])

    def _project_query(self, query):
        kernel = self._weight(self.kernel, query.dtype)
        return _project(query, kernel[: self._query_depth])

    def _additive_form(self, query, key):
        q = self._project_query(query)
        k = self._project_keys(key)
        return q, k, self._weight(self.v, query.dtype)

    def _projected_logits(self, query, projected_keys):
        v = self._weight(self.v, query.dtype)
        return _additive_logits(self._project_query(query), projected_keys, v)

    def _logits(self, query, key):
        return self._projected_logits(query, self._project_keys(key))

    def get_config(self):
        return {**super().get_config(), "units": self.units}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class LocationScore(_ParametricScore):
    """Location-based score `s(q, k_j) = (q W)_j` (Luong et al.).

    The logit of key position `j` depends on the query and on `j` only; the
    keys' contents are ignored. Keys beyond `max_length` cannot be scored.

    Args:
        max_length: Largest number of key positions. Required.
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
                f"Received: {_shape_str(query_shape, key_shape)}"
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


_BY_NAME = {
    "dot": DotScore,
    "scaled_dot": ScaledDotScore,
    "cosine": CosineScore,
    "bilinear": BilinearScore,
    "general": BilinearScore,
    "additive": AdditiveScore,
    "bahdanau": AdditiveScore,
    "concat": ConcatScore,
}


def serialize(score: Score) -> dict:
    """Returns the config dict of a score layer."""
    return keras.saving.serialize_keras_object(score)


def deserialize(config: dict) -> Score:
    """Creates a score layer from a config dict made by `serialize`."""
    return keras.saving.deserialize_keras_object(config)


def get(identifier, dtype=None) -> Score:
    """Returns a score layer for a name, a config dict or an instance.

    Args:
        identifier: One of `"dot"`, `"scaled_dot"`, `"cosine"`,
            `"bilinear"` (alias `"general"`), `"additive"` (alias
            `"bahdanau"`), `"concat"`; a dict made by `serialize`; or a
            `Score` instance, returned as is. `"location"` needs
            `max_length`, so pass `LocationScore(max_length=...)` instead.
        dtype: Dtype policy of a score created from a name (the layer that
            owns the score passes its own). Defaults to `None`, the global
            policy. A config dict keeps the dtype it holds and an instance
            is returned as is.

    Returns:
        A `Score` layer.
    """
    if isinstance(identifier, Score):
        return identifier
    if isinstance(identifier, dict):
        score = deserialize(identifier)
        if not isinstance(score, Score):
            raise ValueError(
                "Expected a config of a keras_attention score. "
                f"Received: score={identifier!r}"
            )
        return score
    if isinstance(identifier, str):
        name = identifier.lower()
        if name == "location":
            raise ValueError(
                "The 'location' score needs `max_length`: pass "
                "`keras_attention.scores.LocationScore(max_length=...)` "
                f"instead of a name. Received: score={identifier!r}"
            )
        if name in _BY_NAME:
            if isinstance(dtype, keras.dtype_policies.DTypePolicyMap):
                # The map is keyed by the owner's sublayer paths; a score
                # made here takes the map's default.
                dtype = dtype.default_policy
            if isinstance(dtype, keras.DTypePolicy):
                # A name keeps the score's recorded arguments serializable.
                dtype = dtype.name
            return _BY_NAME[name](dtype=dtype)
    raise ValueError(
        "Could not interpret score identifier. Expected one of "
        f"{sorted(_BY_NAME) + ['location']}, a config dict or a "
        f"keras_attention.scores.Score instance. Received: score={identifier!r}"
    )
