"""What the multi-head engine holds beside Keras's tracking (private
module): a value hidden from it (`Untracked`), and the sinks' weight as
a sublayer of its own (`Sinks`)."""

import keras


class Untracked:
    """Hides a value from Keras's attribute tracking.

    The score layer (and a layer mod) is tracked only after the
    projections, so that `set_weights` with the weights of a
    `keras.layers.MultiHeadAttention` lines up; the call being run is
    held for Keras's hooks.
    """

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Sinks(keras.layers.Layer):
    """Holds the weight `sinks`, so that it follows every other weight of
    the layer (Keras's variables, then the score's)."""

    def __init__(self, num_heads, **kwargs):
        super().__init__(name="sinks", **kwargs)
        self.num_heads = num_heads

    def build(self, input_shape=None):
        # keras-hub's gpt-oss initializes its sinks so.
        self.sinks = self.add_weight(
            name="sinks", shape=(self.num_heads,), initializer="random_normal"
        )
        self.built = True
