"""Attention in blocks, with memory linear in the sequence length.

`chunked_attention` computes what `attend` computes for a dot-product or an
additive score without ever holding the `(Tq, Tk)` weights; its masks are
`attention_masks`', those of the dense path, evaluated block by block, and
the limits of their band say which blocks to skip.
"""

import keras
from keras import ops

from keras_attention.ops import checks
from keras_attention.ops._blocks import NEG as _NEG
from keras_attention.ops._blocks import add_at as _add_at
from keras_attention.ops._blocks import block_list as _block_list
from keras_attention.ops._blocks import block_size as _block_size
from keras_attention.ops._blocks import block_stack as _block_stack
from keras_attention.ops._blocks import from_blocks as _from_blocks
from keras_attention.ops._blocks import merge_block as _merge_block
from keras_attention.ops._blocks import sequential_loop as _sequential_loop
from keras_attention.ops._blocks import sequential_map as _sequential_map
from keras_attention.ops._blocks import set_at as _set_at
from keras_attention.ops._blocks import to_blocks as _to_blocks
from keras_attention.ops.attend import logits_dtype
from keras_attention.ops.masks import AttentionMasks
from keras_attention.ops.masks import and_all
from keras_attention.ops.masks import attention_masks


def _mask_blocks(mask, batch: int, length: int, size: int):
    """A `(B, T)` padding mask (or `None`) → `(nb, B, size)`, padded False."""
    num_blocks = -(-length // size)
    valid = and_all(ops.ones((batch, length), dtype="bool"), mask)
    valid = ops.pad(valid, [[0, 0], [0, num_blocks * size - length]])
    valid = ops.reshape(valid, (batch, num_blocks, size))
    return ops.transpose(valid, (1, 0, 2))


class _Blocks:
    """Query, key and value cut into blocks; the logits of a pair of blocks.

    Query blocks are indexed by `i`, key blocks by `j`. Key blocks that lie
    wholly outside a query block's band (its future, with a causal mask)
    are skipped. Dot-product queries are scaled once, up front.
    """

    def __init__(self, tensors, scale, masks, sizes):
        q, k, v = tensors[:3]
        self.additive_v = tensors[3] if len(tensors) > 3 else None
        batch, _, self.q_len, _ = ops.shape(q)
        self.k_len = ops.shape(k)[2]
        self.qc = _block_size(sizes[0], self.q_len)
        self.kc = _block_size(sizes[1], self.k_len)
        self.nq = -(-self.q_len // self.qc)
        self.nk = -(-self.k_len // self.kc)
        self.scale, self.dtype = scale, q.dtype
        # The band of every rule of positions: its limits pick the key
        # blocks to visit, the mod itself masks inside a block.
        self.band = masks.band
        self.left, self.right = masks.limits
        if self.additive_v is None:
            q = q * ops.cast(scale, q.dtype)
        self.q = _to_blocks(q, self.qc, self.nq)
        self.k = _to_blocks(k, self.kc, self.nk)
        self.v = _to_blocks(v, self.kc, self.nk)
        # Transposed copies (O(N·D) memory), so that no product in the
        # loops transposes a block: `s = q kᵀ`, `dp = dO vᵀ`, `dkᵀ = qᵀ ds`.
        self.v_t = ops.swapaxes(self.v, -1, -2)
        if self.additive_v is None:
            self.q_t = ops.swapaxes(self.q, -1, -2)
            self.k_t = ops.swapaxes(self.k, -1, -2)
        self.q_valid = _mask_blocks(
            masks.query_mask, batch, self.q_len, self.qc
        )
        self.k_valid = _mask_blocks(masks.key_mask, batch, self.k_len, self.kc)
        # Padded query rows need no mask (their outputs are dropped and
        # their upstream gradient is zero); padded keys do. Without any
        # mask the blocks skip the masking arithmetic altogether.
        self.masked = (
            self.left is not None
            or self.right is not None
            or masks.query_mask is not None
            or masks.key_mask is not None
            or not isinstance(self.k_len, int)
            or self.k_len % self.kc != 0
        )

    def key_block(self, j):
        """What the logits need of key block j: the block (additive) or its
        transpose (dot product), taken once per block by the loops."""
        keys = self.k if self.additive_v is not None else self.k_t
        return ops.take(keys, j, axis=0)

    def logits(self, q_i, k_j, i, j):
        """Logits of query block `q_i` (index i) against `key_block(j)`,
        their mask, and the hidden `tanh` of an additive score (else
        `None`)."""
        hidden = None
        if self.additive_v is None:
            s = ops.matmul(q_i, k_j)
        else:
            hidden = ops.tanh(
                ops.expand_dims(q_i, -2) + ops.expand_dims(k_j, -3)
            )
            s = ops.sum(hidden * self.additive_v, axis=-1) * self.scale
        return s, self.mask(i, j), hidden

    def mask(self, i, j):
        """The mask of query block i against key block j, or `None`."""
        if not self.masked:
            return None
        block = AttentionMasks(
            query_mask=ops.take(self.q_valid, i, axis=0),
            key_mask=ops.take(self.k_valid, j, axis=0),
            band=self.band,
        )
        return block.dense(
            self.qc,
            self.kc,
            heads_axis=True,
            query_offset=i * self.qc,
            key_offset=j * self.kc,
        )

    def logit_grads(self, i, k_j, ds, hidden):
        """Gradients of a block's logits: `(d q_i, d k_j, d additive_v)`.

        `k_j` is key block j itself (not `key_block(j)`); `d k_j` is
        transposed, `(..., D, kc)`, for a dot product.
        """
        if self.additive_v is None:
            dq = ops.matmul(ds, k_j)
            dk_t = ops.matmul(ops.take(self.q_t, i, axis=0), ds)
            return dq, dk_t, None
        ds = ops.expand_dims(ds, -1) * self.scale
        d_hidden = ds * self.additive_v * (1.0 - ops.square(hidden))
        d_v = ops.sum(ops.reshape(ds * hidden, (-1, ops.shape(hidden)[-1])), 0)
        return ops.sum(d_hidden, axis=-2), ops.sum(d_hidden, axis=-3), d_v

    def key_range(self, i):
        """Key blocks `[first, last)` that query block `i` can see."""
        first, last = 0, self.nk
        if self.left is not None:
            first = ops.maximum(0, (i * self.qc - self.left) // self.kc)
        if self.right is not None:
            top = ((i + 1) * self.qc - 1 + self.right) // self.kc + 1
            last = ops.minimum(self.nk, top)
        return first, last

    def query_range(self, j):
        """Query blocks `[first, last)` that can see key block `j`."""
        first, last = 0, self.nq
        if self.right is not None:
            first = ops.maximum(0, (j * self.kc - self.right) // self.qc)
        if self.left is not None:
            top = ((j + 1) * self.kc - 1 + self.left) // self.qc + 1
            last = ops.minimum(self.nq, top)
        return first, last


def _forward(blocks):
    """Online softmax over key blocks: the output and log-sum-exp.

    Each key block's weights are normalised on their own (`_block_softmax`)
    and merged into the running output by the two log-sum-exps.
    """
    dtype = blocks.dtype

    def forward_block(i):
        shape = ops.shape(blocks.q)[1:-1] + (1,)
        lse = ops.full(shape, _NEG, dtype=dtype)
        out = ops.zeros(shape[:-1] + (ops.shape(blocks.v)[-1],), dtype=dtype)
        q_i = ops.take(blocks.q, i, axis=0)

        def body(j, carry):
            s, valid, _ = blocks.logits(q_i, blocks.key_block(j), i, j)
            if valid is not None:
                s = ops.where(valid, s, _NEG)
            return _merge_block(carry, s, ops.take(blocks.v, j, axis=0))

        first, last = blocks.key_range(i)
        lse, out = _sequential_loop(first, last, body, (lse, out))
        if blocks.masked:
            # A query with no unmasked key: zero context.
            out = ops.where(lse > _NEG / 2, out, ops.zeros_like(out))
        return out, lse

    rows = tuple(blocks.q.shape[1:-1])
    out_blocks, lse = _sequential_map(
        forward_block,
        ops.arange(blocks.nq),
        (rows + (blocks.v.shape[-1],), rows + (1,)),
        dtype,
    )
    return _from_blocks(out_blocks, blocks.q_len), lse


def _backward(blocks, out, lse, upstream):
    """Gradients of the inputs in one pass over the blocks.

    Each key block walks the query blocks that see it, recomputing their
    weights (one extra product of the logits, as in FlashAttention 2): its
    key and value gradients are summed in the loop, the query gradients
    are added into their blocks. A block's weights are `exp(s - lse)`
    with the forward's log-sum-exp of each query, so no block is
    normalised again.
    """
    dtype = blocks.dtype
    additive = blocks.additive_v is not None
    do_aug, v_t_aug, do_t, queries = _backward_operands(
        blocks, out, lse, upstream
    )
    dk_like = blocks.k if additive else blocks.k_t

    def key_block(j, carry):
        dq, dk, dv_t, dw = carry
        v_t = ops.take(v_t_aug, j, axis=0)
        k_j = blocks.key_block(j)
        k_j_grad = k_j
        if not additive:
            k_j_grad = ops.take(blocks.k, j, axis=0)
            k_j = ops.concatenate([k_j, ops.ones_like(k_j[..., :1, :])], -2)

        def body(i, inner):
            dq, dk_j, dv_j, dw = inner  # dv_j transposed
            q_i = ops.take(queries, i, axis=0)
            s, valid, hidden = blocks.logits(q_i, k_j, i, j)
            if additive:
                s = s - ops.take(lse, i, axis=0)
            if valid is not None:
                # Masked pairs get weight 0, also in a row with no unmasked
                # key (whose log-sum-exp is `_NEG`).
                s = ops.where(valid, s, _NEG)
            weights = ops.exp(s)
            ds = weights * ops.matmul(ops.take(do_aug, i, axis=0), v_t)
            dv_j = dv_j + ops.matmul(ops.take(do_t, i, axis=0), weights)
            dq_i, dk_part, dw_part = blocks.logit_grads(i, k_j_grad, ds, hidden)
            if additive:
                dw = dw + dw_part
            return _add_at(dq, i, dq_i), dk_j + dk_part, dv_j, dw

        start = (
            dq,
            ops.zeros(ops.shape(dk_like)[1:], dtype=dtype),
            ops.zeros(ops.shape(blocks.v_t)[1:], dtype=dtype),
            dw,
        )
        first, last = blocks.query_range(j)
        dq, dk_j, dv_j, dw = _sequential_loop(first, last, body, start)
        return dq, _set_at(dk, j, dk_j), _set_at(dv_t, j, dv_j), dw

    dw = ops.zeros(ops.shape(blocks.additive_v) if additive else (), dtype)
    start = (
        _block_list(ops.zeros_like(blocks.q)),
        _block_list(ops.zeros_like(blocks.k if additive else blocks.k_t)),
        _block_list(ops.zeros_like(blocks.v_t)),
        dw,
    )
    dq, dk, dv_t, dw = _sequential_loop(0, blocks.nk, key_block, start)
    return _backward_grads(blocks, dq, dk, dv_t, dw)


def _backward_operands(blocks, out, lse, upstream):
    """What the backward's block products read: `(dO | -delta)` blocks,
    `(vᵀ ; 1)`, `dOᵀ` blocks and the queries (`(q | -lse)` for a dot
    product)."""
    d_out = ops.cast(upstream, blocks.dtype)
    delta = ops.sum(d_out * out, axis=-1, keepdims=True)
    do_blocks = _to_blocks(d_out, blocks.qc, blocks.nq)
    # `dp - delta` as one product, with `-delta` as an extra column of dO
    # and ones as an extra row of vᵀ: one pass less over each block.
    do_aug = ops.concatenate(
        [do_blocks, -_to_blocks(delta, blocks.qc, blocks.nq)], axis=-1
    )
    v_t_aug = ops.concatenate(
        [blocks.v_t, ops.ones_like(blocks.v_t[..., :1, :])], axis=-2
    )
    do_t = ops.swapaxes(do_blocks, -1, -2)
    queries = blocks.q
    if blocks.additive_v is None:
        # The weights are `exp(s - lse)`: for a dot product `s - lse` is
        # one product, with `-lse` as an extra column of q and ones as an
        # extra row of kᵀ.
        queries = ops.concatenate([queries, -lse], axis=-1)
    return do_aug, v_t_aug, do_t, queries


def _backward_grads(blocks, dq, dk, dv_t, dw):
    """The block lists of the backward loop as the inputs' gradients."""
    additive = blocks.additive_v is not None
    dq, dk, dv_t = (_block_stack(x) for x in (dq, dk, dv_t))
    dv = ops.swapaxes(dv_t, -1, -2)
    if not additive:
        dq = dq * ops.cast(blocks.scale, blocks.dtype)
        dk = ops.swapaxes(dk, -1, -2)
    grads = (
        _from_blocks(dq, blocks.q_len),
        _from_blocks(dk, blocks.k_len),
        _from_blocks(dv, blocks.k_len),
    )
    return grads + (dw,) if additive else grads


def _check_band(band):
    if band is None:
        return None
    ok = isinstance(band, (tuple, list)) and len(band) == 2
    ok = ok and all(
        b is None or (isinstance(b, int) and not isinstance(b, bool) and b >= 0)
        for b in band
    )
    if not ok:
        raise ValueError(
            "Expected `band` to be None or a pair `(left, right)` of "
            f"non-negative integers or None. Received: band={band!r}"
        )
    return tuple(band)


def chunked_attention(
    query,
    key,
    value,
    scale: float | None = None,
    query_mask=None,
    key_mask=None,
    causal: bool = False,
    query_chunk_size: int = 512,
    key_chunk_size: int = 512,
    band=None,
    additive_v=None,
):
    """Attention in blocks, with memory linear in the length.

    Computes the same context as
    `softmax(scale · Q Kᵀ, masked) V` without ever holding the
    `(Tq, Tk)` weights: query blocks are processed one after another, and
    each walks the key blocks with an online softmax (a running maximum and
    running sum, Milakov & Gimelshein 2018; Rabe & Staats 2021; Dao et al.
    2022). The backward pass is a custom gradient that recomputes each block
    from the saved output and log-sum-exp instead of storing the weights, so
    peak memory grows linearly with the sequence length in training too, in
    every execution mode (eager or compiled). Key blocks that lie wholly
    outside a query block's band (or its future, with `causal=True`) are
    skipped.

    Any score that is a dot product of transformed inputs
    (`Score.dot_product_form`: dot, scaled dot, cosine, bilinear) is
    computed from those inputs; additive and concat scores from their
    projected inputs and vector `v` (`Score.additive_form`), with
    `additive_v`: then the logits are `scale · Σ_u v_u tanh(q_iu + k_ju)`,
    and each block holds `(query_chunk_size, key_chunk_size, units)`
    values.

    Args:
        query: `(batch_size, heads, Tq, D)`.
        key: `(batch_size, heads, Tk, D)`.
        value: `(batch_size, heads, Tk, Dv)`.
        scale: Factor on the logits. Defaults to `1 / sqrt(D)` for a dot
            product and `1` with `additive_v`.
        query_mask: Optional boolean `(batch_size, Tq)`; masked queries get
            a zero context.
        key_mask: Optional boolean `(batch_size, Tk)`; masked keys get weight
            0. A query with no unmasked key gets a zero context.
        causal: Whether query `i` only sees keys `j <= i`. Defaults to
            `False`.
        query_chunk_size: Queries per block. Defaults to `512`.
        key_chunk_size: Keys per block. Defaults to `512`.
        band: Optional pair `(left, right)` of non-negative integers (or
            `None` for no limit on that side): query `i` only sees keys
            `i - left <= j <= i + right`, the mask of
            `keras_attention.ops.band_mask`. `sliding_window_mask(w)` is
            `band=(w - 1, w - 1)`; a window of `w` keys centred on the
            query is `(w // 2, w - w // 2 - 1)`, the `w` most recent keys
            `(w - 1, 0)`. Defaults to `None`.
        additive_v: Optional vector `v` of shape `(D,)`: the logits are
            additive, `scale · Σ_u v_u tanh(q_iu + k_ju)`, of a query and
            key already projected to `D` units. Defaults to `None`, a dot
            product.

    Returns:
        The context, `(batch_size, heads, Tq, Dv)`, in the dtype of `value`.
        Half-precision inputs are computed in `float32`.

    Example:

    >>> q = np.random.rand(1, 2, 100, 8).astype("float32")  # (B, heads, T, D)
    >>> chunked = keras_attention.ops.chunked_attention(
    ...     q, q, q, causal=True, query_chunk_size=32, key_chunk_size=32
    ... )
    >>> mask = keras_attention.ops.causal_mask(100, 100)
    >>> dense, _ = keras_attention.ops.attention(q, q, q, mask=mask)
    >>> np.allclose(np.asarray(chunked), np.asarray(dense), atol=1e-5)
    True
    """
    band = _check_band(band)
    checks.chunked_inputs(query, key, value)
    out_dtype = keras.backend.standardize_dtype(value.dtype)
    dtype = logits_dtype(out_dtype)
    tensors = [query, key, value]
    if additive_v is not None:
        tensors.append(additive_v)
    tensors = [ops.cast(t, dtype) for t in tensors]
    if scale is None:
        depth = float(ops.shape(tensors[0])[-1])
        scale = 1.0 if additive_v is not None else 1.0 / depth**0.5
    sizes = checks.chunk_sizes(query_chunk_size, key_chunk_size)
    masks = attention_masks(
        query_mask=query_mask,
        key_mask=key_mask,
        use_causal_mask=causal,
        band=band,
    )

    @ops.custom_gradient
    def _attend(*tensors):
        # Nothing inside is differentiated by the framework: in TensorFlow
        # eager mode a recording tape would otherwise keep every block's
        # temporaries alive (memory quadratic in the length).
        tensors = [ops.stop_gradient(t) for t in tensors]
        blocks = _Blocks(tensors, scale, masks, sizes)
        out, lse = _forward(blocks)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return _backward(blocks, out, lse, upstream)

        return out, grad

    return ops.cast(_attend(*tensors), out_dtype)
