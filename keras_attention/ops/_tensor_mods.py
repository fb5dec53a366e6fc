"""Mods of one call's tensors (private module; `keras_attention.ops.mods`
re-exports them): documents, padding, T5's relative-position bias, an
additive bias and an explicit mask. They are used in calls, not saved in
configs."""

import math

import keras
from keras import ops

from keras_attention.ops._mod_base import Mod
from keras_attention.ops._mod_base import TensorMod
from keras_attention.ops._mod_base import positive_integer


def gather(tensor, *indices):
    """`tensor[indices]`, one integer index tensor per axis, the indices
    broadcasting together; an axis of size 1 is read at 0 (it
    broadcasts). Only the first axis may be dynamic.

    On PyTorch it indexes: a pointwise load, which PyTorch's compiled
    FlexAttention lowers inside a mod. `keras.ops.take` reshapes its index
    first, which that compiler refuses, or, for an index computed from the
    positions, lowers to wrong values (torch 2.13, CPU). Elsewhere it is
    one `keras.ops.take` of the flattened tensor.
    """
    static = tuple(tensor.shape)
    if keras.backend.backend() == "torch":
        tensor = ops.convert_to_tensor(tensor)
        return tensor[
            tuple(
                0 if size == 1 else ops.cast(index, "int32")
                for size, index in zip(static, indices, strict=True)
            )
        ]
    dynamic = ops.shape(tensor)
    flat_index, stride = 0, 1
    for axis in range(len(static) - 1, -1, -1):
        if static[axis] != 1:
            position = ops.cast(indices[axis], "int32")
            flat_index = flat_index + position * stride
        stride = stride * dynamic[axis]
    return ops.take(ops.reshape(tensor, (-1,)), flat_index)


class Document(TensorMod):
    """Mask mod: a query sees the keys of its own segment."""

    def __init__(self, segment_ids, kv_segment_ids=None):
        self.segment_ids = ops.convert_to_tensor(segment_ids)
        self.kv_segment_ids = (
            self.segment_ids
            if kv_segment_ids is None
            else ops.convert_to_tensor(kv_segment_ids)
        )

    def __call__(self, batch, head, q_idx, kv_idx):
        return ops.equal(
            gather(self.segment_ids, batch, q_idx),
            gather(self.kv_segment_ids, batch, kv_idx),
        )


def document(segment_ids, kv_segment_ids=None):
    """Mask mod of packed sequences: `segment_ids[b, q] == ids[b, kv]`.

    Args:
        segment_ids: Integer `(batch_size, Tq)`, the document of each query.
        kv_segment_ids: Optional `(batch_size, Tk)`, those of the keys.
            Defaults to `segment_ids` (self-attention).
    """
    return Document(segment_ids, kv_segment_ids)


class Padding(TensorMod):
    """Mask mod: `kv_idx < lengths[batch]`."""

    def __init__(self, lengths):
        self.lengths = ops.cast(ops.convert_to_tensor(lengths), "int32")

    def __call__(self, batch, head, q_idx, kv_idx):
        return ops.less(kv_idx, gather(self.lengths, batch))


def padding(lengths):
    """Mask mod of right-padded keys: `kv_idx < lengths[batch]`.

    Args:
        lengths: Integer `(batch_size,)`, the number of real keys.
    """
    return Padding(lengths)


def relative_position_buckets(
    relative_position, num_buckets: int, max_distance: int, bidirectional: bool
):
    """T5's bucket of each `relative_position = kv_idx - q_idx`.

    Half the buckets (per direction, with `bidirectional`) hold the exact
    distances below `num_buckets // 2`, the rest distances up to
    `max_distance` on a log scale; farther ones share the last bucket
    (Raffel et al. 2020, section 2.1).
    """
    n = -ops.cast(relative_position, "int32")
    bucket = ops.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + ops.cast(ops.less(n, 0), "int32") * num_buckets
        n = ops.abs(n)
    else:
        n = ops.maximum(n, 0)
    exact = num_buckets // 2
    scaled = ops.log(ops.maximum(ops.cast(n, "float32"), 1.0) / exact) / (
        math.log(max_distance / exact)
    )
    large = exact + ops.cast(scaled * (num_buckets - exact), "int32")
    large = ops.minimum(large, num_buckets - 1)
    return bucket + ops.where(ops.less(n, exact), n, large)


