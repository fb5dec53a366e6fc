"""One call of a multi-head layer, as the engine receives it (private module).

The public layers' `call` methods differ in their arguments (Keras's
`MultiHeadAttention`, `SelfAttention`'s one input, MLA's latent cache);
each turns its arguments into one `LayerCall`, which the engine
(`MultiHeadBase`) reads by name. `query_value_key_shapes` checks the
shapes a `MultiHeadAttention` call is given, with Keras's words.
"""

import dataclasses
from typing import Any

from keras_attention.ops import checks


@dataclasses.dataclass(frozen=True, eq=False)
class LayerCall:
    """The arguments of one layer call.

    Attributes:
        query: `(batch, Tq, dim)` (or N-D with `attention_axes`).
        value: `(batch, Tv, dim)`.
        key: `(batch, Tv, dim)`; the value when the call has none.
        query_mask, value_mask, key_mask: Boolean padding masks or `None`.
        attention_mask: An explicit boolean mask or `None`.
        use_causal_mask: Whether query `i` only sees keys `j <= i`.
        cache: The cache tensor or `None`.
        cache_update_index: Where the call's keys and values are written.
        cache_update_mask: `(batch, Tq)` booleans: `False` tokens' keys
            and values are not written (Gemma 3's), or `None`.
        training: Whether dropout is active.
        return_weights: Whether the weights are returned.
        score_mod, mask_mod: The call's mods, after the layer's own
            (checked: callables of the mods' arguments).
        attention_bias: An additive bias of the logits, or `None`.
        layout: A variant's layout of the heads (MLA's `"absorbed"`).
        names: The layer's names of `query`, `value` and `key`, for the
            errors (`SelfAttention`'s one input is `inputs`).
    """

    query: Any
    value: Any
    key: Any = None
    query_mask: Any = None
    value_mask: Any = None
    key_mask: Any = None
    attention_mask: Any = None
    use_causal_mask: bool = False
    cache: Any = None
    cache_update_index: Any = None
    cache_update_mask: Any = None
    training: Any = None
    return_weights: bool = False
    score_mod: Any = None
    mask_mod: Any = None
    attention_bias: Any = None
    layout: str | None = None
    names: tuple = ("query", "value", "key")

    def __post_init__(self):
        if self.key is None:
            object.__setattr__(self, "key", self.value)
        checks.mod("score_mod", self.score_mod)
        checks.mod("mask_mod", self.mask_mod)

    @property
    def has_masks(self):
        """Whether a padding or an explicit mask is given (their shapes
        are then checked)."""
        return any(
            m is not None
            for m in (
                self.query_mask,
                self.value_mask,
                self.key_mask,
                self.attention_mask,
            )
        )

    @property
    def opens_cache(self):
        """Whether the call brings a cache or an argument that needs one
        (without them no cache is opened or checked)."""
        return not (
            self.cache is None
            and self.cache_update_index is None
            and self.cache_update_mask is None
        )

    def shapes(self):
        """The inputs' shapes by the layer's names of them."""
        named = {}
        for name, x in zip(
            self.names, (self.query, self.value, self.key), strict=True
        ):
            named.setdefault(name, tuple(x.shape))
        return named

    def mask_flags(self):
        """The masks as Keras's `_compute_attention_mask` takes them."""
        return {
            "query_mask": self.query_mask,
            "value_mask": self.value_mask,
            "key_mask": self.key_mask,
            "attention_mask": self.attention_mask,
            "use_causal_mask": bool(self.use_causal_mask),
        }


def outputs(output, scores, cache, return_attention_scores):
    """keras-hub's return: output, then scores, then the cache if any."""
    result = (output,)
    if return_attention_scores:
        result += (scores,)
    if cache is not None:
        result += (cache,)
    return result[0] if len(result) == 1 else result


def query_value_key_shapes(query_shape, value_shape, key_shape):
    """Validates the shapes given to `MultiHeadAttention`."""
    if key_shape is not None and not _same_dims(
        value_shape[1:-1], key_shape[1:-1]
    ):
        # Keras's check and words, before any rank check of ours.
        raise ValueError(
            "All dimensions of `value` and `key`, except the last one, must "
            f"be equal. Received: value_shape={tuple(value_shape)} and "
            f"key_shape={tuple(key_shape)}"
        )
    shapes = (
        f"query.shape={tuple(query_shape)}, value.shape={tuple(value_shape)}"
    )
    if key_shape is not None:
        shapes += f", key.shape={tuple(key_shape)}"
    key_shape = value_shape if key_shape is None else key_shape
    ranks = {len(s) for s in (query_shape, value_shape, key_shape)}
    if len(ranks) != 1 or min(ranks) < 3:
        raise ValueError(
            "MultiHeadAttention expects `query`, `value` and `key` of the "
            "same rank, at least 3: `(batch_size, T, dim)` or `(batch_size, "
            "d_1, ..., d_k, dim)` with `attention_axes`. "
            f"Received: {shapes}"
        )
    if any(s[-1] is None for s in (query_shape, value_shape, key_shape)):
        raise ValueError(
            "MultiHeadAttention needs the last axis of `query`, `value` and "
            f"`key` to be known. Received: {shapes}"
        )
    if len({s[0] for s in (query_shape, value_shape, key_shape)} - {None}) > 1:
        raise ValueError(
            "MultiHeadAttention needs the same batch size for `query`, "
            f"`value` and `key`. Received: {shapes}"
        )


def _same_dims(a, b):
    """Equal shapes, where an unknown (`None`) dimension matches any."""
    return len(a) == len(b) and all(
        x is None or y is None or x == y for x, y in zip(a, b, strict=True)
    )
