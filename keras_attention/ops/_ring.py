"""The ring of ring attention (private module; JAX only).

Each device of the sequence axis holds one block of queries and, at
first, the key/value block at the same positions. At each of the `P`
steps it attends its queries to the key/value block it holds with the
one block kernel (`ops/_kernel.py`: an online softmax over smaller
blocks, memory linear in the block), merges the result into its running
output by the two log-sum-exps, and passes the key/value block on to the
next device (`jax.lax.ppermute`), so that after `P` steps every query has
seen every key (Liu et al., 2023, "Ring Attention with Blockwise
Transformers"). The backward pass is a second ring: the key/value blocks
go round again with their gradients, which each device adds to as they
pass, and one more step brings them home. Nothing of `(T, T)` is held,
and per device nothing of `T` beyond its own block and the one passing.

A pair of blocks that a band (causal, a window) or the documents empty
is skipped (`jax.lax.switch`); one that the band keeps whole runs without
the band's mask.
"""

from typing import NamedTuple

from keras import ops

from keras_attention.ops import _blocks
from keras_attention.ops import _kernel
from keras_attention.ops.mask_mods import and_masks
from keras_attention.ops.mods import Document
from keras_attention.ops.mods import shifted

EMPTY, PARTIAL, FULL = 0, 1, 2


class Config(NamedTuple):
    """What the ring computes, besides its tensors.

    Attributes:
        axis: The mesh axis of the sequence.
        size: Its number of devices.
        scale: Factor on the logits.
        sizes: `(queries, keys)` per block of the kernel.
        lengths: `(queries, keys)` per device.
        band: A mask mod with `limits` (causal, a window), or `None`.
        mask_mods: Further mask mods of positions only.
        score_mod: A score mod of positions only, or `None`.
    """

    axis: str
    size: int
    scale: float
    sizes: tuple
    lengths: tuple
    band: object = None
    mask_mods: tuple = ()
    score_mod: object = None


def pair_kind(limits, queries, keys):
    """`EMPTY`, `PARTIAL` or `FULL`: what a band leaves of a pair of blocks.

    `limits` is the band's `(left, right)` (query `i` sees keys `i - left
    ..= i + right`, `None` open); `queries` and `keys` are each `(first
    position, count)`, the positions integers or scalar tensors.
    """
    (q0, nq), (k0, nk) = queries, keys
    left, right = limits
    empty = full = False
    if left is not None:
        # The last key is before the first query's window; or every key
        # is inside the last query's window.
        empty = ops.logical_or(empty, k0 + nk - 1 < q0 - left)
        full_left = k0 >= q0 + nq - 1 - left
    else:
        full_left = True
    if right is not None:
        empty = ops.logical_or(empty, k0 > q0 + nq - 1 + right)
        full_right = k0 + nk - 1 <= q0 + right
    else:
        full_right = True
    full = ops.logical_and(full_left, full_right)
    kind = ops.where(full, FULL, PARTIAL)
    return ops.cast(ops.where(empty, EMPTY, kind), "int32")


def _segments_meet(q_ids, k_ids):
    """Whether some row of the batch has a document in both blocks: their
    ranges of ids overlap (ids equal only inside a shared range)."""
    low = ops.maximum(ops.min(q_ids, axis=1), ops.min(k_ids, axis=1))
    high = ops.minimum(ops.max(q_ids, axis=1), ops.max(k_ids, axis=1))
    return ops.any(low <= high)


class _Step:
    """One pair of blocks: this device's queries against the key/value
    block it holds, from device `src`."""

    def __init__(self, config, index, src, extras, kv_extras):
        self.config = config
        nq, nk = config.lengths
        self.q0, self.k0 = index * nq, src * nk
        self.extras, self.kv_extras = extras, kv_extras

    def kind(self):
        config = self.config
        kind = ops.convert_to_tensor(FULL, "int32")
        if config.band is not None:
            nq, nk = config.lengths
            kind = pair_kind(config.band.limits, (self.q0, nq), (self.k0, nk))
        q_ids = self.extras.get("segment_ids")
        if q_ids is not None:
            meet = _segments_meet(q_ids, self.kv_extras["segment_ids"])
            kind = ops.where(meet, kind, EMPTY)
        return kind

    def blocks(self, q, k, v, band):
        """The kernel's `Blocks` of the pair, with the band's mask and
        limits where `band` (a partial pair), without them otherwise."""
        config = self.config
        mods = [shifted(m, self.q0, self.k0) for m in config.mask_mods]
        limits = (None, None)
        if band and config.band is not None:
            mods.append(shifted(config.band, self.q0, self.k0))
            offset = self.q0 - self.k0
            left, right = config.band.limits
            limits = (
                None if left is None else left - offset,
                None if right is None else right + offset,
            )
        q_ids = self.extras.get("segment_ids")
        if q_ids is not None:
            mods.append(Document(q_ids, self.kv_extras["segment_ids"]))
        score_mod = None
        if config.score_mod is not None:
            score_mod = shifted(config.score_mod, self.q0, self.k0)
        spec = _kernel.Spec(
            scale=config.scale,
            sizes=config.sizes,
            score_mod=score_mod,
            bind=lambda _: score_mod,
            mask_mod=and_masks(*mods) if mods else None,
            query_mask=self.extras.get("query_mask"),
            key_mask=self.kv_extras.get("key_mask"),
            limits=limits,
        )
        return _kernel.Blocks([q, k, v], spec)


