"""keras-self-attention's local window (`attention_width`): its band,
its mask and the check that the query has positions (private module)."""

from keras import ops

from keras_attention import ops as ka_ops


def band(width, history_only):
    """keras-self-attention's local window as a `(left, right)` band.

    Centred, query `i` sees keys `i - width // 2 <= j < i - width // 2 +
    width` (for an even width one key more before the query than after
    it); with `history_only` (a causal layer) `i - width < j <= i`. The
    band of `keras_attention.ops.band_mask` and of the chunked path.
    """
    if history_only:
        return (width - 1, 0)
    return (width // 2, width - width // 2 - 1)


def mask(query_length, key_length, width, history_only):
    """keras-self-attention's local window `(Tq, Tk)`: `True` = attend."""
    left, right = band(width, history_only)
    return ka_ops.band_mask(query_length, key_length, left, right)


def and_mask(mask, other):
    """`mask & other`, either possibly `None`."""
    if other is None:
        return mask
    if mask is None:
        return other
    return ops.logical_and(ops.cast(mask, "bool"), other)


def check_query(layer_name, single_query):
    """A local window needs query positions: not a single query vector."""
    if single_query:
        raise ValueError(
            f"{layer_name}: `attention_width` needs a query sequence "
            "`(batch_size, Tq, dim)` whose positions line up with the "
            "values', not a single query vector."
        )
