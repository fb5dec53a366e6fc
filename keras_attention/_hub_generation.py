"""A swapped keras-hub model laid out for this package's generation
(private module; `keras_attention.hub.language_model`).

`keras_attention.models.Generator` decodes a model of
`build_language_model`: layers `token_embedding`, `block_0`, ...,
`final_norm` and `logits`, each block called as `block(x,
use_causal_mask=True, cache=cache, cache_update_index=index)` and
returning `(x, cache)`, with its attention as `block.self_attention` and
its window as `block.sliding_window`. A keras-hub decoder is called
otherwise (its own keyword arguments, keras-hub's cache tensor, its mask
built from that tensor's shape), and our caches are objects. So each
decoder is wrapped in a `KerasHubBlock`: the block calls keras-hub's
decoder without a cache, its norms, feed-forward and residuals as they
are, and hands the cache past it to the decoder's adapter (`Route`),
which runs our layer on it. The model shares the swapped model's layers
and weights; nothing is copied.
"""

import keras
from keras import ops

from keras_attention._hub_adapters import KerasHubAttention
from keras_attention._hub_adapters import KerasHubGatedDeltaNet
from keras_attention._hub_adapters import Route


class KerasHubBlock(keras.layers.Layer):
    """A keras-hub decoder called as a block of `build_language_model`.

    Args:
        decoder: The swapped decoder.
        adapter: Its `KerasHubAttention` or `KerasHubGatedDeltaNet`.
        **kwargs: Base layer keyword arguments, e.g. `name`.

    Call arguments:
        x: `(batch_size, T, hidden_dim)`.
        use_causal_mask: Accepted as `Generator` passes it: the decoder is
            causal.
        cache: Optional cache of this package's kinds, for the adapter's
            layer.
        cache_update_index: Where the call's positions start in it.
        return_attention_scores: Whether to return the attention weights
            `(batch_size, heads, T, keys)` too (what
            `keras_attention.visualize.collect_attention` asks for).
        training: Whether dropout is active.
        **decoder_arguments: The decoder's own call arguments, passed on
            (its padding mask, as the backbone gives it: a call without a
            cache then runs on keras-hub's mask).

    Returns:
        The decoder's output, then the weights when asked for, then the
        written cache when one is given.
    """

    def __init__(self, decoder, adapter, **kwargs):
        super().__init__(**kwargs)
        self.decoder = decoder
        self.adapter = adapter

    @property
    def self_attention(self):
        """The layer our caches are allocated for."""
        if isinstance(self.adapter, KerasHubGatedDeltaNet):
            return self.adapter.layer
        return self.adapter.attention

    @property
    def sliding_window(self):
        return getattr(self.self_attention, "sliding_window", None)

    def call(
        self,
        x,
        use_causal_mask=True,
        cache=None,
        cache_update_index=None,
        return_attention_scores=False,
        training=None,
        **decoder_arguments,
    ):
        if cache is None and not return_attention_scores:
            return self.decoder(x, training=training, **decoder_arguments)
        route = Route(cache, cache_update_index, return_attention_scores)
        with self.adapter.routing(route):
            x = self.decoder(x, training=training, **decoder_arguments)
        outputs = (x, route.scores) if return_attention_scores else (x,)
        return outputs if cache is None else (*outputs, route.cache)

    def compute_output_shape(self, x_shape):
        return tuple(x_shape)


class _Part(keras.layers.Layer):
    """A layer of the backbone under the name `Generator` reads: the
    token embedding (`scale`d), the final norm, or the logits (the
    embedding reversed)."""

    def __init__(self, layer, scale=None, reverse=False, **kwargs):
        super().__init__(**kwargs)
        self.layer, self.scale, self.reverse = layer, scale, reverse

    @property
    def input_dim(self):
        return self.layer.input_dim

    def call(self, x):
        if self.reverse:
            return self.layer(x, reverse=True)
        x = self.layer(x)
        if self.scale is not None:
            x = x * ops.cast(self.scale, x.dtype)
        return x


class KerasHubGatedDeltaBlock(KerasHubBlock):
    """A keras-hub decoder of a Gated DeltaNet layer as a block: no
    attention weights to report (the same call, without
    `return_attention_scores`)."""

    def call(
        self,
        x,
        use_causal_mask=True,
        cache=None,
        cache_update_index=None,
        training=None,
    ):
        return super().call(
            x,
            use_causal_mask=use_causal_mask,
            cache=cache,
            cache_update_index=cache_update_index,
            training=training,
        )


def _adapter(decoder, family):
    """The decoder's `KerasHubAttention` (or Gated DeltaNet adapter)."""
    found = getattr(decoder, family.attribute, None)
    if not isinstance(found, KerasHubAttention) and family.linear:
        found = getattr(decoder, family.linear[0], None)
    return found


def scores_blocks(backbone, family):
    """`{decoder name: KerasHubBlock}` of `backbone`'s decoders whose
    attention is ours (a Gated DeltaNet decoder has no weights to report):
    what `collect_attention` calls in each decoder's place, with the
    decoder's own arguments, to read its attention weights."""
    blocks = {}
    for decoder in backbone.transformer_layers:
        adapter = _adapter(decoder, family)
        if isinstance(adapter, KerasHubAttention):
            blocks[decoder.name] = KerasHubBlock(
                decoder, adapter, name=decoder.name
            )
    return blocks


def language_model(backbone, family):
    """A functional model of `backbone`'s layers laid out as
    `build_language_model`'s (token ids `(batch, T)` -> logits)."""
    embedding = backbone.token_embedding
    scale = None
    if family.scales_embeddings:
        scale = float(backbone.hidden_dim) ** 0.5
    ids = keras.Input((None,), dtype="int32", name="token_ids")
    x = _Part(embedding, scale=scale, name="token_embedding")(ids)
    for i, decoder in enumerate(backbone.transformer_layers):
        adapter = _adapter(decoder, family)
        kind = KerasHubBlock
        if isinstance(adapter, KerasHubGatedDeltaNet):
            kind = KerasHubGatedDeltaBlock
        block = kind(decoder, adapter, name=f"block_{i}")
        x = block(x)
    norm = getattr(backbone, family.final_norm)
    x = _Part(norm, name="final_norm")(x)
    logits = _Part(embedding, reverse=True, name="logits")(x)
    return keras.Model(ids, logits, name=f"{backbone.name}_language_model")
