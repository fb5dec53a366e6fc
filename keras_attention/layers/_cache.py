"""The caches of the multi-head layers: one interface, every kind checked.

`AttentionCache` is the one interface of a cache between calls: its
tensors, `allocate` (an empty cache for a layer), `check` (against the
layer that reads it: batch, heads, head size, dtype, length), `write`
(the call's new entries at `cache_update_index`) and `read` (the cache as
it is), which give the heads to attend over with the positions and mask
the mods see (`Attended`). Each kind implements it: `KeyValueCache`
(keras-hub's tensor, the default), `RollingCache` (a window, StreamingLLM's
sink tokens), `QuantizedCache` (int8 or float8 entries) and `PagedCache`
(pages, ragged batches), each in its module; MLA's `LatentCache` holds
its latents.

A layer call's own cache (`CacheCall`: the checks, the index, the update
the engine runs while it projects, the cache it returns) is
`layers/_cache_call.py`.

keras-hub's `CachedMultiHeadAttention` semantics: a cache
`(batch_size, 2, max_length, heads, head_dim)` holds the projected keys
(index 0) and values (index 1); with `cache_update_index` the new keys and
values are written at that position first, without it the cache is
attended as it is. The caller's `attention_mask (batch_size, Tq,
max_length)` says which slots each query sees. Rotary embeddings rotate
the projected queries and keys at their absolute positions, which follow
`cache_update_index` when decoding.
"""

import abc
import dataclasses
import numbers
import re
from typing import Any
from typing import NamedTuple

import keras
import numpy as np
from keras import ops

from keras_attention import _validation
from keras_attention.layers import _in_place
from keras_attention.layers import _update_mask


class Attended(NamedTuple):
    """What a call attends over once its cache is written or read.

    Attributes:
        tensors: The heads' keys and values `(batch_size, Tk, heads,
            head_dim)` (MLA: its latents `(batch_size, Tk, width)`).
        key_positions: The absolute position of each of the `Tk` keys,
            `(Tk,)` or `(batch_size, Tk)` integers, or `None` when key `j`
            is position `j`. The band and the mods read them.
        key_mask: Boolean `(batch_size or 1, Tk)`: the keys that hold an
            entry, or `None` for all.
        mask_mods: Mask mods of positions the kind adds (a rolling
            window), ANDed with the layer's.
        block_mask: A `BlockMask` of the keys (a paged cache's pages),
            or `None`.
        scales: `(key_scale, value_scale)` `(batch_size, Tk, heads)` of
            quantized keys and values, or `None`.
    """

    tensors: tuple
    key_positions: Any = None
    key_mask: Any = None
    mask_mods: tuple = ()
    block_mask: Any = None
    scales: Any = None


@dataclasses.dataclass(frozen=True)
class CacheSpec:
    """What a layer's cache must match (`MultiHeadBase.cache_spec`).

    Attributes:
        layer_name: The layer's class name, for the errors.
        kv_heads: The key/value heads.
        key_dim: The size of each key head.
        value_dim: The size of each value head.
        window: How many of the most recent positions a causal query
            sees (the layer's `sliding_window` or `attention_width`), or
            `None` for all.
        width: The size of one position's entry of a latent cache (MLA),
            or `None`.
    """

    layer_name: str
    kv_heads: int = 1
    key_dim: int = 1
    value_dim: int = 1
    window: int | None = None
    width: int | None = None


def static_shape(tensor):
    return tuple(tensor.shape)


def is_float(tensor):
    dtype = keras.backend.standardize_dtype(tensor.dtype)
    return keras.backend.is_float_dtype(dtype)


def dtype_of(tensor):
    return keras.backend.standardize_dtype(tensor.dtype)


def itemsize(dtype):
    """Bytes of one number of `dtype` (a Keras dtype name)."""
    if dtype == "bool":
        return 1
    return int(re.search(r"\d+", dtype).group()) // 8


def concrete(index):
    """The value of an index known now (a Python int, a NumPy value or an
    eager tensor), as a NumPy integer array; `None` where it is traced."""
    if isinstance(index, numbers.Integral):
        return np.asarray(int(index))
    if isinstance(index, keras.KerasTensor) or _in_place.compiling():
        return None
    try:
        return np.asarray(ops.convert_to_numpy(index))
    except Exception:  # a traced tensor has no value yet
        return None


