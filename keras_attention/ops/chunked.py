"""Attention in blocks, with memory linear in the sequence length.

`chunked_attention` computes what `attend` computes for a dot-product or an
additive score without ever holding the `(Tq, Tk)` weights. It is a thin
entry on the one block kernel (`ops/_kernel.py`): its masks are
`attention_masks`', those of the dense path, as the kernel's padding masks
and band mask mod, and the limits of the band say which blocks to skip.
"""

import keras
from keras import ops

from keras_attention.ops import _kernel
from keras_attention.ops import checks
from keras_attention.ops.attend import logits_dtype
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

    spec = _kernel.Spec(
        scale=scale,
        sizes=sizes,
        additive=additive_v is not None,
        mask_mod=masks.band,
        query_mask=masks.query_mask,
        key_mask=masks.key_mask,
        limits=masks.limits,
    )
    # `(B, H, T, D)` is the kernel's `(B, Hkv, G, T, D)` with one group.
    tensors[:3] = [ops.expand_dims(t, 2) for t in tensors[:3]]
    out = ops.squeeze(_kernel.attend(tensors, spec), 2)
    return ops.cast(out, out_dtype)
