"""`keras.layers.AdditiveAttention` on this package's attend step."""

import keras

from keras_attention.layers import _keras_scores
from keras_attention.layers.attention import Attention


@keras.saving.register_keras_serializable(package="keras_attention")
class AdditiveAttention(Attention):
    """Bahdanau-style additive attention, as `keras.layers.AdditiveAttention`.

    The logits are `s(q, k) = Σ_d g_d tanh(q_d + k_d)`, with the trained
    `scale` `g (dim,)` when `use_scale=True` (Keras's weight, name, shape
    and Glorot-uniform initializer), the weights their softmax over the
    values and the output `Σ_j a_j v_j`. A drop-in for Keras's layer (the
    list call `[query, value]` / `[query, value, key]`,
    `mask=[query_mask, value_mask]`, `use_causal_mask`,
    `return_attention_scores`), with everything
    `keras_attention.Attention` adds (`query_mask` / `value_mask` /
    `attention_mask` arguments, local windows, one query vector, the
    one-input self-attention form). One difference: a masked query, or
    one whose values are all masked, gets all-zero weights, where Keras
    returns its softmax over the masked logits (uniform weights); the
    context is zero in both. For `vᵀ tanh(q W_q + k W_k)` with
    projections, use `keras_attention.Attention(score="additive")`.

    Args:
        use_scale: Whether to train the `scale` vector `g`; else `g = 1`.
            Defaults to `True`.
        dropout: Dropout rate on the attention weights during training.
            Defaults to `0.0`.
        seed: Seed of the dropout. Defaults to `None`.
        **kwargs: `keras_attention.Attention`'s other arguments
            (`attention_width`, `attention_activation`, ...) and the base
            layer keyword arguments.

    Call arguments:
        query: As for `keras_attention.Attention`, or the list
            `[query, value]` or `[query, value, key]`; the other call
            arguments are `keras_attention.Attention`'s.

    Returns:
        The context `(batch_size, Tq, dim)`, and with
        `return_attention_scores=True` the weights `(batch_size, Tq, Tv)`.

    Example:

    >>> layer = keras_attention.AdditiveAttention()
    >>> query = np.random.rand(2, 3, 4).astype("float32")
    >>> value = np.random.rand(2, 5, 4).astype("float32")
    >>> out, weights = layer([query, value], return_attention_scores=True)
    >>> tuple(out.shape), tuple(weights.shape)
    ((2, 3, 4), (2, 3, 5))

    References:
        - [Bahdanau et al., 2014](https://arxiv.org/abs/1409.0473)
    """

    def __init__(self, use_scale=True, dropout=0.0, seed=None, **kwargs):
        kwargs.pop("score", None)
        kwargs.pop("score_mode", None)
        super().__init__(
            score=_keras_scores.KerasAdditiveScore(
                use_scale=use_scale, dtype=kwargs.get("dtype")
            ),
            dropout=dropout,
            seed=seed,
            **kwargs,
        )
        self.use_scale = bool(use_scale)

    def get_config(self):
        config = super().get_config()
        for key in ("score", "score_mode"):
            config.pop(key, None)
        config["use_scale"] = self.use_scale
        return config