def check_index_type(layer_name, index, rank=0):
    """An integer scalar (or `(batch_size,)` with `rank=1`), or an error."""
    if isinstance(index, bool) or isinstance(index, (float, str, bytes)):
        raise TypeError(
            f"{layer_name} expects an integer `cache_update_index`. "
            f"Received: cache_update_index={index!r}"
        )
    if isinstance(index, numbers.Integral):
        shape, dtype = (), "int64"
    else:
        if not hasattr(index, "dtype"):
            index = np.asarray(index)
        shape = tuple(index.shape)
        dtype = keras.backend.standardize_dtype(index.dtype)
    if "int" not in dtype:
        raise TypeError(
            f"{layer_name} expects an integer `cache_update_index`. "
            f"Received: cache_update_index.dtype={dtype}"
        )
    if len(shape) != rank:
        expected = "a scalar" if rank == 0 else "`(batch_size,)`"
        raise ValueError(
            f"{layer_name} expects `cache_update_index` to be {expected}. "
            f"Received: cache_update_index.shape={shape}"
        )


def bounded_index(layer_name, index, new_length, max_length):
    """`cache_update_index` for a cache of `max_length` slots and a call
    of `new_length` positions: checked where its value is known (a
    `ValueError` outside `[0, max_length - new_length]`), clamped into
    that range where it is traced (so every backend writes the same
    slots: XLA's `dynamic_update_slice` rule)."""
    check_index_type(layer_name, index)
    value = concrete(index)
    static = isinstance(new_length, int) and isinstance(max_length, int)
    if value is not None and static:
        last = max_length - new_length
        if not 0 <= int(value) <= last:
            raise ValueError(
                f"{layer_name}: `cache_update_index` must be in [0, "
                f"max_length - Tq] = [0, {last}] for a cache of max_length="
                f"{max_length} and a call of Tq={new_length} positions. "
                f"Received: cache_update_index={int(value)}"
            )
        return int(value) if isinstance(index, numbers.Integral) else index
    if value is not None:
        return index
    index = ops.cast(index, "int32")
    return ops.clip(index, 0, ops.cast(max_length - new_length, "int32"))


def mismatch(spec, what, received):
    """The `ValueError` of a cache that does not fit its layer."""
    return ValueError(f"{spec.layer_name} expects {what}. Received: {received}")


