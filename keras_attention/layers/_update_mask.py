"""`cache_update_mask`: the tokens of a call whose keys and values are not
written to the cache (Gemma 3's; private module).

keras-hub's Gemma 3 passes `(batch_size, new_tokens)` booleans with each
cached call; a `False` token's slot keeps what the cache held, and the
call's queries attend over the cache as it is then. Its `generate` uses
it so that a row still inside its prompt does not overwrite the prompt's
entries (written once, at the prefill) while the longer rows decode.
Only the kinds whose slots are positions take it (`KeyValueCache`,
`QuantizedCache`): in a rolling or a paged cache a kept slot would hold
another position's entry.
"""

from keras import ops


def check(layer_name, cache, mask, index, batch_size, new_length):
    """`mask` as booleans, or a `ValueError` naming what is wrong: no
    index, a kind that does not take it, a shape that is not the call's
    `(batch_size, new_tokens)`."""
    if mask is None:
        return None
    if index is None:
        raise ValueError(
            f"{layer_name}: `cache_update_mask` says which of the call's "
            "keys and values are written at `cache_update_index`: give "
            "that index. Received: cache_update_index=None"
        )
    if not getattr(cache, "takes_update_mask", False):
        raise ValueError(
            f"{layer_name}: `cache_update_mask` keeps a token's slot as it "
            "was, which only a cache whose slots are positions can do "
            "(KeyValueCache, QuantizedCache, a cache tensor). Received: "
            f"cache={cache!r}"
        )
    if not hasattr(mask, "shape"):
        mask = ops.convert_to_tensor(mask)
    shape = tuple(mask.shape)
    expected = (batch_size, new_length)
    if len(shape) != 2 or any(
        None not in (got, want) and got != want
        for got, want in zip(shape, expected, strict=True)
    ):
        raise ValueError(
            f"{layer_name} expects `cache_update_mask` of shape "
            f"`(batch_size, new_tokens)` = {expected}, one per query. "
            f"Received: cache_update_mask.shape={shape}"
        )
    return ops.cast(mask, "bool")


def kept(tensor, start, update, mask):
    """`update` where `mask` is True, what `tensor` holds from `start`
    elsewhere. `tensor` is `(batch_size, 2, length, ...)`, `mask`
    `(batch_size, new_tokens)` (`None`: `update` as it is)."""
    if mask is None:
        return update
    old = ops.slice(tensor, start, ops.shape(update))
    rank = len(update.shape)
    shape = (ops.shape(mask)[0], 1, ops.shape(mask)[1]) + (1,) * (rank - 3)
    return ops.where(ops.reshape(mask, shape), update, old)
