"""The linear-attention block of a hybrid decoder-only model: Qwen3.5's
Gated DeltaNet layers beside full attention (Yang et al. 2024,
docs/linear.md).

It takes the place of a `TransformerEncoderBlock` in
`build_language_model(layer_types=...)` and answers the same call, so
`Generator` steps it with its state cache (`GatedDeltaCache`) where an
attention block has its key/value cache. It lives in the core, beside
the attention blocks, so that a saved hybrid model loads after `import
keras_attention` alone.
"""

import keras

from keras_attention.layers.gated_delta_net import GatedDeltaNet
from keras_attention.seq2seq.transformer.blocks import EPSILON
from keras_attention.seq2seq.transformer.blocks import Block


@keras.saving.register_keras_serializable(package="keras_attention")
class GatedDeltaBlock(Block):
    """Pre-norm linear-attention block: `x + GatedDeltaNet(LN(x))`, then
    `+ FFN(LN)`.

    Causal by construction (a state carried forward), so it has no
    window and no causal flag to set: `use_causal_mask=False` is refused.
    With a cache it continues from the cache's state, whatever
    `cache_update_index` says (the state holds every earlier position).

    Args:
        model_dim: Width of the residual stream (inputs and outputs).
        num_heads: Value heads of the Gated DeltaNet, `model_dim //
            num_heads` features each.
        feed_forward_dim: Width of the feed-forward network's hidden layer.
        **kwargs: `num_key_value_heads` (the query/key heads, a divisor of
            `num_heads`; `None`, the default, is `num_heads`), `dropout`
            (on the feed-forward hidden layer and each sublayer's output;
            defaults to `0.0`) and the layer keyword arguments.

    Call arguments:
        inputs: `(batch_size, time, model_dim)`.
        padding_mask: Optional boolean `(batch_size, time)`, `False` at
            padding (neither decays nor writes the state).
        training: Whether dropout is active.
        use_causal_mask: `True` (the default; it always is).
        cache: Optional `keras_attention.GatedDeltaCache` (or keras-hub's
            tuple), the state before `inputs`.
        cache_update_index: Accepted for a `TransformerEncoderBlock`'s
            call; unused.

    Returns:
        `(batch_size, time, model_dim)`; with `cache`, `(outputs, cache)`.

    Example:

    >>> block = keras_attention.models.GatedDeltaBlock(8, 2, 16)
    >>> tuple(block(np.random.rand(2, 5, 8).astype("float32")).shape)
    (2, 5, 8)
    """

    def __init__(self, model_dim, num_heads, feed_forward_dim, **kwargs):
        if kwargs.get("sliding_window") is not None:
            raise ValueError(
                "GatedDeltaBlock has no window: its state carries every "
                "earlier position. Received: sliding_window="
                f"{kwargs['sliding_window']!r}"
            )
        if kwargs.get("use_rotary_embedding") is False:
            raise ValueError(
                "GatedDeltaBlock never rotates: a NoPE block is a "
                "TransformerEncoderBlock's. Received: "
                "use_rotary_embedding=False"
            )
        super().__init__(model_dim, num_heads, feed_forward_dim, **kwargs)
        self.self_attention_norm = keras.layers.LayerNormalization(
            epsilon=EPSILON, name="self_attention_norm"
        )
        self.self_attention = GatedDeltaNet(
            num_key_heads=self.num_key_value_heads or num_heads,
            key_head_dim=self.key_dim,
            num_value_heads=num_heads,
            value_head_dim=self.key_dim,
            name="gated_delta_net",
        )

    def build(self, inputs_shape):
        shape = tuple(inputs_shape)
        for norm in (self.self_attention_norm, self.feed_forward_norm):
            norm.build(shape)
        self.self_attention.build(shape)
        self._build_feed_forward(shape)

    def call(
        self,
        inputs,
        padding_mask=None,
        training=None,
        use_causal_mask=True,
        cache=None,
        cache_update_index=None,
    ):
        del cache_update_index  # The state holds the earlier positions.
        if not use_causal_mask:
            raise ValueError(
                "GatedDeltaBlock is causal (a state carried forward). "
                f"Received: use_causal_mask={use_causal_mask!r}"
            )
        self._check(inputs=inputs)
        h = self.self_attention_norm(inputs)
        h = self.self_attention(
            h, mask=padding_mask, cache=cache, training=training
        )
        if cache is not None:
            h, cache = h
        outputs = self._feed_forward(
            self._residual(inputs, h, training), training
        )
        return outputs if cache is None else (outputs, cache)

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def compute_output_spec(self, inputs, cache=None, **kwargs):
        # Not traced: the op's choice of form compares the length, which a
        # symbolic time axis cannot answer.
        output = keras.KerasTensor(inputs.shape, self.compute_dtype)
        if cache is None:
            return output
        _, cache = self.self_attention.compute_output_spec(inputs, cache=cache)
        return output, cache
