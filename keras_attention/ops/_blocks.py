"""The block machinery of the block kernel (private module).

`ops/_kernel.py`, the kernel of `chunked_attention` and `flex_attention`,
cuts its inputs into blocks along the time axis (`-2`), walks them in
loops that run one block at a time on every backend, merges each key
block into an online softmax and visits only the pairs of blocks that
`Visits` lists (a band's limits, or a `BlockMask`'s non-empty blocks).
The backward's loops take a score mod's gradient from the backend's own
autodiff, block by block (`vjp`).
"""

import functools

import keras
from keras import ops

from keras_attention.ops.logits import MASKED_LOGIT

# Fill value of masked logits in the block loops.
NEG = MASKED_LOGIT


def _tf():
    import tensorflow as tf

    return tf


def to_blocks(x, size: int, num_blocks: int):
    """`(..., T, D)` → `(num_blocks, ..., size, D)`, zero-padded in T."""
    rank = len(x.shape)
    pad = num_blocks * size - ops.shape(x)[-2]
    if isinstance(pad, int) and "float8" in str(x.dtype):
        # TensorFlow pads no float8 tensor (a quantized cache's): zeros
        # are concatenated instead.
        if pad:
            zeros = ops.zeros(tuple(ops.shape(x)[:-2]) + (pad, x.shape[-1]))
            x = ops.concatenate([x, ops.cast(zeros, x.dtype)], axis=-2)
    else:
        x = ops.pad(x, [[0, 0]] * (rank - 2) + [[0, pad], [0, 0]])
    lead = tuple(ops.shape(x)[:-2])
    x = ops.reshape(x, lead + (num_blocks, size, ops.shape(x)[-1]))
    order = (rank - 2,) + tuple(range(rank - 2)) + (rank - 1, rank)
    return ops.transpose(x, order)


def from_blocks(x, length: int):
    """Inverse of `to_blocks`: `(nb, ..., size, D)` → `(..., length, D)`."""
    rank = len(x.shape)
    shape = ops.shape(x)
    order = tuple(range(1, rank - 2)) + (0, rank - 2, rank - 1)
    x = ops.transpose(x, order)
    lead = tuple(shape[1 : rank - 2])
    x = ops.reshape(x, lead + (shape[0] * shape[-2], shape[-1]))
    return x[..., :length, :]


def block_size(requested: int, length) -> int:
    """The block size along an axis of `length` (an int or a tensor)."""
    # Static lengths give static block counts (what XLA needs); a dynamic
    # length keeps the requested block size.
    return min(requested, length) if isinstance(length, int) else requested


def sequential_loop(lower, upper, body, init):
    """`ops.fori_loop` that runs one iteration at a time.

    TensorFlow's while loops run up to ten iterations concurrently in graph
    mode, which multiplies the per-block temporaries of chunked attention by
    ten (measured: ~2.3 GB more at N=4096). One iteration at a time keeps
    the peak at one block.
    """
    if keras.backend.backend() != "tensorflow":
        return ops.fori_loop(lower, upper, body, init)
    tf = _tf()

    def cond(i, carry):
        return i < upper

    def step(i, carry):
        return i + 1, body(i, carry)

    return tf.while_loop(cond, step, (lower, init), parallel_iterations=1)[1]


def sequential_map(fn, indices, shapes, dtype):
    """`ops.map` over block indices, one block at a time (see above).

    `shapes` are the static shapes of `fn`'s outputs, so that TensorFlow
    needs no extra call of `fn` to learn them (in eager mode that call
    would run a whole block).
    """
    if keras.backend.backend() != "tensorflow":
        return ops.map(fn, indices)
    tf = _tf()
    spec = tuple(tf.TensorSpec(shape, dtype) for shape in shapes)
    return tf.map_fn(
        fn, indices, fn_output_signature=spec, parallel_iterations=1
    )


