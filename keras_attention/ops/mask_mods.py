"""Mask mods combined, and the blocks a mask mod empties or keeps whole.

`and_masks` and `or_masks` combine mask mods (flax's `combine_masks`,
PyTorch's `and_masks` / `or_masks`); `create_block_mask` evaluates a mask
mod once, a row of query blocks at a time, into a `BlockMask` whose empty
blocks the block kernel skips and whose full blocks it does not mask.
"""

import keras
from keras import ops

from keras_attention.ops import checks
from keras_attention.ops._layout import index_tensors
from keras_attention.ops._mod_base import with_scalars


def keep(mask_mod, batch, head, q_idx, kv_idx):
    """`mask_mod(batch, head, q_idx, kv_idx)` as booleans: the one place a
    mask mod is evaluated (a call's band, this package's own, is read on
    its grid by `masks.position_mask`). A result of another dtype than
    boolean or integer (floats, which a cast would read as "kept" wherever
    they are not 0) is a `TypeError` naming the mod."""
    kept = mask_mod(batch, head, q_idx, kv_idx)
    dtype = keras.backend.standardize_dtype(getattr(kept, "dtype", "bool"))
    if dtype != "bool" and "int" not in dtype:
        raise TypeError(
            "Expected `mask_mod` to return booleans (True = keep the pair); "
            f"a {dtype} result would keep every pair that is not 0. "
            f"Received: mask_mod={mask_mod!r} returning dtype {dtype}"
        )
    return ops.cast(kept, "bool")


# Block kinds of a `BlockMask`.
EMPTY, PARTIAL, FULL = 0, 1, 2


def and_masks(*mask_mods):
    """A mask mod that keeps a pair where every one of `mask_mods` does.

    Args:
        *mask_mods: Mask mods, `mask_mod(batch, head, q_idx, kv_idx)`.

    Returns:
        A mask mod; with no argument, one that keeps every pair.

    Example:

    >>> from keras_attention.ops import mods
    >>> window = keras_attention.ops.and_masks(
    ...     mods.causal(), mods.sliding_window(2)
    ... )
    >>> q, kv = keras.ops.arange(3)[:, None], keras.ops.arange(3)[None]
    >>> keras.ops.convert_to_numpy(window(0, 0, q, kv)).astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [0, 1, 1]])
    """
    return MaskCombination("and", mask_mods)


def or_masks(*mask_mods):
    """A mask mod that keeps a pair where any one of `mask_mods` does.

    Args:
        *mask_mods: Mask mods, `mask_mod(batch, head, q_idx, kv_idx)`.

    Returns:
        A mask mod; with no argument, one that keeps no pair.

    Example:

    >>> from keras_attention.ops import mods, or_masks
    >>> q_idx, kv_idx = keras.ops.arange(3)[:, None], keras.ops.arange(3)[None]
    >>> mask_mod = or_masks(mods.causal(), mods.band(left=0, right=1))
    >>> np.asarray(mask_mod(0, 0, q_idx, kv_idx)).astype(int).tolist()
    [[1, 1, 0], [1, 1, 1], [1, 1, 1]]
    """
    return MaskCombination("or", mask_mods)


@keras.saving.register_keras_serializable(package="keras_attention")
class MaskCombination:
    """The AND (`and_masks`) or OR (`or_masks`) of mask mods.

    Args:
        op: `"and"` or `"or"`.
        mask_mods: The mask mods combined.

    Example:

    >>> from keras_attention.ops import and_masks, mods
    >>> recent = and_masks(mods.causal(), mods.sliding_window(2))
    >>> type(recent).__name__, recent.op
    ('MaskCombination', 'and')
    """

    def __init__(self, op, mask_mods):
        if op not in ("and", "or"):
            raise ValueError(
                f"Expected `op` to be 'and' or 'or'. Received: op={op!r}"
            )
        for mod in mask_mods:
            checks.mod("mask_mod", mod)
        self.op = op
        self.mask_mods = tuple(mask_mods)

    def with_scalars(self, convert):
        """The combination of the mods' `with_scalars` (`Mod.with_scalars`)."""
        mods = [with_scalars(mod, convert) for mod in self.mask_mods]
        return MaskCombination(self.op, mods)

    def __call__(self, batch, head, q_idx, kv_idx):
        combine = ops.logical_and if self.op == "and" else ops.logical_or
        result = ops.greater_equal(q_idx, q_idx)
        if self.op == "or":
            result = ops.logical_not(result)
        for mod in self.mask_mods:
            result = combine(result, keep(mod, batch, head, q_idx, kv_idx))
        return result

    def get_config(self):
        serialize = keras.saving.serialize_keras_object
        return {
            "op": self.op,
            "mask_mods": [serialize(mod) for mod in self.mask_mods],
        }

    @classmethod
    def from_config(cls, config):
        mods = [
            keras.saving.deserialize_keras_object(mod)
            for mod in config["mask_mods"]
        ]
        return cls(config["op"], mods)


def _pair(received, name):
    value = received
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    ok = isinstance(value, (tuple, list)) and len(value) == 2
    ok = ok and all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
    )
    if not ok:
        raise ValueError(
            f"Expected `{name}` to be a positive integer or a pair of "
            f"positive integers. Received: {name}={received!r}"
        )
    return tuple(value)