def _empty_forward(q, v, config):
    """The output blocks and log-sum-exp of a skipped pair."""
    qc = _blocks.block_size(config.sizes[0], config.lengths[0])
    nb = -(-config.lengths[0] // qc)
    rows = (nb,) + tuple(q.shape[:3]) + (qc,)
    out = ops.zeros(rows + (v.shape[-1],), dtype=q.dtype)
    return out, ops.full(rows + (1,), _blocks.NEG, dtype=q.dtype)


def _merge(carry, part):
    """`_blocks.merge` of two `(out, lse)`, the kernel's order."""
    lse, out = _blocks.merge(carry[::-1], part[::-1])
    return out, lse


def _switch(kind, branches):
    import jax

    return jax.lax.switch(kind, branches)


def _pass_on(config, tensors):
    """Every tensor to the next device of the ring."""
    import jax

    perm = [(i, (i + 1) % config.size) for i in range(config.size)]
    return jax.tree_util.tree_map(
        lambda t: jax.lax.ppermute(t, config.axis, perm), tensors
    )


def _source(config, index, step):
    return (index - step) % config.size


def forward(config, q, k, v, extras, kv_extras):
    """This device's output blocks and log-sum-exp after the whole ring."""
    import jax

    index = jax.lax.axis_index(config.axis)

    def attend(step, k, v, kv_extras):
        pair = _Step(
            config, index, _source(config, index, step), extras, kv_extras
        )

        def run(band):
            return lambda: _kernel.forward(pair.blocks(q, k, v, band))

        branches = [lambda: _empty_forward(q, v, config), run(True), run(False)]
        return _switch(pair.kind(), branches)

    def body(step, carry):
        out, lse, k, v, kv_extras = carry
        out, lse = _merge((out, lse), attend(step, k, v, kv_extras))
        k, v, kv_extras = _pass_on(config, (k, v, kv_extras))
        return out, lse, k, v, kv_extras

    out, lse = _empty_forward(q, v, config)
    carry = (out, lse, k, v, kv_extras)
    out, lse, k, v, kv_extras = jax.lax.fori_loop(
        0, config.size - 1, body, carry
    )
    return _merge((out, lse), attend(config.size - 1, k, v, kv_extras))


def backward(config, residuals, upstream):
    """The gradients of `q`, `k`, `v` on this device: the second ring.
    `upstream` is `(d_out, d_lse)`, those of this device's queries."""
    import jax

    q, k, v, extras, kv_extras, out_blocks, lse = residuals
    index = jax.lax.axis_index(config.axis)
    zeros = (ops.zeros_like(q), ops.zeros_like(k), ops.zeros_like(v))

    def body(step, carry):
        dq, dk, dv, k, v, kv_extras = carry
        pair = _Step(
            config, index, _source(config, index, step), extras, kv_extras
        )

        def run(band):
            def grads():
                blocks = pair.blocks(q, k, v, band)
                return _kernel.backward(blocks, out_blocks, lse, upstream)[:3]

            return grads

        parts = _switch(pair.kind(), [lambda: zeros, run(True), run(False)])
        dq, dk, dv = dq + parts[0], dk + parts[1], dv + parts[2]
        # The key/value gradients travel with their blocks; after the last
        # step one more pass brings them to the device that owns them.
        return (dq, *_pass_on(config, (dk, dv, k, v, kv_extras)))

    carry = (*zeros, k, v, kv_extras)
    dq, dk, dv, _, _, _ = jax.lax.fori_loop(0, config.size, body, carry)
    return dq, dk, dv


def attend(config, q, k, v, extras, kv_extras):
    """The ring's output `(B, Hkv, G, n, Dv)` and log-sum-exp `(B, Hkv, G,
    n, 1)` on this device, with the backward ring as their gradient
    (`jax.custom_vjp`)."""
    import jax

    def unblocked(out, lse):
        n = config.lengths[0]
        return _blocks.from_blocks(out, n), _blocks.from_blocks(lse, n)

    @jax.custom_vjp
    def ring(q, k, v, extras, kv_extras):
        return unblocked(*forward(config, q, k, v, extras, kv_extras))

    def ring_fwd(q, k, v, extras, kv_extras):
        out, lse = forward(config, q, k, v, extras, kv_extras)
        residuals = (q, k, v, extras, kv_extras, out, lse)
        return unblocked(out, lse), residuals

    def ring_bwd(residuals, upstream):
        dq, dk, dv = backward(config, residuals, upstream)
        return dq, dk, dv, None, None

    ring.defvjp(ring_fwd, ring_bwd)
    return ring(q, k, v, extras, kv_extras)
