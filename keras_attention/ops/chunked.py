"""Attention in blocks, with memory linear in the sequence length.

`chunked_attention` computes what `attend` computes for a dot-product or an
additive score without ever holding the `(Tq, Tk)` weights. It is a thin
entry on the engine's blocks (`ops/engine.py`, the block kernel of
`ops/_kernel.py`): its masks are `attention_masks`', those of the dense
path, and the limits of the band say which blocks to skip.
"""

from keras_attention.ops import checks
from keras_attention.ops import engine
from keras_attention.ops.masks import attention_masks


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
    chunk_size: int = 512,
    band=None,
    additive_v=None,
    return_lse: bool = False,
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
    skipped. The layout is `flex_attention`'s (and
    `keras.ops.dot_product_attention`'s), and the key and value may have
    fewer heads than the query (grouped-query attention).

    Any score that is a dot product of transformed inputs
    (`Score.dot_product_form`: dot, scaled dot, cosine, bilinear) is
    computed from those inputs; additive and concat scores from their
    projected inputs and vector `v` (`Score.additive_form`), with
    `additive_v`: then the logits are `scale · Σ_u v_u tanh(q_iu + k_ju)`,
    and each block holds `(chunk_size, chunk_size, units)` values.

    Args:
        query: `(batch_size, Tq, heads, D)`.
        key: `(batch_size, Tk, kv_heads, D)`, `heads % kv_heads == 0`.
        value: `(batch_size, Tk, kv_heads, Dv)`.
        scale: Factor on the logits. Defaults to `1 / sqrt(D)` for a dot
            product and `1` with `additive_v`.
        query_mask: Optional boolean `(batch_size, Tq)`; masked queries get
            a zero context.
        key_mask: Optional boolean `(batch_size, Tk)`; masked keys get weight
            0. A query with no unmasked key gets a zero context.
        causal: Whether query `i` only sees keys `j <= i`. Defaults to
            `False`.
        chunk_size: Queries and keys per block. Defaults to `512`.
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
        return_lse: Whether to also return the log-sum-exp of each row,
            `(batch_size, heads, Tq)` (`-inf` for a query with no kept
            key), with gradients through it. Defaults to `False`.

    Returns:
        The context, `(batch_size, Tq, heads, Dv)`, in the dtype of `value`
        (half-precision inputs are computed in `float32`); with
        `return_lse=True` also the log-sum-exp.

    Example:

    >>> q = np.random.rand(1, 100, 2, 8).astype("float32")  # (B, T, heads, D)
    >>> chunked = keras_attention.ops.chunked_attention(
    ...     q, q, q, causal=True, chunk_size=32
    ... )
    >>> mask = keras_attention.ops.causal_mask(100, 100)
    >>> dense = keras_attention.ops.dot_product_attention(
    ...     q, q, q, mask, scale=8**-0.5
    ... )
    >>> np.allclose(np.asarray(chunked), np.asarray(dense), atol=1e-5)
    True
    """
    band = _check_band(band)
    checks.grouped_heads("chunked_attention", query, key, value)
    size = checks.chunk_sizes(chunk_size)
    if scale is None:
        depth = float(query.shape[-1])
        scale = 1.0 if additive_v is not None else 1.0 / depth**0.5
    score = engine.ScaledDot(scale)
    if additive_v is not None:
        score = engine.Additive(additive_v, scale)
    masks = attention_masks(
        query_mask=query_mask,
        key_mask=key_mask,
        use_causal_mask=causal,
        band=band,
    )
    call = engine.AttentionCall(
        query, key, value, score, masks=masks, lse=bool(return_lse)
    )
    result = engine.run(call, engine.plan_call(call, size))
    return (result.output, result.lse) if return_lse else result.output