class BlockMask:
    """Which blocks of the `(Tq, Tk)` pairs a mask empties or keeps whole.

    Made by `create_block_mask`. `kinds` is an integer tensor
    `(batch, heads, num_query_blocks, num_key_blocks)` (size 1 on an axis
    the mask does not depend on) of `EMPTY` (0, skipped), `PARTIAL` (1, the
    mask is evaluated) and `FULL` (2, no mask is evaluated).

    Attributes:
        mask_mod: The mask mod it was made from.
        kinds: The kind of each block.
        block_size: `(queries, keys)` per block.
        shape: `(batch, heads, q_len, kv_len)` it was made for.

    Example:

    >>> from keras_attention.ops import create_block_mask, mods
    >>> block_mask = create_block_mask(mods.causal(), None, None, 256, 256)
    >>> np.asarray(block_mask.kinds)[0, 0].tolist()  # 0 empty, 2 full
    [[1, 0], [2, 1]]
    """

    def __init__(self, mask_mod, kinds, block_size, shape):
        self.mask_mod = mask_mod
        self.kinds = kinds
        self.block_size = block_size
        self.shape = shape

    def sparsity(self) -> float:
        """The fraction of blocks that are empty (skipped)."""
        empty = ops.cast(ops.equal(self.kinds, EMPTY), "float32")
        return float(ops.convert_to_numpy(ops.mean(empty)))

    def __repr__(self):
        return (
            f"BlockMask(shape={self.shape}, block_size={self.block_size}, "
            f"sparsity={self.sparsity():.2f})"
        )


def create_block_mask(
    mask_mod, batch, heads, q_len: int, kv_len: int, block_size=128
):
    """The `BlockMask` of `mask_mod`: each block empty, partial or full.

    The mask is evaluated once here, on every pair (one row of query
    blocks at a time); `flex_attention` then skips the empty blocks and
    evaluates it only in the partial ones. `flex_attention` makes one
    itself for a `mask_mod` on its chunked path.

    Args:
        mask_mod: `mask_mod(batch, head, q_idx, kv_idx) -> bool`.
        batch: Batch size, or `None` for a mask the same in every example.
        heads: Number of query heads, or `None` for a mask the same in
            every head.
        q_len: Number of queries.
        kv_len: Number of keys.
        block_size: Queries and keys per block, an integer or a pair
            `(queries, keys)`. Defaults to `128`.

    Returns:
        A `BlockMask`.

    Example:

    >>> from keras_attention.ops import mods
    >>> block_mask = keras_attention.ops.create_block_mask(
    ...     mods.causal(), None, None, 8, 8, block_size=4
    ... )
    >>> keras.ops.convert_to_numpy(block_mask.kinds)[0, 0]
    array([[1, 0],
           [2, 1]], dtype=int32)
    """
    if mask_mod is None:
        raise TypeError(
            "Expected `mask_mod` to be callable, `mask_mod(batch, head, "
            "q_idx, kv_idx)`. Received: mask_mod=None"
        )
    checks.mod("mask_mod", mask_mod)
    sizes = (("q_len", q_len), ("kv_len", kv_len))
    sizes += tuple(
        (n, v) for n, v in (("batch", batch), ("heads", heads)) if v is not None
    )
    for name, value in sizes:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(
                f"Expected `{name}` to be a positive integer"
                + (" or None" if name in ("batch", "heads") else "")
                + f". Received: {name}={value!r}"
            )
    qb, kb = _pair(block_size, "block_size")
    rows = [
        _block_row(mask_mod, batch, heads, (q_len, kv_len), (qb, kb), r)
        for r in range(-(-q_len // qb))
    ]
    kinds = ops.concatenate(rows, axis=2) if len(rows) > 1 else rows[0]
    shape = (batch, heads, q_len, kv_len)
    return BlockMask(mask_mod, ops.cast(kinds, "int32"), (qb, kb), shape)


def _block_row(mask_mod, batch, heads, lengths, sizes, row):
    """The kinds of query block `row`, `(b, h, 1, num_key_blocks)`.

    One row at a time: the mask of `(b, h, qb, kv_len)` pairs is all that
    is held, with `b` and `h` of size 1 where the mask does not depend on
    them.
    """
    (q_len, kv_len), (qb, kb) = lengths, sizes
    nk = -(-kv_len // kb)
    q_pos = row * qb + ops.arange(qb)
    kv_pos = ops.arange(nk * kb)
    b, h, q, kv = index_tensors(
        1 if batch is None else batch,
        1 if heads is None else heads,
        1,
        q_pos,
        kv_pos,
    )
    b, h, q, kv = (ops.squeeze(t, 2) for t in (b, h, q, kv))
    kept = keep(
        mask_mod, b, h, ops.minimum(q, q_len - 1), ops.minimum(kv, kv_len - 1)
    )
    inside = ops.logical_and(ops.less(q, q_len), ops.less(kv, kv_len))
    kept = ops.logical_and(kept, inside)
    while len(kept.shape) < 4:
        kept = ops.expand_dims(kept, 0)
    lead = tuple(ops.shape(kept)[:2])
    kept = ops.broadcast_to(kept, lead + (qb, nk * kb))
    kept = ops.reshape(kept, lead + (1, qb, nk, kb))
    some = ops.any(kept, axis=(3, 5))
    every = ops.all(kept, axis=(3, 5))
    return ops.where(every, FULL, ops.where(some, PARTIAL, EMPTY))
