"""keras-self-attention's local window (`attention_width`): its band
and the check that the query has positions (private module)."""


def band(width, history_only):
    """keras-self-attention's local window as a `(left, right)` band.

    Centred, query `i` sees keys `i - width // 2 <= j < i - width // 2 +
    width` (for an even width one key more before the query than after
    it); with `history_only` (a causal layer) `i - width < j <= i`. The
    `band` flag of `keras_attention.ops.masks.attention_masks`, which
    every path (dense, fused, chunked, flex) takes its mask from.
    """
    if history_only:
        return (width - 1, 0)
    return (width // 2, width - width // 2 - 1)


def check_query(layer_name, single_query):
    """A local window needs query positions: not a single query vector."""
    if single_query:
        raise ValueError(
            f"{layer_name}: `attention_width` needs a query sequence "
            "`(batch_size, Tq, dim)` whose positions line up with the "
            "values', not a single query vector."
        )