class AttentionCache(abc.ABC):
    """The one interface of a cache: its tensors and how a layer reads and
    writes them.

    A cache is immutable: a layer call returns a new one (of the same
    kind) with the call's entries written. Its tensors go through
    compiled functions and loops (`tensors`, `with_tensors`); the kind's
    options (a window, a page size) are read from their shapes, so a
    cache rebuilt from its tensors inside a compiled loop is the same
    cache. The multi-head layers (`MultiHeadAttention`, `SelfAttention`,
    `GroupedQueryAttention`) take every kind as `cache=`; a cache tensor
    is keras-hub's, `KeyValueCache`.

    A kind implements `tensors`, `with_tensors`, `max_length`, `check`
    (against the layer's `CacheSpec`: batch, heads, head size, dtype,
    length; a `ValueError` naming the expected and the received), `read`
    (attend to the cache as it is), `write` (the call's entries written
    at `cache_update_index`, and what the heads attend over: the keys and
    values, their positions, which hold an entry, the rules of positions
    the kind adds) and the class method `allocate`.

    A layer called with a cache returns the new cache last: `(output[,
    scores], cache)`.

    Example:

    >>> layer = keras_attention.GroupedQueryAttention(4, 4, 2)
    >>> x = np.random.rand(1, 1, 8).astype("float32")
    >>> _ = layer(x, x)
    >>> cache = keras_attention.KeyValueCache.allocate(layer, 1, 4)
    >>> isinstance(cache, keras_attention.AttentionCache)
    True
    >>> [tuple(t.shape) for t in cache.tensors]
    [(1, 2, 4, 2, 4)]

    References:
        - [keras-hub's `CachedMultiHeadAttention`](https://github.com/keras-team/keras-hub/blob/master/keras_hub/src/layers/modeling/cached_multi_head_attention.py)
    """

    #: Whether the slots are positions, so that an `attention_mask
    #: (batch_size, Tq, max_length)` can say which to see.
    slots_are_positions = True
    #: Whether `write` takes `update_mask` (`cache_update_mask`).
    takes_update_mask = False

    @property
    @abc.abstractmethod
    def tensors(self):
        """The cache's tensors, in the order `with_tensors` takes them."""

    @abc.abstractmethod
    def with_tensors(self, tensors):
        """The same kind of cache holding `tensors`."""

    @property
    @abc.abstractmethod
    def max_length(self):
        """How many positions it holds (`None`: unbounded)."""

    @property
    def nbytes(self):
        """Bytes of its tensors."""
        return sum(
            int(np.prod(t.shape)) * itemsize(dtype_of(t)) for t in self.tensors
        )

    @abc.abstractmethod
    def check(self, spec, batch_size, new_length):
        """A `ValueError` (naming the expected and the received) unless the
        cache fits the layer of `spec`, a batch of `batch_size` (`None`:
        unknown) and a call of `new_length` positions."""

    def check_index(self, layer_name, index, new_length):
        """The call's `cache_update_index`, checked (and clamped where
        traced)."""
        return bounded_index(layer_name, index, new_length, self.max_length)

    def cast(self, dtype):
        """The cache with its floating-point tensors in `dtype`."""
        return self.with_tensors(
            [
                ops.cast(t, dtype)
                if is_float(t) and dtype_of(t) != dtype
                else t
                for t in self.tensors
            ]
        )

    @abc.abstractmethod
    def read(self):
        """`Attended` of the cache as it is (no `cache_update_index`)."""

    @abc.abstractmethod
    def write(self, index, *entries):
        """`(Attended, new cache)`: `entries` (the call's keys and values)
        written at `index`."""

    @classmethod
    @abc.abstractmethod
    def allocate(cls, layer, *args, **kwargs):
        """An empty cache of this kind for `layer` (built); the sizes are
        the kind's (a batch size and a length, a window, pages)."""

    def __repr__(self):
        shapes = ", ".join(str(static_shape(t)) for t in self.tensors)
        return f"{type(self).__name__}({shapes})"


def tensor_argument(cache, name, value, rank=None):
    """`value` if it is a tensor (or an array) of the cache's layout (or
    of `rank`), else an error naming the cache's argument `name`."""
    kind = type(cache).__name__
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise TypeError(
            f"{kind} expects `{name}` to be a tensor. Received: "
            f"{name}={value!r}"
        )
    shape = static_shape(value)
    if rank is None and not cache.fits_layout(shape):
        raise ValueError(
            f"{kind} expects `{name}` of shape `{cache.layout}`. Received: "
            f"{name}.shape={shape}"
        )
    if rank is not None and len(shape) != rank:
        raise ValueError(
            f"{kind} expects `{name}` of rank {rank}. Received: "
            f"{name}.shape={shape}"
        )
    return value


def layer_spec(layer, batch_size=None):
    """`layer.cache_spec()` after checking `batch_size` (a positive int,
    or a scalar tensor: a batch known only when traced)."""
    if batch_size is not None and not hasattr(batch_size, "dtype"):
        _validation.positive_int("batch_size", batch_size)
    spec = getattr(layer, "cache_spec", None)
    if spec is None:
        raise TypeError(
            "Expected `layer` to be a multi-head layer of keras_attention "
            f"(with a cache). Received: layer={layer!r}"
        )
    return spec()


def float_dtype(layer, dtype):
    """`dtype`, or the layer's compute dtype; a `ValueError` unless it is
    a floating-point dtype."""
    dtype = layer.compute_dtype if dtype is None else dtype
    name = keras.backend.standardize_dtype(dtype)
    if not keras.backend.is_float_dtype(name):
        raise ValueError(
            "Expected `dtype` to be a floating-point dtype. Received: "
            f"dtype={dtype!r}"
        )
    return name


def check_batch(spec, shape, batch_size, layout):
    if None not in (shape[0], batch_size) and shape[0] != batch_size:
        raise mismatch(
            spec,
            f"`cache` of the batch's size: `{layout}` with batch_size="
            f"{batch_size}",
            f"cache.shape={shape}",
        )


