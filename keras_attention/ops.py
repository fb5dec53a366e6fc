"""Backend-agnostic attention math written with `keras.ops`.

Layers call these functions; they hold no state and create no variables, so
they can be used on their own, inside a custom layer or in a `keras.ops`
graph on any backend (TensorFlow, JAX, PyTorch).

Masks are boolean with `True` meaning "attend". A row of logits whose keys
are all masked gets all-zero weights (never NaN, never uniform).
"""

from collections.abc import Callable

import keras
from keras import ops

_HALF_DTYPES = ("float16", "bfloat16")


def logits_dtype(dtype) -> str:
    """The dtype softmax is computed in: `float32` for half precision."""
    dtype = keras.backend.standardize_dtype(dtype)
    return "float32" if dtype in _HALF_DTYPES else dtype


def _to_standard_dtype(dtype) -> str:
    return keras.backend.standardize_dtype(dtype)


def masked_softmax(logits, mask=None, axis: int = -1):
    """Softmax over `axis` that ignores masked positions.

    Half-precision logits are promoted to `float32` before the softmax and the
    weights are cast back, so large logits under mixed precision neither
    overflow nor lose the winner. Positions where `mask` is `False` get weight
    exactly `0`; a slice whose positions are all masked gets all-zero weights.

    Args:
        logits: Float tensor of any rank.
        mask: Optional boolean tensor broadcastable to `logits`; `True`
            keeps a position.
        axis: Axis to normalise over. Defaults to `-1`.

    Returns:
        Weights with the shape and dtype of `logits`.
    """
    logits = ops.convert_to_tensor(logits)
    in_dtype = _to_standard_dtype(logits.dtype)
    x = ops.cast(logits, logits_dtype(in_dtype))
    if mask is not None:
        mask = ops.broadcast_to(ops.cast(mask, "bool"), ops.shape(x))
        # The fill value only has to lose to every unmasked logit: masked
        # positions are zeroed again after `exp`, which is what makes an
        # all-masked slice come out as zeros instead of a uniform one.
        x = ops.where(mask, x, ops.full_like(x, -1e30))
    x = x - ops.stop_gradient(ops.max(x, axis=axis, keepdims=True))
    # Written out rather than `ops.softmax`, which warns on a size-1 axis
    # (a single key is a legitimate attention input).
    e = ops.exp(x)
    if mask is not None:
        e = e * ops.cast(mask, x.dtype)
    total = ops.sum(e, axis=axis, keepdims=True)
    # Dividing by 1 where the total is 0 keeps fully masked slices at 0 and
    # their gradient finite.
    safe_total = ops.where(total > 0, total, ops.ones_like(total))
    return ops.cast(e / safe_total, in_dtype)


def causal_mask(query_length: int, key_length: int):
    """Lower-triangular boolean mask: query `i` sees keys `j <= i`.

    The same convention as `keras.layers.MultiHeadAttention`.

    Returns:
        Boolean tensor of shape `(query_length, key_length)`.
    """
    rows = ops.expand_dims(ops.arange(query_length), -1)
    cols = ops.expand_dims(ops.arange(key_length), 0)
    return ops.greater_equal(rows, cols)


def combine_masks(
    query_length,
    key_length,
    query_mask=None,
    value_mask=None,
    key_mask=None,
    attention_mask=None,
    use_causal_mask: bool = False,
):
    """Combines the padding, explicit and causal masks into one.

    Args:
        query_length: Number of query positions `Tq`.
        key_length: Number of key positions `Tk`.
        query_mask: Optional `(batch_size, Tq)`; a masked query gets no key.
        value_mask: Optional `(batch_size, Tk)`.
        key_mask: Optional `(batch_size, Tk)`, combined with `value_mask`.
        attention_mask: Optional `(batch_size, Tq, Tk)` or `(Tq, Tk)`, or one
            with extra leading axes (e.g. heads) that broadcasts.
        use_causal_mask: Whether query `i` may only see keys `j <= i`.

    Returns:
        A boolean tensor that broadcasts to `(batch_size, Tq, Tk)`, or `None`
        when no mask applies.
    """
    mask = None

    def _and(a, b):
        b = ops.cast(b, "bool")
        return b if a is None else ops.logical_and(a, b)

    for padding in (value_mask, key_mask):
        if padding is not None:
            mask = _and(mask, ops.expand_dims(padding, -2))
    if query_mask is not None:
        mask = _and(mask, ops.expand_dims(query_mask, -1))
    if attention_mask is not None:
        mask = _and(mask, attention_mask)
    if use_causal_mask:
        mask = _and(mask, causal_mask(query_length, key_length))
    return mask


