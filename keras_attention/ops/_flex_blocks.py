"""`flex_attention` in blocks (private module): `chunked_attention`'s
online softmax and recomputing backward pass, with a `score_mod`, a
`mask_mod`, a block plan that skips empty blocks, and grouped heads.

Inside, the query is `(B, Hkv, G, Tq, D)` and the key and value
`(B, Hkv, 1, Tk, D)`: the `G` query heads of a key/value head broadcast
against it in every product, and the key and value gradients are summed
over them, so no head is repeated in memory.
"""

import keras
from keras import ops

from keras_attention.ops import _blocks

_GROUP_AXIS = -3


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


def index_tensors(batch, kv_heads, groups, q_pos, kv_pos):
    """`(batch, head, q_idx, kv_idx)` broadcasting to `(B, Hkv, G, Tq, Tk)`.

    Head `h` of the query is `kv_head · groups + g`: grouped query heads
    share their key/value head, as in `keras.ops.dot_product_attention`.
    """
    b = ops.reshape(ops.arange(batch, dtype="int32"), (-1, 1, 1, 1, 1))
    h = ops.arange(kv_heads * groups, dtype="int32")
    h = ops.reshape(h, (1, kv_heads, groups, 1, 1))
    q = ops.reshape(ops.cast(q_pos, "int32"), (1, 1, 1, -1, 1))
    kv = ops.reshape(ops.cast(kv_pos, "int32"), (1, 1, 1, 1, -1))
    return b, h, q, kv


def _sum_groups(x, groups):
    """Sums the grouped query heads of a key-side gradient."""
    if groups == 1:
        return x
    return ops.sum(x, axis=_GROUP_AXIS, keepdims=True)


class _Plan:
    """Which key blocks each query block visits, and the reverse.

    Without a `BlockMask` every pair of blocks; with one, the non-empty
    blocks first in each row (`count` of them) and whether each is full.
    """

    def __init__(self, kinds, nq, nk):
        self.nq, self.nk = nq, nk
        self.kinds = kinds
        if kinds is None:
            return
        some = ops.any(ops.greater(kinds, 0), axis=(0, 1))
        every = ops.all(ops.equal(kinds, 2), axis=(0, 1))
        self.rows = self._lists(some, every, nk)
        self.cols = self._lists(ops.transpose(some), ops.transpose(every), nq)

    @staticmethod
    def _lists(some, every, length):
        positions = ops.arange(length, dtype="int32")[None]
        order = ops.argsort(ops.where(some, positions, positions + length))
        order = ops.cast(order, "int32")
        full = ops.take_along_axis(every, order, axis=1)
        return ops.sum(ops.cast(some, "int32"), axis=1), order, full

    def keys_of(self, i):
        """`(count, block_of(n), full_of(n))` of query block `i`."""
        lists = self.rows if self.kinds is not None else None
        return self._walk(lists, i, self.nk)

    def queries_of(self, j):
        """`(count, block_of(n), full_of(n))` of key block `j`."""
        lists = self.cols if self.kinds is not None else None
        return self._walk(lists, j, self.nq)

    def _walk(self, lists, index, total):
        if lists is None:
            return total, (lambda n: n), (lambda n: None)
        counts, order, full = lists
        row, full_row = ops.take(order, index, 0), ops.take(full, index, 0)
        return (
            ops.take(counts, index, 0),
            lambda n: ops.take(row, n, 0),
            lambda n: ops.take(full_row, n, 0),
        )


