"""The base of the score layers: `Score`, its forms, the shared helpers.

A score maps `query (..., Tq, Dq)` and `key (..., Tk, Dk)` to logits
`(..., Tq, Tk)`. Extra leading axes (such as attention heads) are carried
through, so one score serves single-head and multi-head attention alike.
Logits are computed in `float32` when the inputs are half precision.

What else a score can do is declared by explicit class attributes, read
by the attention layers and kernels: `has_dot_product_form` (the fused
and chunked kernels can run it), `has_additive_form` (the chunked kernel
can run it), `has_key_projection` (keys projected once serve every
query, as in an RNN decoder) and `keeps_keys` (its dot-product form
leaves the keys as they are, so a quantized cache's keys are dequantized
block by block).
"""

import keras
from keras import ops

from keras_attention import ops as ka_ops
from keras_attention.ops import checks as ops_checks

_PACKAGE = "keras_attention"


def shape_str(query_shape, key_shape):
    return f"query.shape={tuple(query_shape)}, key.shape={tuple(key_shape)}"


class Score(keras.layers.Layer):
    """Base class of the score layers.

    Subclasses implement `_logits(query, key)` on inputs already cast to the
    logits dtype, or, for a score that is a dot product of transformed
    inputs, `dot_product_form(query, key)` and `has_dot_product_form =
    True`: then the score's math lives in that one method, and the
    attention kernels that never form all logits at once
    (`keras_attention.ops.dot_product_attention` and `chunked_attention`)
    can run it. Variables are never autocast, so under mixed precision the
    logits are computed from `float32` weights and inputs.

    The forms a score has are class attributes, set by the class that
    writes them: `has_dot_product_form`, `has_additive_form` (with
    `additive_form`) and `has_key_projection` (with `_project_keys` and
    `_projected_logits`); `form`, what the planner reads, follows them
    when the class is made. A subclass that writes its own `_logits` loses
    the additive form and the key projection it inherits (its logits are
    no longer theirs) unless its body sets them again.

    Example:

    >>> class NegativeDistance(keras_attention.scores.Score):
    ...     def _logits(self, query, key):
    ...         diff = query[..., :, None, :] - key[..., None, :, :]
    ...         return -keras.ops.sum(diff * diff, axis=-1)
    >>> score = NegativeDistance()
    >>> tuple(score(np.ones((2, 3, 4)), np.ones((2, 5, 4))).shape)
    (2, 3, 5)
    """

    has_dot_product_form = False
    has_additive_form = False
    has_key_projection = False
    keeps_keys = False
    #: The kernels' name of the score's form: `"dot"` (`dot_product_form`),
    #: `"additive"` (`additive_form`) or `None` (every logit at once
    #: only), what `keras_attention.ops.plan_attention` takes; set with
    #: the class.
    form = None
    #: Bytes the dense path holds per `(query, key)` pair: one float32
    #: logit; an additive score overrides it (its hidden units).
    dense_bytes_per_logit = 4
    #: Its forms are of inputs cast to the logits dtype (the kernels cast
    #: them, as `call` casts its inputs).
    casts_to_logits_dtype = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        for old in ("_dot_product_form", "_additive_form"):
            if old in own:
                # The hooks' names before 0.1.0: refused, never ignored.
                raise TypeError(
                    f"{cls.__name__} defines `{old}`: a score writes its "
                    f"form as `{old[1:]}(query, key)`, of inputs already "
                    "in the logits dtype. Received: a method named "
                    f"`{old}`"
                )
        if "_logits" in own:
            for name in ("has_additive_form", "has_key_projection"):
                if name not in own:
                    setattr(cls, name, False)
        if "dot_product_form" in own and "keeps_keys" not in own:
            cls.keeps_keys = False
        if "form" not in own:
            cls.form = (
                "dot"
                if cls.has_dot_product_form
                else "additive"
                if cls.has_additive_form
                else None
            )

    def __init__(self, **kwargs):
        super().__init__(autocast=False, **kwargs)

    def _check_ranks(self, query_shape, key_shape):
        if len(query_shape) < 2 or len(key_shape) < 2:
            raise ValueError(
                f"{type(self).__name__} expects `query` of shape "
                "`(..., Tq, Dq)` and `key` of shape `(..., Tk, Dk)`. "
                f"Received: {shape_str(query_shape, key_shape)}"
            )
        ops_checks.same_rank_and_batch(
            type(self).__name__, query=query_shape, key=key_shape
        )

    def build(self, query_shape, key_shape):
        self._check_ranks(query_shape, key_shape)

    def call(self, query, key):
        ops_checks.floating(type(self).__name__, query=query, key=key)
        self._check_ranks(query.shape, key.shape)
        dtype = ka_ops.logits_dtype(query.dtype)
        return self._logits(ops.cast(query, dtype), ops.cast(key, dtype))

    @property
    def is_dot_product(self):
        """Whether `dot_product_form` gives this score's logits."""
        return self.has_dot_product_form

    def dot_product_form(self, query, key):
        """The score as a dot product: `(query', key', scale)` or `None`.

        For a score whose logits are `scale · query'·key'ᵀ` (dot, scaled
        dot, cosine, bilinear): the transformed inputs and the factor
        `scale` (`None` for no scaling), of inputs already in the logits
        dtype (`keras_attention.ops.logits_dtype`; the kernels cast them).
        `None` for a score that needs each (query, key) pair (additive,
        concat) or ignores the keys (location).
        """
        return None

    @property
    def is_additive(self):
        """Whether `additive_form` gives this score's logits."""
        return self.has_additive_form

    @property
    def can_chunk(self):
        """Whether `keras_attention.ops.chunked_attention` can run it."""
        return self.is_dot_product or self.is_additive

    def additive_form(self, query, key):
        """The score as `vᵀ tanh(query' + key')`: `(query', key', v)`.

        For a score whose logits are `Σ_u v_u tanh(query'_iu + key'_ju)`
        (additive, concat): the projected inputs and the vector `v`, of
        inputs already in the logits dtype, what `chunked_attention(...,
        additive_v=v)` takes. `None` for other scores.
        """
        return None

    @property
    def projects_keys(self):
        """Whether `project_keys` does work that `score_projected` reuses.

        `True` for a score with a key-side projection that no query
        changes (`k W_k` of the additive score, the key half of the concat
        score): computed once per set of keys, it serves every query, as
        at each step of an RNN decoder.
        """
        return self.has_key_projection

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
        form = self.dot_product_form(query, key)
        if form is None:
            raise NotImplementedError(
                f"{type(self).__name__} implements neither `_logits` nor "
                "`dot_product_form`."
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
        ops_checks.floating(type(self).__name__, query=query, key=key)
        shape = self.compute_output_shape(query.shape, key.shape)
        return keras.KerasTensor(shape, dtype=ka_ops.logits_dtype(query.dtype))


def project(x, kernel):
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


class ParametricScore(Score):
    """A score with kernels: their initializer and regularizer."""

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
                f"to be known. Received: {shape_str(query_shape, key_shape)}"
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