def block_list(x):
    """`x` `(nb, ...)` as a list of blocks to update in the loops.

    In TensorFlow a `TensorArray`: updating one block of a tensor in a
    loop (`tensor_scatter_nd_add`) copies all of it, which cost 0.17 ms a
    pair of blocks at N = 4096 and grows with N (0.6 ms at 16384). Other
    backends keep the tensor (updated in place by XLA and by PyTorch's
    Python loops).
    """
    if keras.backend.backend() != "tensorflow":
        return x
    tf = _tf()
    return tf.TensorArray(x.dtype, size=ops.shape(x)[0]).unstack(x)


def block_stack(blocks):
    """Inverse of `block_list`."""
    if keras.backend.backend() != "tensorflow":
        return blocks
    return blocks.stack()


def add_at(x, index, update):
    """`x` with `update` added to `x[index]`; `x` from `block_list`."""
    if keras.backend.backend() == "tensorflow":
        return x.write(index, x.read(index) + update)
    if keras.backend.backend() == "torch":
        # The loops are Python loops and `x` is the backward's own
        # accumulator: add in place instead of copying all of it.
        x[index] += update
        return x
    start = (index,) + (0,) * (len(x.shape) - 1)
    return ops.slice_update(
        x, start, (ops.take(x, index, axis=0) + update)[None]
    )


def set_at(x, index, update):
    """`x` with `x[index]` replaced by `update`; `x` from `block_list`."""
    if keras.backend.backend() == "tensorflow":
        return x.write(index, update)
    if keras.backend.backend() == "torch":
        x[index] = update
        return x
    start = (index,) + (0,) * (len(x.shape) - 1)
    return ops.slice_update(x, start, update[None])


def block_softmax(s):
    """`(softmax(s), logsumexp(s))` over the last axis, one softmax kernel.

    The log-sum-exp comes from the first key's weight, `s_0 - log w_0`:
    no pass over the block beyond the softmax's own. Where some row's
    `w_0` is below `1e-30` (its logit more than 69 below the row's
    log-sum-exp, or masked), `log w_0` would lose precision or be
    infinite, and the block takes it from the largest weight instead,
    `max s - log(max w)` (at least `1 / size`): two reductions over the
    block. The first is 3-5% faster per training step at N = 4096
    (TensorFlow, paired in one process); the fused softmax kernel is
    faster than a separate subtraction and `exp`, by about 40% per block.
    """
    if s.shape[-1] == 1:
        return ops.ones_like(s), s
    weights = ops.softmax(s, axis=-1)
    first = weights[..., :1]

    def from_first():
        return s[..., :1] - ops.log(first)

    def from_largest():
        top = ops.max(s, axis=-1, keepdims=True)
        return top - ops.log(ops.max(weights, axis=-1, keepdims=True))

    return weights, ops.cond(ops.all(first > 1e-30), from_first, from_largest)


def merge_block(carry, s, values):
    """The online softmax's step: `(lse, out)` after one more key block.

    `s` are the block's (masked) logits, `values` its values; the block's
    weights are normalised on their own and merged by the two
    log-sum-exps.
    """
    weights, block_lse = block_softmax(s)
    return merge(carry, (block_lse, ops.matmul(weights, values)))


def vjp(fn, primals, cotangent_fn):
    """`fn(*primals)` and the gradients of the primals, by the backend.

    `cotangent_fn(output)` gives the cotangent of the output, computed
    from the output itself (one evaluation of `fn`). Only the loops of the
    backward pass call this: a `score_mod` is any function, so its own
    gradient comes from the backend's autodiff, block by block.
    """
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        out, pull = jax.vjp(fn, *primals)
        return pull(cotangent_fn(out))
    if backend == "torch":
        import torch

        with torch.enable_grad():
            leaves = [p.detach().requires_grad_(True) for p in primals]
            out = fn(*leaves)
        cot = cotangent_fn(out.detach())
        grads = torch.autograd.grad(out, leaves, cot, allow_unused=True)
    else:
        import tensorflow as tf

        with tf.GradientTape() as tape:
            for p in primals:
                tape.watch(p)
            out = fn(*primals)
        grads = tape.gradient(out, primals, output_gradients=cotangent_fn(out))
    return [
        ops.zeros_like(p) if g is None else g
        for g, p in zip(grads, primals, strict=True)
    ]


