"""The paged cache: a pool of pages and a block table, so that one batch
holds sequences of different lengths (private module;
`keras_attention.PagedCache`)."""

import numpy as np
from keras import ops

from keras_attention import _validation
from keras_attention.layers import _cache


class PagedCache(_cache.AttentionCache):
    """A pool of pages of `page_size` positions and a block table: the
    pages of each sequence (vLLM's PagedAttention, Kwon et al. 2023).

    Sequences of different lengths decode in one batch with no padding in
    the cache: row `b` of `block_table` lists the pages that hold its
    positions in order (position `p` in page `block_table[b, p //
    page_size]`, slot `p % page_size`; `-1` for a page not given yet). A
    call writes each sequence's entries at its own position,
    `cache_update_index` `(batch_size,)` (its length so far), and each
    query sees its sequence's positions below its own (the masks and
    rotary positions read them per sequence). The layer attends over each
    sequence's pages gathered in order (a view made within the call, its
    pages beyond the sequence masked); the pool holds only the pages
    given.

    Between calls (eagerly) sequences join (`join`) and leave (`leave`),
    pages are given to the sequences that need them (`reserve`), and a
    call can run on some sequences only (`select`, then `with_pages` to
    take the pool it wrote back). Every layer of a model has its own
    pool; doing the same to each keeps their block tables the same.

    Args:
        pages: `(2, num_pages, page_size, num_key_value_heads,
            head_dim)`: keys (index 0) and values (index 1) of the pool.
        block_table: `(batch_size, pages_per_sequence)` int32: the pages
            of each sequence, `-1` for none.

    Returns:
        A layer called with it returns a `PagedCache` of the same block
        table, the call's keys and values written in its pages.

    Example:

    >>> layer = keras_attention.GroupedQueryAttention(4, 4, 2)
    >>> x = np.random.rand(2, 5, 8).astype("float32")
    >>> _ = layer(x, x)
    >>> cache = keras_attention.PagedCache.allocate(
    ...     layer, num_pages=8, page_size=2, pages_per_sequence=4
    ... )
    >>> cache = cache.join(2).reserve([3, 5])  # two sequences
    >>> np.asarray(cache.block_table).tolist()
    [[0, 1, -1, -1], [2, 3, 4, -1]]
    >>> out, cache = layer(  # a token of each, at positions 2 and 4
    ...     x[:, :1], x[:, :1], cache=cache,
    ...     cache_update_index=np.array([2, 4]), use_causal_mask=True,
    ... )
    >>> tuple(out.shape)
    (2, 1, 8)

    References:
        - [Kwon et al., 2023, Efficient Memory Management for Large
          Language Model Serving with PagedAttention](https://arxiv.org/abs/2309.06180)
    """

    slots_are_positions = False
    index_rank = 1

    def __init__(self, pages, block_table):
        argument = _cache.tensor_argument
        self.pages = argument(self, "pages", pages, rank=5)
        self.block_table = argument(self, "block_table", block_table, rank=2)
        if self.pages.shape[0] != 2:
            raise ValueError(
                "PagedCache expects `pages` of shape `(2, num_pages, "
                "page_size, heads, head_dim)`. Received: pages.shape="
                f"{tuple(self.pages.shape)}"
            )
        if "int" not in _cache.dtype_of(block_table):
            raise ValueError(
                "PagedCache expects an integer `block_table`. Received: "
                f"block_table.dtype={_cache.dtype_of(block_table)}"
            )

    @property
    def num_pages(self):
        return int(self.pages.shape[1])

    @property
    def page_size(self):
        return int(self.pages.shape[2])

    @property
    def tensors(self):
        return (self.pages, self.block_table)

    def with_tensors(self, tensors):
        return PagedCache(*tensors)

    @property
    def max_length(self):
        """Positions a sequence can hold: `pages_per_sequence ·
        page_size`."""
        return int(self.block_table.shape[1]) * self.page_size

    def check(self, spec, batch_size, new_length):
        shape = tuple(self.pages.shape)
        layout = f"(2, num_pages, page_size, {spec.kv_heads}, {spec.key_dim})"
        if spec.key_dim != spec.value_dim:
            raise _cache.mismatch(
                spec,
                "keys and values of one head size for a PagedCache",
                f"key_dim={spec.key_dim}, value_dim={spec.value_dim}",
            )
        if shape[3:] != (spec.kv_heads, spec.key_dim):
            raise _cache.mismatch(
                spec,
                f"PagedCache pages of shape `{layout}` (its key/value "
                "heads and head size)",
                f"pages.shape={shape}",
            )
        rows = tuple(self.block_table.shape)
        if None not in (rows[0], batch_size) and rows[0] != batch_size:
            raise _cache.mismatch(
                spec,
                f"a PagedCache with a row of its block table for each of "
                f"the batch's {batch_size} sequences",
                f"block_table.shape={rows}",
            )
        _cache.check_floating(spec, self.pages, "pages")
        _cache.check_length(spec, self.max_length, new_length)

    def check_index(self, layer_name, index, new_length):
        """One position per sequence, checked against its pages where
        known, clamped into `[0, max_length - Tq]` where traced."""
        _cache.check_index_type(layer_name, index, rank=1)
        value = _cache.concrete(index)
        table = _cache.concrete(self.block_table)
        if value is None or table is None or not isinstance(new_length, int):
            index = ops.cast(index, "int32")
            last = ops.cast(self.max_length - new_length, "int32")
            return ops.clip(index, 0, last)
        if len(value) != len(table):
            raise ValueError(
                f"{layer_name}: a PagedCache's `cache_update_index` has one "
                f"position per sequence, {len(table)} (the rows of its "
                "block table). Received: "
                f"cache_update_index={value.tolist()}"
            )
        if (value < 0).any():
            raise ValueError(
                f"{layer_name}: each sequence's `cache_update_index` is a "
                "position, 0 or more; it is negative for the sequences "
                f"{np.flatnonzero(value < 0).tolist()}. Received: "
                f"cache_update_index={value.tolist()}"
            )
        given = (table >= 0).sum(axis=1) * self.page_size
        needed = value + new_length
        if (needed > given).any():
            raise ValueError(
                f"{layer_name}: each sequence's `cache_update_index` and "
                "the call's positions must fit in the pages its row of the "
                "block table gives (PagedCache.reserve): positions "
                f"{needed.tolist()} for {given.tolist()} positions of pages. "
                f"Received: cache_update_index={value.tolist()}"
            )
        return ops.convert_to_tensor(value.astype("int32"))

    def read(self):
        raise ValueError(
            "A PagedCache's sequences have their own lengths: a call with "
            "it needs each one's position, `cache_update_index` "
            "`(batch_size,)`. Received: cache_update_index=None"
        )

    def _slots(self):
        """`(batch_size, max_length)`: the pool slot of each position of
        each sequence (0 where it has no page, then masked)."""
        size = self.page_size
        table = ops.maximum(ops.cast(self.block_table, "int32"), 0)
        slots = table[:, :, None] * size + ops.arange(size, dtype="int32")
        return ops.reshape(slots, (ops.shape(table)[0], -1))

    def write(self, index, keys, values):
        """The entries written at each sequence's position; each
        sequence's positions gathered in order, those past its last new
        entry masked."""
        index = ops.cast(index, "int32")
        length = ops.shape(keys)[1]
        positions = index[:, None] + ops.arange(length, dtype="int32")
        slots = ops.take_along_axis(self._slots(), positions, axis=1)
        heads = tuple(self.pages.shape[3:])
        pool = ops.reshape(self.pages, (2, -1) + heads)
        new = ops.stack([keys, ops.cast(values, keys.dtype)], axis=0)
        new = ops.reshape(ops.cast(new, pool.dtype), (2, -1) + heads)
        flat = ops.reshape(slots, (-1,))
        written = [
            ops.scatter_update(pool[i], flat[:, None], new[i]) for i in (0, 1)
        ]
        view = [ops.take(part, self._slots(), axis=0) for part in written]
        seen = ops.arange(self.max_length, dtype="int32")[None]
        key_mask = seen < (index + length)[:, None]
        pages = ops.reshape(ops.stack(written, axis=0), self.pages.shape)
        return (
            _cache.Attended(tuple(view), key_mask=key_mask),
            PagedCache(pages, self.block_table),
        )

    # Managing the pages (eagerly, between calls).

    def _table(self):
        table = _cache.concrete(self.block_table)
        if table is None:
            raise ValueError(
                "A PagedCache's pages are given between calls, eagerly: its "
                "block table must have a value. Received: a traced "
                "block_table"
            )
        return np.array(table, dtype="int32")

    def _with_table(self, table):
        table = ops.convert_to_tensor(np.asarray(table, dtype="int32"))
        return PagedCache(self.pages, table)

    def join(self, count=1):
        """The cache with `count` more sequences (rows of the block table,
        no pages yet), after the others."""
        count = _validation.positive_int("count", count)
        table = self._table()
        empty = np.full((count, table.shape[1]), -1, dtype="int32")
        return self._with_table(np.concatenate([table, empty], axis=0))

    def leave(self, rows):
        """The cache without the sequences `rows` (their pages free)."""
        table = self._table()
        rows = _rows_argument(rows, len(table))
        return self._with_table(np.delete(table, rows, axis=0))

    def select(self, rows):
        """The sequences `rows` alone, on the same pool: a call on some of
        the sequences (then `with_pages` takes its pool back)."""
        table = self._table()
        return self._with_table(table[_rows_argument(rows, len(table))])

    def with_pages(self, other):
        """This cache's sequences on `other`'s pool (a `PagedCache` that a
        call on `select`ed sequences returned)."""
        if not isinstance(other, PagedCache):
            raise TypeError(f"Expected a PagedCache. Received: other={other!r}")
        if tuple(other.pages.shape) != tuple(self.pages.shape):
            raise ValueError(
                "Expected a PagedCache of the same pool. Received: "
                f"pages.shape={tuple(other.pages.shape)} for "
                f"{tuple(self.pages.shape)}"
            )
        return PagedCache(other.pages, self.block_table)

    def reserve(self, lengths):
        """The cache with pages for `lengths[b]` positions of each
        sequence `b`, the free pages (those no row lists) given lowest
        first; a `ValueError` if the pool or a row runs out."""
        table = self._table()
        lengths = np.asarray(_cache.concrete(lengths)).reshape(-1)
        if len(lengths) != len(table) or (lengths < 0).any():
            raise ValueError(
                "Expected `lengths` of one non-negative length per sequence "
                f"({len(table)}). Received: lengths={lengths.tolist()}"
            )
        needed = -(-lengths // self.page_size)
        if (needed > table.shape[1]).any():
            raise ValueError(
                f"A sequence holds at most {self.max_length} positions "
                f"({table.shape[1]} pages of {self.page_size}). Received: "
                f"lengths={lengths.tolist()}"
            )
        free = sorted(set(range(self.num_pages)) - set(table[table >= 0]))
        for row, count in enumerate(needed):
            for slot in range(count):
                if table[row, slot] >= 0:
                    continue
                if not free:
                    raise ValueError(
                        f"The pool's {self.num_pages} pages are all given. "
                        f"Received: lengths={lengths.tolist()}"
                    )
                table[row, slot] = free.pop(0)
        return self._with_table(table)

    @classmethod
    def allocate(
        cls,
        layer,
        num_pages,
        page_size,
        pages_per_sequence,
        batch_size=0,
        dtype=None,
    ):
        """An empty pool of `num_pages` pages of `page_size` positions for
        `layer` (built), with `batch_size` sequences of no pages, each of
        up to `pages_per_sequence` pages."""
        spec = _cache.layer_spec(layer)
        positive = _validation.positive_int
        num_pages = positive("num_pages", num_pages)
        page_size = positive("page_size", page_size)
        per_sequence = positive("pages_per_sequence", pages_per_sequence)
        _validation.non_negative_length("batch_size", batch_size)
        dtype = _cache.float_dtype(layer, dtype)
        shape = (2, num_pages, page_size, spec.kv_heads, spec.key_dim)
        table = np.full((batch_size, per_sequence), -1, dtype="int32")
        return cls(ops.zeros(shape, dtype=dtype), ops.convert_to_tensor(table))


def _rows_argument(rows, count):
    """`rows` as a list of row indices below `count`, or a `ValueError`."""
    values = np.asarray(rows).reshape(-1)
    if (
        values.dtype.kind not in "iu"
        or ((values < 0) | (values >= count)).any()
    ):
        raise ValueError(
            f"Expected `rows` to be indices of the {count} sequences. "
            f"Received: rows={rows!r}"
        )
    return values.tolist()
