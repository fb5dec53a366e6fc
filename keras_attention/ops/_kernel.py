"""The one block kernel of `chunked_attention` and `flex_attention`
(private module): an online softmax over blocks and one recomputing
backward pass.

Per pair of blocks the logits come from the score's form, a dot product
(`q kᵀ`, the scale folded into `q`) or additive (`scale · Σ_u v_u
tanh(q_iu + k_ju)`); then the score mod; then the mask (the mask mod, the
padding masks, the key padding of the last block). `Visits` says which
pairs are visited: those inside a band's limits, or the non-empty blocks
of a `BlockMask` (whose full blocks are not masked).

The query is `(B, Hkv, G, Tq, D)` and the key and value `(B, Hkv, 1, Tk,
D)` (`ops/_layout.py`): the `G` query heads of a key/value head broadcast
against it in every product, and the key and value gradients are summed
over them, so no head is repeated in memory. The kernel returns the
log-sum-exp of each query beside its output, and takes the gradients of
both.
"""

from typing import NamedTuple

from keras import ops

from keras_attention.ops import _blocks
from keras_attention.ops import _eager
from keras_attention.ops._layout import index_tensors
from keras_attention.ops.logits import exp_floored
from keras_attention.ops.mask_mods import keep

_GROUP_AXIS = -3


class Spec(NamedTuple):
    """What the kernel computes, besides its tensors.

    Attributes:
        scale: Factor on the logits.
        sizes: `(queries, keys)` per block.
        additive: Whether the logits are additive; the fourth tensor is
            then the vector `v`.
        score_mod: Optional `score_mod(score, batch, head, q_idx, kv_idx)`.
        bind: `bind(tensors)` is the score mod reading those tensors (the
            last tensors of the kernel, whose gradients it returns).
        mask_mod: Optional `mask_mod(batch, head, q_idx, kv_idx)`.
        query_mask: Optional boolean `(B, Tq)`.
        key_mask: Optional boolean `(B, Tk)`.
        limits: `(left, right)` of a band whose outside blocks are skipped
            (the mask itself is the mask mod's).
        kinds: The kinds of a `BlockMask` made for every mask, or `None`.
        scales: `(key_scale, value_scale)` `(B, Hkv, 1, Tk, 1)` of
            quantized (int8, float8) keys and values, dequantized block by
            block (the forward pass only: no gradient flows into them), or
            `(None, None)`.
        band_only: Whether the band of `limits` is all of `mask_mod`, so
            that a pair of blocks inside it is not masked (with no padding
            masks: the kernel checks those).
    """

    scale: float
    sizes: tuple
    additive: bool = False
    score_mod: object = None
    bind: object = None
    mask_mod: object = None
    query_mask: object = None
    key_mask: object = None
    limits: tuple = (None, None)
    kinds: object = None
    scales: tuple = (None, None)
    band_only: bool = False


def _sum_groups(x, groups):
    """Sums the grouped query heads of a key-side gradient."""
    if groups == 1:
        return x
    return ops.sum(x, axis=_GROUP_AXIS, keepdims=True)


def _valid_blocks(mask, length, size, num_blocks, padding=True):
    """A `(B, T)` padding mask → `(nb, B, size)`, the blocks' padding
    False; `None` without a mask where there is no padding to mask (or
    `padding=False`)."""
    padded = padding and (not isinstance(length, int) or length % size)
    if mask is None and not padded:
        return None
    valid = ops.ones((1, length), dtype="bool")
    if mask is not None:
        valid = ops.logical_and(valid, ops.cast(mask, "bool"))
    valid = ops.pad(valid, [[0, 0], [0, num_blocks * size - length]])
    valid = ops.reshape(valid, (-1, num_blocks, size))
    return ops.transpose(valid, (1, 0, 2))


def _and(a, b):
    return b if a is None else ops.logical_and(a, b)