class Normalised:
    """The online softmax with each block normalised on its own: the
    carry is `(lse, out)`, each block through the backend's softmax kernel
    (`merge_block`). TensorFlow's and PyTorch's step: they run a block op
    by op, and their fused softmax kernel is one op where the running
    maximum is four passes over the block."""

    @staticmethod
    def start(shape, width, dtype):
        """The carry before the first key block of rows `shape` (`(...,
        rows, 1)`) and values of `width`."""
        lse = ops.full(shape, NEG, dtype=dtype)
        return lse, ops.zeros(shape[:-1] + (width,), dtype=dtype)

    merge = staticmethod(merge_block)

    @staticmethod
    def finish(carry):
        """`(lse, out)` of the carry after the last key block."""
        return carry


class Running:
    """FlashAttention's online softmax: the carry is the running maximum
    `m`, the running sum `l` of `exp(s - m)` and the output unnormalised,
    `Σ exp(s - m) v`; both rescaled by `exp(m_old - m)` when `m` grows.
    Each block is one maximum, one `exp` and one sum over the logits (no
    division over the block, no `log` per block): XLA fuses them, and the
    division is once per query at the end. JAX's step: at N = 4096, 8
    heads, blocks of 256, a block's step beside its `weights @ values`
    costs 0.57 ms against the normalised step's 1.84 ms (2 cores, shared;
    BENCHMARKS.md). A row masked so far has `m =
    NEG` and gathers `exp(0)` per masked key, which its first kept key
    rescales to 0 (`exp(NEG - m)`); a row with no kept key ends at
    `lse = NEG + log(l) = NEG` in float32 and float64.
    """

    @staticmethod
    def start(shape, width, dtype):
        top = ops.full(shape, NEG, dtype=dtype)
        total = ops.zeros(shape, dtype=dtype)
        return top, total, ops.zeros(shape[:-1] + (width,), dtype=dtype)

    @staticmethod
    def merge(carry, s, values):
        top, total, out = carry
        new_top = ops.maximum(top, ops.max(s, axis=-1, keepdims=True))
        weights = ops.exp(s - new_top)
        rescale = ops.exp(top - new_top)
        total = total * rescale + ops.sum(weights, axis=-1, keepdims=True)
        out = out * rescale + ops.matmul(weights, values)
        return new_top, total, out

    @staticmethod
    def finish(carry):
        top, total, out = carry
        return top + ops.log(total), out / total


def online_step():
    """The forward's step of the online softmax on this backend:
    `Running` on JAX, `Normalised` elsewhere (`start`, `merge`,
    `finish`)."""
    if keras.backend.backend() == "jax":
        return Running
    return Normalised


def merge(first, second):
    """Two normalised partial results `(lse, out)` over disjoint keys as
    one, weighted by their log-sum-exps (the online softmax's merge; the
    ring's across devices)."""
    (lse, out), (lse_2, out_2) = first, second
    top = ops.maximum(lse, lse_2)
    old = ops.exp(lse - top)
    new = ops.exp(lse_2 - top)
    total = old + new
    return top + ops.log(total), (out * old + out_2 * new) / total


