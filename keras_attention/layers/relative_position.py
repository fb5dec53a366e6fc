"""T5's learned relative-position bias, as a layer that is a score mod."""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention.ops import mods


@keras.saving.register_keras_serializable(package="keras_attention")
class RelativePositionBias(keras.layers.Layer):
    """T5's relative-position bias: `score + b[bucket(j - i), head]`.

    A learned scalar per head and bucket of the relative position `j - i`
    of key `j` and query `i` is added to the logits (Raffel et al. 2020,
    section 2.1): exact buckets for short distances, logarithmic ones up
    to `max_distance` (`keras_attention.ops.mods.relative_position_buckets`).
    The layer is a score mod, `layer(score, batch, head, q_idx, kv_idx)`:
    pass it as `score_mod=` to `MultiHeadAttention` or `SelfAttention`
    (whose weights then include its table) or to
    `keras_attention.ops.flex_attention`. Its table trains through the
    dense and the chunked path alike (`tensors`, `with_tensors`).

    Args:
        num_heads: Number of attention heads.
        num_buckets: Number of buckets. Defaults to `32`.
        max_distance: Distance from which all share the last bucket.
            Defaults to `128`.
        bidirectional: Whether keys before and after the query have their
            own buckets (an encoder); `False` for a causal decoder.
            Defaults to `True`.
        embeddings_initializer: Initializer of the table
            `(num_buckets, num_heads)`. Defaults to `"zeros"`.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        score: The scaled logits, e.g. `(batch_size, heads, Tq, Tk)`.
        batch: Integer index tensor of the batch, broadcasting to `score`.
        head: That of the head.
        q_idx: That of the query position.
        kv_idx: That of the key position.

    Returns:
        `score` plus the bias of each pair's bucket and head.

    Example:

    >>> bias = keras_attention.RelativePositionBias(num_heads=2)
    >>> layer = keras_attention.SelfAttention(num_heads=2, score_mod=bias)
    >>> x = np.random.rand(2, 6, 8).astype("float32")
    >>> tuple(layer(x).shape), len(layer.trainable_weights)
    ((2, 6, 8), 9)

    References:
        - [Raffel et al., 2020](https://arxiv.org/abs/1910.10683)
    """

    def __init__(
        self,
        num_heads,
        num_buckets=32,
        max_distance=128,
        bidirectional=True,
        embeddings_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = _validation.positive_int("num_heads", num_heads)
        self.num_buckets = _validation.positive_int("num_buckets", num_buckets)
        self.max_distance = _validation.positive_int(
            "max_distance", max_distance
        )
        if self.max_distance <= self.num_buckets // (4 if bidirectional else 2):
            raise ValueError(
                "Expected `max_distance` beyond the exact buckets "
                f"(num_buckets // {4 if bidirectional else 2}). Received: "
                f"max_distance={max_distance}, num_buckets={num_buckets}"
            )
        self.bidirectional = bool(bidirectional)
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer
        )
        # The shape is known now: the table exists before any call, so
        # that the chunked path can take it as an input.
        self.build()

    def build(self, *args, **kwargs):
        if self.built:
            return
        self.table = self.add_weight(
            name="relative_attention_bias",
            shape=(self.num_buckets, self.num_heads),
            initializer=self.embeddings_initializer,
        )
        self.built = True

    @property
    def tensors(self):
        """The table, which the chunked path of `flex_attention` rebinds."""
        return (self.table,)

    def with_tensors(self, tensors):
        """The same bias reading the table `tensors[0]` (a plain mod)."""
        return mods.relative_position_bias(
            tensors[0], self.num_buckets, self.max_distance, self.bidirectional
        )

    def call(self, score, batch, head, q_idx, kv_idx):
        table = ops.cast(self.table, score.dtype)
        return self.with_tensors((table,))(score, batch, head, q_idx, kv_idx)

    def compute_output_shape(self, score_shape, *index_shapes):
        return tuple(score_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "num_buckets": self.num_buckets,
            "max_distance": self.max_distance,
            "bidirectional": self.bidirectional,
            "embeddings_initializer": keras.initializers.serialize(
                self.embeddings_initializer
            ),
        }