class RelativePositionBias(Mod):
    """Score mod: `score + table[bucket(kv_idx - q_idx), head]` (T5)."""

    def __init__(self, table, num_buckets, max_distance, bidirectional):
        self.table = table
        self.num_buckets = positive_integer(num_buckets, "num_buckets")
        self.max_distance = positive_integer(max_distance, "max_distance")
        self.bidirectional = bool(bidirectional)
        shape = tuple(table.shape)
        if len(shape) != 2 or shape[0] != num_buckets:
            raise ValueError(
                "Expected `table` of shape `(num_buckets, num_heads)`. "
                f"Received: table.shape={shape}, num_buckets={num_buckets}"
            )

    @property
    def tensors(self):
        return (self.table,)

    def with_tensors(self, tensors):
        (table,) = tensors
        return RelativePositionBias(
            table, self.num_buckets, self.max_distance, self.bidirectional
        )

    def __call__(self, score, batch, head, q_idx, kv_idx):
        bucket = relative_position_buckets(
            kv_idx - q_idx,
            self.num_buckets,
            self.max_distance,
            self.bidirectional,
        )
        bias = gather(self.table, bucket, head)
        return score + ops.cast(bias, score.dtype)

    get_config = TensorMod.get_config
    __eq__ = TensorMod.__eq__
    __hash__ = TensorMod.__hash__
    __repr__ = TensorMod.__repr__


def relative_position_bias(
    table, num_buckets: int = 32, max_distance: int = 128, bidirectional=True
):
    """Score mod of T5's learned relative-position bias.

    Args:
        table: `(num_buckets, num_heads)` bias of each bucket and head (a
            variable to train it: `keras_attention.RelativePositionBias`).
        num_buckets: Number of buckets. Defaults to `32`.
        max_distance: Distance from which all share the last bucket.
            Defaults to `128`.
        bidirectional: Whether keys before and after the query have their
            own buckets. Defaults to `True`.
    """
    return RelativePositionBias(table, num_buckets, max_distance, bidirectional)


def _check_rank4(tensor, name):
    shape = tuple(tensor.shape)
    if len(shape) != 4 or None in shape[1:]:
        raise ValueError(
            f"Expected `{name}` broadcastable to `(batch_size, heads, Tq, "
            "Tk)`, of rank 4 with static shape but for the batch. "
            f"Received: {name}.shape={shape}"
        )


class Bias(TensorMod):
    """Score mod: `score + tensor[batch, head, q_idx, kv_idx]`."""

    def __init__(self, tensor):
        self.tensor = tensor
        _check_rank4(tensor, "tensor")

    @property
    def tensors(self):
        return (self.tensor,)

    def with_tensors(self, tensors):
        return Bias(tensors[0])

    def __call__(self, score, batch, head, q_idx, kv_idx):
        bias = gather(self.tensor, batch, head, q_idx, kv_idx)
        return score + ops.cast(bias, score.dtype)


class BooleanMask(TensorMod):
    """Mask mod: `mask[batch, head, q_idx, kv_idx]` (`boolean_mask`)."""

    def __init__(self, mask):
        self.mask = ops.cast(mask, "bool")
        _check_rank4(self.mask, "mask")

    def __call__(self, batch, head, q_idx, kv_idx):
        return gather(self.mask, batch, head, q_idx, kv_idx)


def boolean_mask(mask):
    """Mask mod of an explicit boolean mask (`True` = keep).

    Args:
        mask: Boolean tensor broadcastable to `(batch_size, heads, Tq, Tk)`,
            of rank 4 (size 1 on an axis to share it): a padding mask
            `(B, Tk)` is `mask[:, None, None, :]`.
    """
    return BooleanMask(mask)


def bias(tensor):
    """Score mod adding a bias `tensor[batch, head, q_idx, kv_idx]`.

    Args:
        tensor: Float tensor of static shape broadcastable to
            `(batch_size, heads, Tq, Tk)` (size 1 on an axis to share it).
    """
    return Bias(tensor)