class Visits:
    """Which key blocks each query block visits, and the reverse.

    Every pair of blocks by default. With band `limits` `(left, right)`
    (query `i` sees keys `i - left ..= i + right`, `None` for no limit on
    a side), the range of blocks that meet the band, found by arithmetic.
    Where the band is the whole mask (`whole`), the pairs of blocks inside
    it are full too, also by arithmetic: a causal call masks only the
    blocks on its diagonal. With a `BlockMask`'s `kinds` `(b, h, nq, nk)`
    instead, the non-empty blocks first in each row (`count` of them) and
    whether each is full; the limits are then not read.

    Args:
        counts: `(nq, nk)`, the number of query and key blocks.
        sizes: `(qc, kc)`, queries and keys per block.
        limits: The band's `(left, right)`. Defaults to none.
        kinds: The kinds of a `BlockMask`, or `None`.
        whole: Whether the band is all of the mask (no other mask, no
            padding), so that a pair of blocks inside it is not masked.
    """

    def __init__(
        self, counts, sizes, limits=(None, None), kinds=None, whole=False
    ):
        self.nq, self.nk = counts
        self.qc, self.kc = sizes
        self.left, self.right = limits
        self.whole = whole and limits != (None, None)
        self.kinds = kinds
        if kinds is None:
            return
        some = ops.any(ops.greater(kinds, 0), axis=(0, 1))
        every = ops.all(ops.equal(kinds, 2), axis=(0, 1))
        self.rows = self._lists(some, every, self.nk)
        self.cols = self._lists(
            ops.transpose(some), ops.transpose(every), self.nq
        )

    @staticmethod
    def _lists(some, every, length):
        positions = ops.arange(length, dtype="int32")[None]
        order = ops.argsort(ops.where(some, positions, positions + length))
        order = ops.cast(order, "int32")
        full = ops.take_along_axis(every, order, axis=1)
        return ops.sum(ops.cast(some, "int32"), axis=1), order, full

    def keys_of(self, i):
        """`(first, last, block_of(n), full_of(n))` of query block `i`:
        its `n`-th visit, `first <= n < last`, is key block `block_of(n)`,
        whole unmasked where `full_of(n)` (`None`: not known)."""
        if self.kinds is not None:
            return self._walk(self.rows, i)
        first, last = 0, self.nk
        if self.left is not None:
            first = ops.maximum(0, (i * self.qc - self.left) // self.kc)
        if self.right is not None:
            top = ((i + 1) * self.qc - 1 + self.right) // self.kc + 1
            last = ops.minimum(self.nk, top)
        if not self.whole:
            return first, last, _same, _unknown
        inside = self._inside(i, self.qc, self.kc, self.left, self.right)
        return first, last, _same, inside

    def queries_of(self, j):
        """`(first, last, block_of(n), full_of(n))` of key block `j`: the
        query blocks that see it."""
        if self.kinds is not None:
            return self._walk(self.cols, j)
        first, last = 0, self.nq
        if self.right is not None:
            first = ops.maximum(0, (j * self.kc - self.right) // self.qc)
        if self.left is not None:
            top = ((j + 1) * self.kc - 1 + self.left) // self.qc + 1
            last = ops.minimum(self.nq, top)
        if not self.whole:
            return first, last, _same, _unknown
        inside = self._inside(j, self.kc, self.qc, self.right, self.left)
        return first, last, _same, inside

    @staticmethod
    def _inside(i, size, other, before, after):
        """`full_of(n)` of block `i` (of `size`) against the blocks of
        `other` on the other axis: whether block `n` lies inside the band,
        `n`'s positions from `i`'s first minus `before` to `i`'s last plus
        `after` (a query block's keys: `before=left`, `after=right`)."""
        conditions = []
        if before is not None:
            # Block n's first position reaches back no further than the
            # band allows i's last one.
            low = (i + 1) * size - 1 - before
            conditions.append(lambda n: n * other >= low)
        if after is not None:
            # Block n's last position reaches no further than the band
            # allows i's first one.
            high = i * size + after
            conditions.append(lambda n: (n + 1) * other - 1 <= high)

        def full_of(n):
            return functools.reduce(ops.logical_and, [c(n) for c in conditions])

        return full_of

    @staticmethod
    def _walk(lists, index):
        counts, order, full = lists
        row, full_row = ops.take(order, index, 0), ops.take(full, index, 0)
        return (
            0,
            ops.take(counts, index, 0),
            lambda n: ops.take(row, n, 0),
            lambda n: ops.take(full_row, n, 0),
        )


def _same(n):
    return n


def _unknown(n):
    return None
