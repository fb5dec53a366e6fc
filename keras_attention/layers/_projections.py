"""The projections of the multi-head engine: `EinsumDense` sublayers in
Keras's order and shapes, a fresh initializer per sublayer, their config
in Keras's keys (private module)."""

import keras

from keras_attention import _policies
from keras_attention.layers import _sharding


def clone_initializer(initializer):
    """A fresh initializer object per sublayer, so that an unseeded
    initializer does not give every projection the same values."""
    return initializer.__class__.from_config(initializer.get_config())


def projection_config(layer):
    """The config of the projections' initializers, regularizers and
    constraints, in Keras's keys (`MultiHeadAttention`, GQA)."""
    return {
        "kernel_initializer": keras.initializers.serialize(
            layer.kernel_initializer
        ),
        "bias_initializer": keras.initializers.serialize(
            layer.bias_initializer
        ),
        "kernel_regularizer": keras.regularizers.serialize(
            layer.kernel_regularizer
        ),
        "bias_regularizer": keras.regularizers.serialize(
            layer.bias_regularizer
        ),
        "activity_regularizer": keras.regularizers.serialize(
            layer.projection_activity_regularizer
        ),
        "kernel_constraint": keras.constraints.serialize(
            layer.kernel_constraint
        ),
        "bias_constraint": keras.constraints.serialize(layer.bias_constraint),
    }


class HeadProjections(keras.layers.Layer):
    """The projection half of the multi-head engine (`MultiHeadBase`).

    `EinsumDense` sublayers `query`, `key`, (`gate`), `value` and
    `attention_output`, made and built in the order and shapes of Keras's
    `MultiHeadAttention` from the engine's attributes (`num_heads`, the
    key/value heads `_kv_heads`, `use_bias`, the initializers,
    regularizers and constraints), and the dtype policy of their config.
    """

    # Keras's public names of the projections.
    query_dense = property(lambda self: self._query_dense)
    key_dense = property(lambda self: self._key_dense)
    value_dense = property(lambda self: self._value_dense)
    output_dense = property(lambda self: self._output_dense)

    def _get_common_kwargs_for_sublayer(self):
        """Keras's hook: the `EinsumDense` arguments every projection shares.

        Fresh initializer objects each call; the regularizers, constraints
        and the dtype policy of the layer.
        """
        return {
            "kernel_initializer": clone_initializer(self.kernel_initializer),
            "bias_initializer": clone_initializer(self.bias_initializer),
            "kernel_regularizer": self.kernel_regularizer,
            "bias_regularizer": self.bias_regularizer,
            "activity_regularizer": self.projection_activity_regularizer,
            "kernel_constraint": self.kernel_constraint,
            "bias_constraint": self.bias_constraint,
            "dtype": self.dtype_policy,
        }

    def _dense(self, name, equation, output_shape, bias_axes, activation=None):
        return keras.layers.EinsumDense(
            equation,
            output_shape=output_shape,
            activation=activation,
            bias_axes=bias_axes if self.use_bias else None,
            name=name,
            **self._get_common_kwargs_for_sublayer(),
        )

    def _projection(
        self, name, input_shape, depth, activation=None, count=None
    ):
        # `(B, d..., dim)` → `(B, d..., heads, depth)`: "abc,cde->abde" for
        # rank 3, the equations of Keras's layer for any rank.
        rank = len(input_shape)
        inputs, heads = "abcdefghij"[:rank], "klmn"[:2]
        dense = self._dense(
            name,
            f"{inputs},{inputs[-1]}{heads}->{inputs[:-1]}{heads}",
            (None,) * (rank - 2) + (count or self.num_heads, depth),
            heads,
            activation=activation,
        )
        dense.build(tuple(input_shape))
        # The layer itself combines the Keras masks of its inputs; a
        # projection only passes a mask through instead of warning that it
        # drops it.
        dense.supports_masking = True
        return dense

    def _build_layers(
        self,
        query_shape,
        key_shape,
        value_shape,
        key_dim,
        value_dim,
        out,
        gate=False,
    ):
        """Creates the variables in the order of Keras's layer."""
        _sharding.check_heads(self, self.num_heads, self._kv_heads)
        # The heads' sizes, which a cache must match.
        self._head_dims = (key_dim, value_dim)
        self._query_dense = self._projection("query", query_shape, key_dim)
        kv_heads = self._kv_heads
        self._key_dense = self._projection(
            "key", key_shape, key_dim, count=kv_heads
        )
        if gate:
            self._gate_dense = self._projection(
                "gate", query_shape, value_dim, activation="sigmoid"
            )
        self._value_dense = self._projection(
            "value", value_shape, value_dim, count=kv_heads
        )
        rank = len(query_shape)
        heads = "abcdefghijk"[: rank + 1]
        letters = "nopqrstuvwxyz"[: len(out)]
        self._output_dense = self._dense(
            "attention_output",
            f"{heads},{heads[-2:]}{letters}->{heads[:-2]}{letters}",
            (None,) * (rank - 2) + tuple(out),
            letters,
        )
        self._output_dense.build(
            tuple(query_shape[:-1]) + (self.num_heads, value_dim)
        )
        self._track_late((query_shape[0], kv_heads, None, key_dim))

    def _track_late(self, heads_shape):
        """Tracks the score and the layer mods only now, so that their
        weights follow the projections (Keras's variables first); builds
        the score for heads of `heads_shape`."""
        self._score_layer = self.score
        mods = self._mods_holder.value
        self._mod_layers = [m for m in mods if isinstance(m, keras.Layer)]
        if not self.score.built:
            self.score.build(heads_shape, heads_shape)

    def _dtype_policy_config(self):
        """The dtype policy, with the projections' own where they differ."""
        if not self.built:
            return keras.dtype_policies.serialize(self.dtype_policy)
        denses = [self._query_dense, self._key_dense, self._value_dense]
        denses += [getattr(self, "_gate_dense", None), self._output_dense]
        return _policies.policy_config(self, denses)