class KeyValueCache(AttentionCache):
    """keras-hub's cache `(batch_size, 2, max_length, heads, head_dim)`:
    the projected (rotated) keys at index 0, the values at index 1.

    The default kind: a layer called with a cache tensor reads it as
    this, and returns a tensor again. Position `p` is slot `p`.

    Args:
        tensor: `(batch_size, 2, max_length, num_key_value_heads,
            head_dim)`, floating-point.

    Returns:
        A layer called with it returns a `KeyValueCache` (a tensor if it
        was given a tensor) with the call's keys and values written.

    Example:

    >>> layer = keras_attention.GroupedQueryAttention(4, 4, 2)
    >>> x = np.random.rand(2, 1, 8).astype("float32")
    >>> _ = layer(x, x)
    >>> cache = keras_attention.KeyValueCache.allocate(layer, 2, 6)
    >>> out, cache = layer(x, x, cache=cache, cache_update_index=0)
    >>> tuple(cache.tensor.shape)
    (2, 2, 6, 2, 4)

    References:
        - [keras-hub's `CachedMultiHeadAttention`](https://github.com/keras-team/keras-hub/blob/master/keras_hub/src/layers/modeling/cached_multi_head_attention.py)
    """

    layout = "(batch_size, 2, max_length, heads, head_dim)"
    takes_update_mask = True

    def __init__(self, tensor):
        self.tensor = tensor_argument(self, "tensor", tensor)

    @classmethod
    def fits_layout(cls, shape):
        return len(shape) == 5 and shape[1] == 2

    @property
    def tensors(self):
        return (self.tensor,)

    def with_tensors(self, tensors):
        (tensor,) = tensors
        return KeyValueCache(tensor)

    @property
    def max_length(self):
        return static_shape(self.tensor)[2]

    def check(self, spec, batch_size, new_length):
        shape = static_shape(self.tensor)
        layout = f"(batch_size, 2, max_length, {spec.kv_heads}, {spec.key_dim})"
        if spec.key_dim != spec.value_dim:
            raise mismatch(
                spec,
                "keys and values of one head size for keras-hub's cache "
                "`(batch_size, 2, max_length, heads, head_dim)`",
                f"key_dim={spec.key_dim}, value_dim={spec.value_dim}",
            )
        if shape[3:] != (spec.kv_heads, spec.key_dim):
            raise mismatch(
                spec,
                f"`cache` of shape `{layout}` (its key/value heads and "
                "head size)",
                f"cache.shape={shape}",
            )
        check_batch(spec, shape, batch_size, layout)
        check_floating(spec, self.tensor, "cache")
        check_length(spec, self.max_length, new_length)

    def read(self):
        return Attended((self.tensor[:, 0], self.tensor[:, 1]))

    def write(self, index, keys, values, update_mask=None):
        # One update of the whole tensor, not of its keys and values apart
        # and stacked again: in a compiled decoding loop XLA then writes the
        # step's slots in place instead of copying the cache twice a step.
        new = ops.stack((keys, ops.cast(values, keys.dtype)), axis=1)
        new = ops.cast(new, self.tensor.dtype)
        start = [0, 0, index, 0, 0]
        new = _update_mask.kept(self.tensor, start, new, update_mask)
        tensor = _in_place.slice_update(self.tensor, start, new)
        return Attended((tensor[:, 0], tensor[:, 1])), KeyValueCache(tensor)

    @classmethod
    def allocate(cls, layer, batch_size, max_length, dtype=None):
        """`zeros((batch_size, 2, max_length, kv_heads, head_dim))`."""
        spec = layer_spec(layer, batch_size)
        _validation.positive_int("max_length", max_length)
        dtype = float_dtype(layer, dtype)
        shape = (batch_size, 2, max_length, spec.kv_heads, spec.key_dim)
        return cls(ops.zeros(shape, dtype=dtype))


def check_floating(spec, tensor, name):
    if not is_float(tensor):
        raise mismatch(
            spec,
            f"a floating-point `{name}` (its keys and values)",
            f"{name}.dtype={dtype_of(tensor)}",
        )


def check_length(spec, max_length, new_length):
    # Either length may be unknown (None) while a function is traced: a
    # cross-attention's cache of the source under `model.predict`.
    static = isinstance(new_length, int) and isinstance(max_length, int)
    if static and max_length < new_length:
        raise mismatch(
            spec,
            "a cache with a slot for each of the call's positions",
            f"max_length={max_length} for a call of Tq={new_length} positions",
        )