def attention(
    query,
    key,
    value,
    score_fn: Callable | None = None,
    mask=None,
    dropout_fn: Callable | None = None,
):
    """Soft attention: `context_i = sum_j softmax_j(s(q_i, k_j)) v_j`.

    Args:
        query: `(..., Tq, Dq)`.
        key: `(..., Tk, Dk)`.
        value: `(..., Tk, Dv)`.
        score_fn: Callable mapping `(query, key)` to logits `(..., Tq, Tk)`.
            Defaults to the scaled dot product `q·k / sqrt(Dk)`.
        mask: Optional boolean mask broadcastable to `(..., Tq, Tk)`.
        dropout_fn: Optional callable applied to the weights before they
            multiply the values (the returned weights are pre-dropout).

    Returns:
        Tuple `(context, weights)`: `(..., Tq, Dv)` in the dtype of `value`,
        and `(..., Tq, Tk)` in the dtype of `value`.
    """
    if score_fn is None:
        score_fn = scaled_dot_product
    logits = score_fn(query, key)
    weights = masked_softmax(logits, mask)
    weights = ops.cast(weights, value.dtype)
    applied = dropout_fn(weights) if dropout_fn is not None else weights
    return ops.matmul(applied, value), weights


def dot_product(query, key):
    """Logits `q·k`, computed in `float32` for half-precision inputs."""
    dtype = logits_dtype(_to_standard_dtype(query.dtype))
    query, key = ops.cast(query, dtype), ops.cast(key, dtype)
    return ops.matmul(query, ops.swapaxes(key, -1, -2))


def scaled_dot_product(query, key):
    """Logits `q·k / sqrt(Dk)`, computed in `float32` for half precision."""
    dtype = logits_dtype(_to_standard_dtype(query.dtype))
    depth = ops.cast(ops.shape(key)[-1], dtype)
    # Scaling the query first keeps the product small in float16 too.
    query = ops.cast(query, dtype) / ops.sqrt(depth)
    return dot_product(query, ops.cast(key, dtype))


def frobenius_penalty(weights):
    """Lin et al.'s redundancy penalty `mean_batch ‖AAᵀ − I‖²_F`.

    Args:
        weights: Attention matrix `A` of shape `(batch_size, hops, time)`.

    Returns:
        Scalar: the squared Frobenius norm of `AAᵀ − I`, averaged over the
        batch.
    """
    weights = ops.convert_to_tensor(weights)
    dtype = logits_dtype(_to_standard_dtype(weights.dtype))
    a = ops.cast(weights, dtype)
    gram = ops.matmul(a, ops.swapaxes(a, -1, -2))
    identity = ops.eye(ops.shape(a)[-2], dtype=dtype)
    return ops.mean(ops.sum(ops.square(gram - identity), axis=(-2, -1)))


def _to_blocks(x, size: int, num_blocks: int):
    """`(B, H, T, D)` → `(num_blocks, B, H, size, D)`, zero-padded in T."""
    pad = num_blocks * size - ops.shape(x)[2]
    x = ops.pad(x, [[0, 0], [0, 0], [0, pad], [0, 0]])
    shape = ops.shape(x)
    x = ops.reshape(x, (shape[0], shape[1], num_blocks, size, shape[3]))
    return ops.transpose(x, (2, 0, 1, 3, 4))


def _from_blocks(x, length: int):
    """Inverse of `_to_blocks`: `(nb, B, H, size, D)` → `(B, H, length, D)`."""
    shape = ops.shape(x)
    x = ops.transpose(x, (1, 2, 0, 3, 4))
    x = ops.reshape(x, (shape[1], shape[2], shape[0] * shape[3], shape[4]))
    return x[:, :, :length]


def _mask_blocks(mask, batch: int, length: int, size: int, num_blocks: int):
    """A `(B, T)` padding mask (or `None`) → `(nb, B, size)`, padded False."""
    valid = ops.ones((batch, length), dtype="bool")
    if mask is not None:
        valid = ops.logical_and(valid, ops.cast(mask, "bool"))
    valid = ops.pad(valid, [[0, 0], [0, num_blocks * size - length]])
    valid = ops.reshape(valid, (batch, num_blocks, size))
    return ops.transpose(valid, (1, 0, 2))