class FlexBlocks:
    """Query, key and value in blocks; the modded, masked logits of a pair.

    Args:
        tensors: Query `(B, Tq, H, D)`, key and value `(B, Tk, Hkv, D)`,
            then the tensors of the score mod, in the logits dtype.
        mods: `(score_mod, bind, mask_mod)`: `bind(tensors)` is the score
            mod reading those tensors.
        scale: Factor on the logits.
        sizes: `(queries, keys)` per block.
        kinds: The `BlockMask`'s kinds, or `None`.
    """

    def __init__(self, tensors, mods, scale, sizes, kinds):
        q, k, v = tensors[:3]
        self.mod_tensors = list(tensors[3:])
        self.score_mod, self.bind, self.mask_mod = mods
        batch, self.q_len, heads, depth = ops.shape(q)
        self.k_len, kv_heads = ops.shape(k)[1], ops.shape(k)[2]
        self.groups = heads // kv_heads
        self.dims = (batch, kv_heads, self.groups)
        self.qc = _blocks.block_size(sizes[0], self.q_len)
        self.kc = _blocks.block_size(sizes[1], self.k_len)
        self.nq = -(-self.q_len // self.qc)
        self.nk = -(-self.k_len // self.kc)
        self.scale, self.dtype = scale, q.dtype
        q = ops.reshape(
            q * scale, (-1, self.q_len, kv_heads, self.groups, depth)
        )
        q = ops.transpose(q, (0, 2, 3, 1, 4))
        k, v = (ops.transpose(t, (0, 2, 1, 3))[:, :, None] for t in (k, v))
        self.q = _blocks.to_blocks(q, self.qc, self.nq)
        self.k = _blocks.to_blocks(k, self.kc, self.nk)
        self.v = _blocks.to_blocks(v, self.kc, self.nk)
        self.q_t, self.k_t, self.v_t = (
            ops.swapaxes(t, -1, -2) for t in (self.q, self.k, self.v)
        )
        padded = not isinstance(self.k_len, int) or self.k_len % self.kc
        self.masked = bool(padded) or self.mask_mod is not None
        self.plan = _Plan(kinds, self.nq, self.nk)
        if kinds is not None:
            self.masked = True

    def indices(self, i, j):
        """The index tensors of pair `(i, j)`, padding clipped, and whether
        each key exists."""
        q_pos = ops.minimum(i * self.qc + ops.arange(self.qc), self.q_len - 1)
        kv_pos = j * self.kc + ops.arange(self.kc)
        exists = ops.less(kv_pos, self.k_len)
        kv_pos = ops.minimum(kv_pos, self.k_len - 1)
        return index_tensors(*self.dims, q_pos, kv_pos), exists

    def score(self, s, i, j, tensors=None):
        """The score mod of the logits `s` of pair `(i, j)`."""
        if self.score_mod is None:
            return s
        mod = self.bind(self.mod_tensors if tensors is None else tensors)
        out = mod(s, *self.indices(i, j)[0])
        return ops.cast(out, self.dtype)

    def masked_logits(self, s, i, j, full):
        """`s` with its masked pairs at `NEG`; a full block is left as is."""
        if not self.masked:
            return s

        def apply():
            idx, exists = self.indices(i, j)
            keep = ops.reshape(exists, (1, 1, 1, 1, -1))
            if self.mask_mod is not None:
                kept = ops.cast(self.mask_mod(*idx), "bool")
                keep = ops.logical_and(keep, kept)
            return ops.where(keep, s, _blocks.NEG)

        if full is None:
            return apply()
        return ops.cond(full, lambda: s, apply)

    def score_grads(self, s_raw, i, j, cotangent_fn):
        """`(d s_raw, d mod tensors)` of a pair, `cotangent_fn(s_mod)`
        giving the gradient of the modded logits."""
        if self.score_mod is None:
            return cotangent_fn(s_raw), []

        def modded(s, *tensors):
            return self.score(s, i, j, list(tensors))

        grads = vjp(modded, [s_raw, *self.mod_tensors], cotangent_fn)
        return grads[0], list(grads[1:])


def forward(blocks):
    """Online softmax over the visited key blocks: output and log-sum-exp."""
    dtype = blocks.dtype

    def forward_block(i):
        shape = ops.shape(blocks.q)[1:-1] + (1,)
        lse = ops.full(shape, _blocks.NEG, dtype=dtype)
        out = ops.zeros(shape[:-1] + (ops.shape(blocks.v)[-1],), dtype=dtype)
        q_i = ops.take(blocks.q, i, axis=0)
        count, block_of, full_of = blocks.plan.keys_of(i)

        def body(n, carry):
            j = block_of(n)
            s = ops.matmul(q_i, ops.take(blocks.k_t, j, axis=0))
            s = blocks.masked_logits(blocks.score(s, i, j), i, j, full_of(n))
            return _blocks.merge_block(carry, s, ops.take(blocks.v, j, axis=0))

        lse, out = _blocks.sequential_loop(0, count, body, (lse, out))
        if blocks.masked:
            # A query with no unmasked key: zero context.
            out = ops.where(lse > _blocks.NEG / 2, out, ops.zeros_like(out))
        return out, lse

    rows = tuple(blocks.q.shape[1:-1])
    out_blocks, lse = _blocks.sequential_map(
        forward_block,
        ops.arange(blocks.nq),
        (rows + (blocks.v.shape[-1],), rows + (1,)),
        dtype,
    )
    return out_blocks, lse


def _pair_grads(blocks, i, j, full, do_i, delta_i, lse_i):
    """`(d q_i, d kᵀ_j, d vᵀ_j, d mod tensors)` of one pair of blocks."""
    s_raw = ops.matmul(
        ops.take(blocks.q, i, axis=0), ops.take(blocks.k_t, j, axis=0)
    )
    saved = {}

    def d_logits(s):
        # Masked pairs get weight 0, also in a row with no unmasked key
        # (whose log-sum-exp is `NEG`).
        weights = ops.exp(blocks.masked_logits(s - lse_i, i, j, full))
        v_t = ops.take(blocks.v_t, j, axis=0)
        saved["weights"] = weights
        return weights * (ops.matmul(do_i, v_t) - delta_i)

    ds, d_tensors = blocks.score_grads(s_raw, i, j, d_logits)
    dv_t = ops.matmul(ops.swapaxes(do_i, -1, -2), saved["weights"])
    dq = ops.matmul(ds, ops.take(blocks.k, j, axis=0))
    dk_t = ops.matmul(ops.take(blocks.q_t, i, axis=0), ds)
    groups = blocks.groups
    return dq, _sum_groups(dk_t, groups), _sum_groups(dv_t, groups), d_tensors


def backward(blocks, out_blocks, lse, upstream):
    """Gradients of query, key, value and mod tensors, one pass over the
    blocks: each key block walks the query blocks that see it."""
    do = ops.cast(upstream, blocks.dtype)
    delta = ops.sum(do * out_blocks, axis=-1, keepdims=True)

    def key_block(j, carry):
        dq, dk, dv, dt = carry
        count, block_of, full_of = blocks.plan.queries_of(j)

        def body(n, inner):
            dq, dk_j, dv_j, dt = inner
            i = block_of(n)
            parts = _pair_grads(
                blocks,
                i,
                j,
                full_of(n),
                ops.take(do, i, axis=0),
                ops.take(delta, i, axis=0),
                ops.take(lse, i, axis=0),
            )
            dt = [a + b for a, b in zip(dt, parts[3], strict=True)]
            dq = _blocks.add_at(dq, i, parts[0])
            return dq, dk_j + parts[1], dv_j + parts[2], dt

        start = (
            dq,
            ops.zeros(ops.shape(blocks.k_t)[1:], blocks.dtype),
            ops.zeros(ops.shape(blocks.v_t)[1:], blocks.dtype),
            dt,
        )
        dq, dk_j, dv_j, dt = _blocks.sequential_loop(0, count, body, start)
        dk = _blocks.set_at(dk, j, dk_j)
        return dq, dk, _blocks.set_at(dv, j, dv_j), dt

    start = (
        _blocks.block_list(ops.zeros_like(blocks.q)),
        _blocks.block_list(ops.zeros_like(blocks.k_t)),
        _blocks.block_list(ops.zeros_like(blocks.v_t)),
        [ops.zeros_like(t) for t in blocks.mod_tensors],
    )
    dq, dk, dv, dt = _blocks.sequential_loop(0, blocks.nk, key_block, start)
    dq, dk, dv = (_blocks.block_stack(x) for x in (dq, dk, dv))
    dk, dv = (ops.swapaxes(x, -1, -2) for x in (dk, dv))
    return to_heads(blocks, dq * blocks.scale, blocks.q_len), (
        ops.transpose(
            _blocks.from_blocks(dk, blocks.k_len)[:, :, 0], (0, 2, 1, 3)
        ),
        ops.transpose(
            _blocks.from_blocks(dv, blocks.k_len)[:, :, 0], (0, 2, 1, 3)
        ),
        dt,
    )


def to_heads(blocks, x, length):
    """Query-side blocks `(nq, B, Hkv, G, qc, D)` → `(B, T, H, D)`."""
    x = _blocks.from_blocks(x, length)
    x = ops.transpose(x, (0, 3, 1, 2, 4))
    shape = ops.shape(x)
    return ops.reshape(x, (-1, length, shape[2] * shape[3], shape[4]))


def from_heads(blocks, x):
    """`(B, T, H, D)` → query-side blocks `(nq, B, Hkv, G, qc, D)`."""
    _, kv_heads, groups = blocks.dims
    x = ops.cast(x, blocks.dtype)
    x = ops.reshape(x, (-1, blocks.q_len, kv_heads, groups, ops.shape(x)[-1]))
    x = ops.transpose(x, (0, 2, 3, 1, 4))
    return _blocks.to_blocks(x, blocks.qc, blocks.nq)
