"""Attention over any axes of N-D inputs, as `keras.layers.MultiHeadAttention`.

A projected input `(B, d_1, ..., d_k, heads, depth)` attends over the
`attention_axes` among `d_1..d_k`; the other ("free") axes are batch-like.
`AttentionAxes` moves the free axes into the batch and flattens the
attention axes into one sequence axis, so the 3-D machinery (masks, fused,
dense and chunked attention) serves every rank; it then puts the context
and the weights back in Keras's layout, the weights as `(B, free...,
heads, query attention axes..., key attention axes...)` (private module).
"""

import math

from keras import ops


def normalize_axes(attention_axes, input_rank):
    """Keras's attention axes, resolved for an input of `input_rank`.

    `None` means every axis between the batch and the features. A negative
    axis counts from the end of the projected `(B, ..., heads, depth)`
    tensor, as in Keras, so `-2` is the last axis before the features.
    """
    if attention_axes is None:
        return tuple(range(1, input_rank - 1))
    axes = tuple(a if a >= 0 else input_rank + a for a in attention_axes)
    if any(not 1 <= a <= input_rank - 2 for a in axes) or len(set(axes)) != len(
        axes
    ):
        raise ValueError(
            "`attention_axes` must name distinct axes between the batch axis "
            f"and the last axis of inputs of rank {input_rank}. Received: "
            f"attention_axes={attention_axes!r}"
        )
    return tuple(sorted(axes))


def _size(shape, axes):
    return math.prod(shape[a] for a in axes) if axes else 1


class AttentionAxes:
    """Flattens N-D heads to `(B', T, heads, depth)` and back."""

    def __init__(self, input_rank, attention_axes):
        self.rank = input_rank
        self.attention = attention_axes
        self.free = tuple(
            a for a in range(1, input_rank - 1) if a not in attention_axes
        )

    @property
    def is_plain(self):
        """Whether the inputs are `(B, T, dim)`, attended over `T`."""
        return self.rank == 3 and self.attention == (1,)

    def heads(self, x):
        """`(B, d..., heads, depth)` → `(B · free, attention, heads, depth)`."""
        k = self.rank - 2
        order = (0,) + self.free + self.attention + (k + 1, k + 2)
        x = ops.transpose(x, order)
        shape = ops.shape(x)
        length = _size(ops.shape(x), range(1 + len(self.free), k + 1))
        return ops.reshape(x, (-1, length, shape[-2], shape[-1]))

    def padding(self, mask):
        """A `(B, d...)` padding mask → `(B · free, attention)`."""
        if mask is None:
            return None
        mask = ops.transpose(mask, (0,) + self.free + self.attention)
        length = _size(
            ops.shape(mask), range(1 + len(self.free), self.rank - 1)
        )
        return ops.reshape(mask, (-1, length))

    def attention_mask(self, mask, query_shape, key_shape):
        """Keras's `(B, free..., Tq axes..., Tk axes...)` → `(B', Tq, Tk)`.

        Leading axes may be missing (they broadcast), as in Keras.
        """
        if mask is None:
            return None
        free = tuple(query_shape[a] for a in self.free)
        tq = tuple(query_shape[a] for a in self.attention)
        tk = tuple(key_shape[a] for a in self.attention)
        full = (query_shape[0],) + free + tq + tk
        if len(mask.shape) > len(full):
            raise ValueError(
                "For attention over `attention_axes` of N-D inputs, "
                "`attention_mask` must broadcast to `(batch_size, "
                "free axes..., query attention axes..., key attention "
                f"axes...)` = {tuple(full)}. Received: "
                f"attention_mask.shape={tuple(mask.shape)}"
            )
        mask = ops.broadcast_to(ops.cast(mask, "bool"), full)
        return ops.reshape(mask, (-1, math.prod(tq), math.prod(tk)))

    def masks(self, masks, query_shape, key_shape):
        """The masks of `_compute_attention_mask`, flattened like the heads."""
        flat = {
            name: self.padding(masks[name])
            for name in ("query_mask", "value_mask", "key_mask")
        }
        flat["attention_mask"] = self.attention_mask(
            masks["attention_mask"], query_shape, key_shape
        )
        flat["use_causal_mask"] = masks["use_causal_mask"]
        return flat

    def context(self, context, query_shape):
        """`(B', Tq, heads, Dv)` → `(B, d..., heads, Dv)` (Keras's order)."""
        k = self.rank - 2
        free = tuple(query_shape[a] for a in self.free)
        tq = tuple(query_shape[a] for a in self.attention)
        shape = ops.shape(context)
        context = ops.reshape(
            context, (-1,) + free + tq + (shape[-2], shape[-1])
        )
        order = (0,) + self.free + self.attention + (k + 1, k + 2)
        inverse = tuple(order.index(a) for a in range(len(order)))
        return ops.transpose(context, inverse)

    def weights_shape(self, query_shape, key_shape, heads):
        """The shape of the returned weights, in Keras's layout."""
        free = tuple(query_shape[a] for a in self.free)
        tq = tuple(query_shape[a] for a in self.attention)
        tk = tuple(key_shape[a] for a in self.attention)
        return (query_shape[0],) + free + (heads,) + tq + tk

    def weights(self, weights, query_shape, key_shape):
        """`(B', heads, Tq, Tk)` → `(B, free..., heads, Tq..., Tk...)`."""
        if weights is None:
            return None
        free = tuple(query_shape[a] for a in self.free)
        tq = tuple(query_shape[a] for a in self.attention)
        tk = tuple(key_shape[a] for a in self.attention)
        heads = ops.shape(weights)[1]
        return ops.reshape(weights, (-1,) + free + (heads,) + tq + tk)