def _sequential_loop(lower, upper, body, init):
    """`ops.fori_loop` that runs one iteration at a time.

    TensorFlow's while loops run up to ten iterations concurrently in graph
    mode, which multiplies the per-block temporaries of chunked attention by
    ten (measured: ~2.3 GB more at N=4096). One iteration at a time keeps
    the peak at one block.
    """
    if keras.backend.backend() != "tensorflow":
        return ops.fori_loop(lower, upper, body, init)
    import tensorflow as tf

    def cond(i, carry):
        return i < upper

    def step(i, carry):
        return i + 1, body(i, carry)

    return tf.while_loop(cond, step, (lower, init), parallel_iterations=1)[1]


def _sequential_map(fn, indices):
    """`ops.map` over block indices, one block at a time (see above)."""
    if keras.backend.backend() != "tensorflow":
        return ops.map(fn, indices)
    import tensorflow as tf

    spec = tf.nest.map_structure(tf.TensorSpec.from_tensor, fn(indices[0]))
    return tf.map_fn(
        fn, indices, fn_output_signature=spec, parallel_iterations=1
    )


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
):
    """Dot-product attention in blocks, with memory linear in the length.

    Computes the same context as
    `softmax(scale · Q Kᵀ, masked) V` without ever holding the
    `(Tq, Tk)` weights: query blocks are processed one after another, and
    each walks the key blocks with an online softmax (a running maximum and
    running sum, Milakov & Gimelshein 2018; Rabe & Staats 2021; Dao et al.
    2022). The backward pass is a custom gradient that recomputes each block
    from the saved output and log-sum-exp instead of storing the weights, so
    peak memory grows linearly with the sequence length in training too.
    With `causal=True`, key blocks that lie wholly in a query block's future
    are skipped.

    Only dot-product logits can be computed this way (any `scale`, so dot,
    scaled dot and, on unit-normalised inputs, cosine). Scores with a
    hidden layer over each (query, key) pair, such as additive or concat,
    need the pair explicitly and are not supported.

    Args:
        query: `(batch_size, heads, Tq, D)`.
        key: `(batch_size, heads, Tk, D)`.
        value: `(batch_size, heads, Tk, Dv)`.
        scale: Factor on the logits. Defaults to `1 / sqrt(D)`.
        query_mask: Optional boolean `(batch_size, Tq)`; masked queries get
            a zero context.
        key_mask: Optional boolean `(batch_size, Tk)`; masked keys get weight
            0. A query with no unmasked key gets a zero context.
        causal: Whether query `i` only sees keys `j <= i`. Defaults to
            `False`.
        query_chunk_size: Queries per block. Defaults to `512`.
        key_chunk_size: Keys per block. Defaults to `512`.

    Returns:
        The context, `(batch_size, heads, Tq, Dv)`, in the dtype of `value`.
        Half-precision inputs are computed in `float32`.
    """
    out_dtype = _to_standard_dtype(value.dtype)
    dtype = logits_dtype(out_dtype)
    q, k, v = (ops.cast(t, dtype) for t in (query, key, value))
    batch, _, q_len, depth = ops.shape(q)
    k_len = ops.shape(k)[2]
    if scale is None:
        scale = 1.0 / float(depth) ** 0.5
    # Static lengths give static block counts (what XLA needs); a dynamic
    # length keeps the requested block size.
    qc = (
        min(query_chunk_size, q_len)
        if isinstance(q_len, int)
        else (query_chunk_size)
    )
    kc = (
        min(key_chunk_size, k_len)
        if isinstance(k_len, int)
        else (key_chunk_size)
    )
    nq = -(-q_len // qc)
    nk = -(-k_len // kc)
    q_valid = _mask_blocks(query_mask, batch, q_len, qc, nq)
    k_valid = _mask_blocks(key_mask, batch, k_len, kc, nk)
    # Padded query rows need no mask (their outputs are dropped and their
    # upstream gradient is zero); padded keys do. Without any mask the
    # blocks skip the masking arithmetic altogether.
    masked = (
        causal
        or query_mask is not None
        or key_mask is not None
        or not isinstance(k_len, int)
        or k_len % kc != 0
    )
    q_offsets = ops.arange(qc)
    k_offsets = ops.arange(kc)
    neg = -1e30

    def last_key_block(i):
        if not causal:
            return nk
        return ops.minimum(nk, ((i + 1) * qc - 1) // kc + 1)

    def first_query_block(j):
        return (j * kc) // qc if causal else 0

    @ops.custom_gradient
    def _attend(q, k, v):
        q_blocks = _to_blocks(q, qc, nq)
        k_blocks = _to_blocks(k, kc, nk)
        v_blocks = _to_blocks(v, kc, nk)

        def block_logits(i, j):
            """Logits of query block i against key block j, and validity."""
            q_i = ops.take(q_blocks, i, axis=0)
            k_j = ops.take(k_blocks, j, axis=0)
            s = ops.matmul(q_i, ops.swapaxes(k_j, -1, -2)) * scale
            if not masked:
                return s, None
            valid = ops.logical_and(
                ops.take(q_valid, i, axis=0)[:, None, :, None],
                ops.take(k_valid, j, axis=0)[:, None, None, :],
            )
            if causal:
                q_pos = i * qc + q_offsets
                k_pos = j * kc + k_offsets
                valid = ops.logical_and(valid, q_pos[:, None] >= k_pos[None, :])
            return s, valid

        def forward_block(i):
            shape = ops.shape(q_blocks)[1:-1] + (1,)
            m = ops.full(shape, neg, dtype=dtype)
            total = ops.zeros(shape, dtype=dtype)
            acc = ops.zeros(shape[:-1] + (ops.shape(v)[-1],), dtype=dtype)

            def body(j, carry):
                m, total, acc = carry
                s, valid = block_logits(i, j)
                if valid is not None:
                    s = ops.where(valid, s, neg)
                m_new = ops.maximum(m, ops.max(s, axis=-1, keepdims=True))
                p = ops.exp(s - m_new)
                if valid is not None:
                    p = p * ops.cast(valid, dtype)
                correction = ops.exp(m - m_new)
                total = total * correction + ops.sum(p, axis=-1, keepdims=True)
                acc = acc * correction + ops.matmul(
                    p, ops.take(v_blocks, j, axis=0)
                )
                return m_new, total, acc

            m, total, acc = _sequential_loop(
                0, last_key_block(i), body, (m, total, acc)
            )
            safe = ops.where(total > 0, total, ops.ones_like(total))
            return acc / safe, m + ops.log(safe)

        out_blocks, lse = _sequential_map(forward_block, ops.arange(nq))
        out = _from_blocks(out_blocks, q_len)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            d_out = ops.cast(upstream, dtype)
            delta = ops.sum(d_out * out, axis=-1, keepdims=True)
            do_blocks = _to_blocks(d_out, qc, nq)
            delta_blocks = _to_blocks(delta, qc, nq)

            def ds_block(i, j):
                """Recomputed weights p and logit gradient ds of a block."""
                s, valid = block_logits(i, j)
                s = s - ops.take(lse, i, axis=0)
                if valid is not None:
                    s = ops.where(valid, s, neg)
                p = ops.exp(s)
                do_i = ops.take(do_blocks, i, axis=0)
                v_j = ops.take(v_blocks, j, axis=0)
                dp = ops.matmul(do_i, ops.swapaxes(v_j, -1, -2))
                ds = p * (dp - ops.take(delta_blocks, i, axis=0))
                return p, do_i, ds

            def dq_block(i):
                def body(j, dq):
                    _, _, ds = ds_block(i, j)
                    k_j = ops.take(k_blocks, j, axis=0)
                    return dq + ops.matmul(ds, k_j) * scale

                start = ops.zeros(ops.shape(q_blocks)[1:], dtype=dtype)
                return _sequential_loop(0, last_key_block(i), body, start)

            def dkv_block(j):
                def body(i, carry):
                    dk, dv = carry
                    p, do_i, ds = ds_block(i, j)
                    q_i = ops.take(q_blocks, i, axis=0)
                    dv = dv + ops.matmul(ops.swapaxes(p, -1, -2), do_i)
                    dk = dk + ops.matmul(ops.swapaxes(ds, -1, -2), q_i) * scale
                    return dk, dv

                start = (
                    ops.zeros(ops.shape(k_blocks)[1:], dtype=dtype),
                    ops.zeros(ops.shape(v_blocks)[1:], dtype=dtype),
                )
                return _sequential_loop(first_query_block(j), nq, body, start)

            dq = _from_blocks(_sequential_map(dq_block, ops.arange(nq)), q_len)
            dk, dv = _sequential_map(dkv_block, ops.arange(nk))
            return dq, _from_blocks(dk, k_len), _from_blocks(dv, k_len)

        return out, grad

    return ops.cast(_attend(q, k, v), out_dtype)