class Blocks:
    """Query, key and value in blocks; the scored, masked logits of a pair.

    Query blocks are indexed by `i`, key blocks by `j`.

    Args:
        tensors: Query `(B, Hkv, G, Tq, D)`, key and value `(B, Hkv, 1,
            Tk, D)`, then the additive vector `v` (with `spec.additive`),
            then the score mod's tensors, in the logits dtype.
        spec: The kernel's `Spec`.
    """

    def __init__(self, tensors, spec):
        q, k, v = tensors[:3]
        self.additive_v = tensors[3] if spec.additive else None
        self.mod_tensors = list(tensors[3 + int(spec.additive) :])
        self.score_mod, self.bind = spec.score_mod, spec.bind
        self.mask_mod = spec.mask_mod
        batch, kv_heads, self.groups, self.q_len, _ = ops.shape(q)
        self.k_len = ops.shape(k)[3]
        self.dims = (batch, kv_heads, self.groups)
        self.qc = _blocks.block_size(spec.sizes[0], self.q_len)
        self.kc = _blocks.block_size(spec.sizes[1], self.k_len)
        self.nq = -(-self.q_len // self.qc)
        self.nk = -(-self.k_len // self.kc)
        self.scale, self.dtype = spec.scale, q.dtype
        if not spec.additive:
            q = q * ops.cast(spec.scale, q.dtype)
        self.q = _blocks.to_blocks(q, self.qc, self.nq)
        self.k = _blocks.to_blocks(k, self.kc, self.nk)
        self.v = _blocks.to_blocks(v, self.kc, self.nk)
        self.k_scale, self.v_scale = (
            None if x is None else _blocks.to_blocks(x, self.kc, self.nk)
            for x in spec.scales
        )
        # Transposed copies (O(N·D) memory), so that no product in the
        # loops transposes a block: `s = q kᵀ`, `dp = dO vᵀ`, `dkᵀ = qᵀ ds`.
        self.v_t = ops.swapaxes(self.v, -1, -2)
        if not spec.additive:
            self.q_t = ops.swapaxes(self.q, -1, -2)
            self.k_t = ops.swapaxes(self.k, -1, -2)
        # Padded query rows need no mask (their outputs are dropped and
        # their upstream gradient is zero); padded keys do.
        self.q_valid = _valid_blocks(
            spec.query_mask, self.q_len, self.qc, self.nq, padding=False
        )
        self.k_valid = _valid_blocks(
            spec.key_mask, self.k_len, self.kc, self.nk
        )
        # Without any mask the blocks skip the masking arithmetic.
        self.masked = any(
            m is not None for m in (self.q_valid, self.k_valid, self.mask_mod)
        )
        unpadded = self.q_valid is None and self.k_valid is None
        self.plan = _blocks.Visits(
            (self.nq, self.nk),
            (self.qc, self.kc),
            spec.limits,
            spec.kinds,
            whole=spec.band_only and unpadded,
        )

    def key_block(self, j):
        """What the logits need of key block j: the block (additive) or its
        transpose (dot product), taken once per block by the loops;
        dequantized here if quantized."""
        keys = self.k if self.additive_v is not None else self.k_t
        block = ops.take(keys, j, axis=0)
        if self.k_scale is None:
            return block
        scale = ops.take(self.k_scale, j, axis=0)
        if self.additive_v is None:
            scale = ops.swapaxes(scale, -1, -2)
        return ops.cast(block, self.dtype) * scale

    def value_block(self, j):
        """Value block j, dequantized if quantized."""
        block = ops.take(self.v, j, axis=0)
        if self.v_scale is None:
            return block
        return ops.cast(block, self.dtype) * ops.take(self.v_scale, j, axis=0)

    def logits(self, q_i, k_j):
        """Logits of query block `q_i` against `key_block(j)`, and the
        hidden `tanh` of an additive score (else `None`)."""
        if self.additive_v is None:
            return ops.matmul(q_i, k_j), None
        hidden = ops.tanh(ops.expand_dims(q_i, -2) + ops.expand_dims(k_j, -3))
        return ops.sum(hidden * self.additive_v, axis=-1) * self.scale, hidden

    def indices(self, i, j):
        """The index tensors of pair `(i, j)`, the padding clipped."""
        q_pos = ops.minimum(i * self.qc + ops.arange(self.qc), self.q_len - 1)
        kv_pos = ops.minimum(j * self.kc + ops.arange(self.kc), self.k_len - 1)
        return index_tensors(*self.dims, q_pos, kv_pos)

    def score(self, s, i, j, tensors=None):
        """The score mod of the logits `s` of pair `(i, j)`."""
        if self.score_mod is None:
            return s
        mod = self.bind(self.mod_tensors if tensors is None else tensors)
        return ops.cast(mod(s, *self.indices(i, j)), self.dtype)

    def mask(self, i, j):
        """The boolean mask of pair `(i, j)` (broadcasting to its logits)."""
        mask = None
        if self.k_valid is not None:
            keys = ops.take(self.k_valid, j, axis=0)
            mask = ops.reshape(keys, (-1, 1, 1, 1, self.kc))
        if self.q_valid is not None:
            queries = ops.take(self.q_valid, i, axis=0)
            mask = _and(mask, ops.reshape(queries, (-1, 1, 1, self.qc, 1)))
        if self.mask_mod is not None:
            mask = _and(mask, keep(self.mask_mod, *self.indices(i, j)))
        return mask

    def mask_pairs(self, s, i, j, full, fill=_blocks.NEG):
        """`s` with its masked pairs at `fill` (the logits' `NEG`, the
        weights' 0); a full block is left as is."""
        if not self.masked:
            return s

        def apply():
            return ops.where(self.mask(i, j), s, ops.cast(fill, s.dtype))

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

        grads = _blocks.vjp(modded, [s_raw, *self.mod_tensors], cotangent_fn)
        return grads[0], list(grads[1:])

    def logit_grads(self, q_t_i, k_j, ds, hidden):
        """Gradients of a pair's logits: `(d q_i, d k_j, [d additive_v])`.

        `k_j` is key block j itself; `d k_j` is transposed, `(..., D,
        kc)`, for a dot product, and summed over the grouped heads.
        """
        if self.additive_v is None:
            dk_t = _sum_groups(ops.matmul(q_t_i, ds), self.groups)
            return ops.matmul(ds, k_j), dk_t, []
        ds = ops.expand_dims(ds, -1) * self.scale
        d_hidden = ds * self.additive_v * (1.0 - ops.square(hidden))
        d_v = ops.sum(ops.reshape(ds * hidden, (-1, ops.shape(hidden)[-1])), 0)
        dk = _sum_groups(ops.sum(d_hidden, axis=-3), self.groups)
        return ops.sum(d_hidden, axis=-2), dk, [d_v]


def forward(blocks):
    """Online softmax over the visited key blocks: the output blocks and
    the log-sum-exp of each query.

    Each key block is merged into the running output by
    `_blocks.online_step()`: its weights normalised on their own and
    merged by two log-sum-exps (TensorFlow, PyTorch), or FlashAttention's
    running maximum, sum and unnormalised output (JAX).
    """
    dtype = blocks.dtype
    step = _blocks.online_step()

    def forward_block(i):
        shape = ops.shape(blocks.q)[1:-1] + (1,)
        width = ops.shape(blocks.v)[-1]
        q_i = ops.take(blocks.q, i, axis=0)
        first, last, block_of, full_of = blocks.plan.keys_of(i)

        def body(n, carry):
            j = block_of(n)
            s, _ = blocks.logits(q_i, blocks.key_block(j))
            s = blocks.mask_pairs(blocks.score(s, i, j), i, j, full_of(n))
            return step.merge(carry, s, blocks.value_block(j))

        start = step.start(shape, width, dtype)
        carry = _blocks.sequential_loop(first, last, body, start)
        lse, out = step.finish(carry)
        if blocks.masked:
            # A query with no unmasked key: zero context.
            out = ops.where(lse > _blocks.NEG / 2, out, ops.zeros_like(out))
        return out, lse

    rows = tuple(blocks.q.shape[1:-1])
    return _blocks.sequential_map(
        forward_block,
        ops.arange(blocks.nq),
        (rows + (blocks.v.shape[-1],), rows + (1,)),
        dtype,
    )


class _Operands:
    """What the backward's block products read, made once.

    `(dO | -delta)` blocks against `(vᵀ ; 1)`: `dp - delta` as one
    product, one pass less over each block. For a dot product without a
    score mod, `(q | -lse)` against `(kᵀ ; 1)`: the weights' `s - lse` as
    one product too (`folded`).
    """

    def __init__(self, blocks, out_blocks, lse, upstream):
        d_out, d_lse = (
            _blocks.to_blocks(ops.cast(u, blocks.dtype), blocks.qc, blocks.nq)
            for u in upstream
        )
        # The gradient of the log-sum-exp joins the softmax's row term:
        # `d s = w (dp - delta + d_lse)`.
        delta = ops.sum(d_out * out_blocks, axis=-1, keepdims=True) - d_lse
        self.do_aug = ops.concatenate([d_out, -delta], axis=-1)
        v_t = blocks.v_t
        ones = ops.ones_like(v_t[..., :1, :])
        self.v_t_aug = ops.concatenate([v_t, ones], axis=-2)
        self.do_t = ops.swapaxes(d_out, -1, -2)
        self.lse = lse
        self.folded = blocks.additive_v is None and blocks.score_mod is None
        self.queries = blocks.q
        if self.folded:
            self.queries = ops.concatenate([blocks.q, -lse], axis=-1)

    def key_side(self, blocks, j):
        """`(k_j for the logits, k_j for its gradient, (vᵀ ; 1)_j)`."""
        k_j = blocks.key_block(j)
        k_grad = k_j
        if blocks.additive_v is None:
            k_grad = ops.take(blocks.k, j, axis=0)
        if self.folded:
            k_j = ops.concatenate([k_j, ops.ones_like(k_j[..., :1, :])], -2)
        return k_j, k_grad, ops.take(self.v_t_aug, j, axis=0)


def _pair_grads(blocks, operands, key_side, i, j, full):
    """`(d q_i, d k_j, d vᵀ_j, [d additive_v] + d mod tensors)` of a pair.

    Its weights are recomputed as `exp(s - lse)` with the forward's
    log-sum-exp of each query, so no block is normalised again.
    """
    k_j, k_grad, v_t = key_side
    s, hidden = blocks.logits(ops.take(operands.queries, i, axis=0), k_j)
    do_i = ops.take(operands.do_aug, i, axis=0)
    saved = {}

    def d_logits(s_mod):
        if not operands.folded:
            s_mod = s_mod - ops.take(operands.lse, i, axis=0)
        # Masked pairs get weight 0, also in a row with no unmasked key
        # (whose log-sum-exp is `NEG`): the weights are masked, not the
        # logits, as `exp_floored` floors what it is given.
        weights = blocks.mask_pairs(exp_floored(s_mod), i, j, full, 0.0)
        saved["weights"] = weights
        return weights * ops.matmul(do_i, v_t)

    ds, d_tensors = blocks.score_grads(s, i, j, d_logits)
    dv_t = ops.matmul(ops.take(operands.do_t, i, axis=0), saved["weights"])
    q_t_i = None
    if blocks.additive_v is None:
        q_t_i = ops.take(blocks.q_t, i, axis=0)
    dq, dk, d_v = blocks.logit_grads(q_t_i, k_grad, ds, hidden)
    return dq, dk, _sum_groups(dv_t, blocks.groups), d_v + d_tensors


def backward(blocks, out_blocks, lse, upstream):
    """Gradients of every tensor of the kernel in one pass over the blocks.

    `upstream` is `(d_out, d_lse)`: the gradients of the output `(B, Hkv,
    G, Tq, Dv)` and of the log-sum-exp `(B, Hkv, G, Tq, 1)`.

    Each key block walks the query blocks that see it, recomputing their
    weights (one extra product of the logits, as in FlashAttention 2): its
    key and value gradients are summed in the loop, the query gradients
    added into their blocks.
    """
    operands = _Operands(blocks, out_blocks, lse, upstream)
    dk_like = blocks.k if blocks.additive_v is not None else blocks.k_t

    def key_block(j, carry):
        dq, dk, dv_t, extra = carry
        first, last, block_of, full_of = blocks.plan.queries_of(j)
        key_side = operands.key_side(blocks, j)

        def body(n, inner):
            dq, dk_j, dv_j, extra = inner
            i = block_of(n)
            parts = _pair_grads(blocks, operands, key_side, i, j, full_of(n))
            extra = [a + b for a, b in zip(extra, parts[3], strict=True)]
            dq = _blocks.add_at(dq, i, parts[0])
            return dq, dk_j + parts[1], dv_j + parts[2], extra

        start = (
            dq,
            ops.zeros(ops.shape(dk_like)[1:], dtype=blocks.dtype),
            ops.zeros(ops.shape(blocks.v_t)[1:], dtype=blocks.dtype),
            extra,
        )
        dq, dk_j, dv_j, extra = _blocks.sequential_loop(
            first, last, body, start
        )
        return (
            dq,
            _blocks.set_at(dk, j, dk_j),
            _blocks.set_at(dv_t, j, dv_j),
            extra,
        )

    extra = [] if blocks.additive_v is None else [blocks.additive_v]
    start = (
        _blocks.block_list(ops.zeros_like(blocks.q)),
        _blocks.block_list(ops.zeros_like(dk_like)),
        _blocks.block_list(ops.zeros_like(blocks.v_t)),
        [ops.zeros_like(t) for t in extra + blocks.mod_tensors],
    )
    dq, dk, dv_t, extra = _blocks.sequential_loop(
        0, blocks.nk, key_block, start
    )
    return _gradients(blocks, dq, dk, dv_t) + tuple(extra)


def _gradients(blocks, dq, dk, dv_t):
    """The block lists of the backward loop as the gradients of the query,
    key and value."""
    dq, dk, dv_t = (_blocks.block_stack(x) for x in (dq, dk, dv_t))
    dv = ops.swapaxes(dv_t, -1, -2)
    if blocks.additive_v is None:
        dq = dq * ops.cast(blocks.scale, blocks.dtype)
        dk = ops.swapaxes(dk, -1, -2)
    return (
        _blocks.from_blocks(dq, blocks.q_len),
        _blocks.from_blocks(dk, blocks.k_len),
        _blocks.from_blocks(dv, blocks.k_len),
    )


def attend(tensors, spec):
    """The kernel's output `(B, Hkv, G, Tq, Dv)` and log-sum-exp `(B, Hkv,
    G, Tq, 1)` (`NEG` where a query keeps no key) for `tensors` (see
    `Blocks`), with the backward pass as the gradient of every tensor,
    through both. An eager JAX call is compiled once per configuration
    (`ops/_eager.py`)."""
    return _eager.compiled_once(_attend, tensors, spec)


def _attend(tensors, spec):

    @ops.custom_gradient
    def run(*tensors):
        # Nothing inside is differentiated by the framework: in TensorFlow
        # eager mode a recording tape would otherwise keep every block's
        # temporaries alive (memory quadratic in the length).
        tensors = [ops.stop_gradient(t) for t in tensors]
        blocks = Blocks(tensors, spec)
        out_blocks, lse = forward(blocks)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            split = (upstream[..., :-1], upstream[..., -1:])
            return backward(blocks, out_blocks, lse, split)

        # One output (Keras's custom gradient takes one on every backend):
        # the log-sum-exp rides as the last column of the output.
        packed = ops.concatenate([out_blocks, lse], axis=-1)
        return _blocks.from_blocks(packed, blocks.q_len), grad

    if spec.scales[0] is not None:
        # Quantized keys and values: the forward pass alone.
        blocks = Blocks([ops.stop_gradient(t) for t in tensors], spec)
        out_blocks, lse = forward(blocks)
        packed = ops.concatenate([out_blocks, lse], axis=-1)
        packed = _blocks.from_blocks(packed, blocks.q_len)
    else:
        packed = run(*tensors)
    return packed[..., :-1], packed[..., -1:]
