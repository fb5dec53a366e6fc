"""`MultiHead`: copies of any layer side by side (keras-multi-head)."""

import inspect
import numbers

import keras
from keras import ops

from keras_attention import _policies
from keras_attention import _validation


def _as_list(name, value, check):
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return [check(name, v) for v in values]


def _index(name, value):
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or value < 0
    ):
        raise _validation.invalid(
            name, value, "a non-negative integer or a list of them"
        )
    return int(value)


def _factor(name, value):
    return _validation.non_negative(
        name, value, True, "a finite non-negative number or a list of them"
    )


@keras.saving.register_keras_serializable(package="keras_attention")
class MultiHead(keras.layers.Layer):
    """`num_heads` copies of a layer, outputs stacked on a new last axis.

    keras-multi-head's `MultiHead` wrapper: each copy has its own weights
    and gets the same inputs (and Keras mask, and `training`); the outputs
    `y_1 ... y_n` come back as `stack([y_1, ..., y_n], axis=-1)`. For
    instance `MultiHead(keras.layers.LSTM(32), 5)` maps `(batch_size, T, D)`
    to `(batch_size, 32, 5)`, and
    `MultiHead(keras_attention.Attention(score="additive"), 3)` gives
    three self-attentions `(batch_size, T, D, 3)`.

    With `reg_index`, the copies are pushed apart: for each index `i`, the
    copies' weight `i` (in `layer.weights` order), flattened into the rows
    of `W` `(num_heads, size)`, adds `reg_factor · ‖W Wᵀ − I‖²_F` with
    `add_loss` on every call (so, unlike the old layer, which computed it
    once from the initial values, it has a gradient).

    The copies are built from `layer`'s config (`layer` itself is not
    used, and its weights, if any, are not copied), named
    `{layer.name}_1 ... {layer.name}_n`; `layer.weights` of the wrapper are
    the copies' weights, copy by copy.

    Args:
        layer: The layer to copy (a `keras.layers.Layer`, serialisable).
        num_heads: Number of copies.
        reg_index: Optional index (or list of indices) into a copy's
            `weights` of the weights to regularise. Defaults to `None`.
        reg_factor: Weight (or one weight per index) of the regulariser.
            Defaults to `0.0`.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        inputs: What `layer` takes.
        mask: Optional mask, passed on to copies whose `call` takes one.
            Taken from the inputs' Keras mask when not given.
        training: Passed on to copies whose `call` takes it.

    Returns:
        The copies' outputs stacked on a new last axis: `layer`'s output
        shape plus `(num_heads,)`. The Keras mask is the copies' own (for
        a sequence layer `(batch_size, T)` on the leading axes of
        `(batch_size, T, D, num_heads)`), so masked layers downstream,
        such as `TimeDistributed(Flatten())` then
        `GlobalAveragePooling1D`, skip the padded steps.

    Example:

    >>> layer = keras_attention.MultiHead(keras.layers.Dense(3), num_heads=2)
    >>> tuple(layer(np.random.rand(4, 5).astype("float32")).shape)
    (4, 3, 2)

    References:
        - [keras-multi-head](https://github.com/CyberZHG/keras-multi-head)
    """

    def __init__(
        self, layer, num_heads, reg_index=None, reg_factor=0.0, **kwargs
    ):
        # A policy map (from a quantized model's config) holds the copies'
        # own policies; they are looked up by `<wrapper>/<copy>`.
        policy = keras.dtype_policies.get(kwargs.get("dtype"))
        super().__init__(**kwargs)
        if not isinstance(layer, keras.layers.Layer):
            raise TypeError(
                "MultiHead expects a `keras.layers.Layer` to copy. "
                f"Received: layer={layer!r}"
            )
        self.num_heads = _validation.positive_int("num_heads", num_heads)
        self.reg_index = None
        self.reg_factor = reg_factor
        if reg_index is not None:
            self.reg_index = _as_list("reg_index", reg_index, _index)
            factors = _as_list("reg_factor", reg_factor, _factor)
            if len(factors) == 1:
                factors = factors * len(self.reg_index)
            if len(factors) != len(self.reg_index):
                raise ValueError(
                    "MultiHead needs one `reg_factor` or one per "
                    f"`reg_index`. Received: reg_index={reg_index!r}, "
                    f"reg_factor={reg_factor!r}"
                )
            self.reg_factor = factors
        self._layer_config = keras.saving.serialize_keras_object(layer)
        self.copies = []
        for i in range(self.num_heads):
            config = dict(self._layer_config)
            name = f"{layer.name}_{i + 1}"
            config["config"] = {**config["config"], "name": name}
            if isinstance(policy, keras.dtype_policies.DTypePolicyMap):
                own = policy[f"{self.name}/{name}"]
                config["config"]["dtype"] = keras.dtype_policies.serialize(own)
            self.copies.append(keras.saving.deserialize_keras_object(config))
        self.supports_masking = layer.supports_masking
        parameters = inspect.signature(layer.call).parameters
        self._passes = {n for n in ("mask", "training") if n in parameters}

    def build(self, input_shape):
        for copy in self.copies:
            if not copy.built:
                copy.build(input_shape)
        if self.reg_index is not None:
            count = len(self.copies[0].weights)
            for index in self.reg_index:
                if index >= count:
                    raise ValueError(
                        f"`reg_index` {index} is out of range: each copy "
                        f"has {count} weights. Received: "
                        f"reg_index={self.reg_index!r}"
                    )

    def _call_kwargs(self, mask, training):
        """The `mask` and `training` that the wrapped layer takes."""
        kwargs = {}
        if "mask" in self._passes and mask is not None:
            kwargs["mask"] = mask
        if "training" in self._passes:
            kwargs["training"] = training
        return kwargs

    def call(self, inputs, mask=None, training=None):
        kwargs = self._call_kwargs(mask, training)
        outputs = [copy(inputs, **kwargs) for copy in self.copies]
        if self.reg_index is not None:
            self.add_loss(self._difference_penalty())
        return ops.stack(outputs, axis=-1)

    def _difference_penalty(self):
        """`Σ_i reg_factor_i · ‖W_i W_iᵀ − I‖²_F` over the `reg_index`."""
        total = 0.0
        eye = ops.eye(self.num_heads, dtype="float32")
        for index, factor in zip(self.reg_index, self.reg_factor, strict=True):
            rows = ops.stack(
                [
                    ops.reshape(ops.cast(c.weights[index], "float32"), (-1,))
                    for c in self.copies
                ]
            )
            gram = ops.matmul(rows, ops.transpose(rows))
            total = total + factor * ops.sum(ops.square(gram - eye))
        return total

    def compute_mask(self, inputs, mask=None):
        return self.copies[0].compute_mask(inputs, mask)

    def compute_output_shape(self, input_shape):
        shape = self.copies[0].compute_output_shape(input_shape)
        return tuple(shape) + (self.num_heads,)

    def compute_output_spec(self, inputs, mask=None, training=None):
        # Only for the wrapped layer's own checks (its input dtypes, its
        # mask's shape): they then run when a functional model is built,
        # as they would for the layer alone.
        self.copies[0].compute_output_spec(
            inputs, **self._call_kwargs(mask, training)
        )
        return keras.KerasTensor(
            self.compute_output_shape(inputs.shape), dtype=self.compute_dtype
        )

    def get_config(self):
        return {
            **super().get_config(),
            "layer": self._layer_config,
            "num_heads": self.num_heads,
            "reg_index": self.reg_index,
            "reg_factor": self.reg_factor,
            # The copies' own policies once `model.quantize` changed them.
            "dtype": _policies.policy_config(self, self.copies),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["layer"] = keras.saving.deserialize_keras_object(config["layer"])
        return cls(**config)
