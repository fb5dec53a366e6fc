"""Multi-head latent attention (DeepSeek-V2): keys and values from a
low-rank latent, a decoupled rotary key shared by the heads, and a cache
of the latent only."""

import keras
from keras import ops

from keras_attention import _policies
from keras_attention import _validation
from keras_attention.layers import _cache
from keras_attention.layers import _cache_call
from keras_attention.layers import _latent_rope
from keras_attention.layers import _layer_call
from keras_attention.layers import _logit_activation
from keras_attention.layers import _mods
from keras_attention.layers import _projections
from keras_attention.layers._latent_cache import LatentCache
from keras_attention.layers._latent_projections import LatentProjections
from keras_attention.layers._layer_call import LayerCall
from keras_attention.layers._multi_head_base import MultiHeadBase
from keras_attention.ops import checks as ops_checks

# The engine's options MLA takes; its projections have no biases and no
# gate, its rotary part, score and head sizes are its own.
_TAKES = (
    "dropout",
    "kernel_initializer",
    "kernel_regularizer",
    "activity_regularizer",
    "kernel_constraint",
    "seed",
    "chunk_size",
    "attention_activation",
    "penalty_coefficient",
    "score_mod",
    "mask_mod",
    "use_sinks",
)


def _even(name, value):
    value = _validation.positive_int(name, value)
    if value % 2:
        raise _validation.invalid(
            name, value, "an even positive integer (rotary pairs)"
        )
    return value


@keras.saving.register_keras_serializable(package="keras_attention")
class MultiHeadLatentAttention(
    LatentProjections, MultiHeadBase, hooks_are_defaults=True
):
    """Multi-head latent attention (DeepSeek-V2, Liu et al. 2024).

    Each position `h_t` is compressed to a latent `c_t = RMSNorm(W_DKV
    h_t)` of `kv_lora_rank` features; head `i`'s key and value are
    up-projections of it, `k^C_{t,i} = W_UK_i c_t` (`qk_nope_head_dim`)
    and `v_{t,i} = W_UV_i c_t` (`v_head_dim`). Position enters through a
    decoupled rotary part: one key `k^R_t = RoPE(W_KR h_t)`
    (`qk_rope_head_dim`) shared by every head, and per head a rotary query
    `q^R_{t,i}`. The query is `W_Q h_t`, or with `q_lora_rank` the
    up-projection of its own latent `c^Q_t = RMSNorm(W_DQ h_t)`. Head `i`
    attends with `q_{t,i} = [q^C_{t,i}; q^R_{t,i}]` and `k_{s,i} =
    [k^C_{s,i}; k^R_s]`, scaled by `1 / sqrt(qk_nope_head_dim +
    qk_rope_head_dim)`, and the heads' outputs are projected by `W_O`.

    The cache holds only `[c_t; k^R_t]`, `kv_lora_rank + qk_rope_head_dim`
    numbers a position whatever the number of heads, against `2 · heads ·
    head_dim` for multi-head attention. With `absorb=True` (the default
    with a cache) `W_UK` is absorbed into the query, `q'_i = W_UK_iᵀ
    q^C_i`, and `W_UV` into the output, so the heads attend over the
    latent itself, as one shared key/value head (the paper's inference
    form): the keys and values are never up-projected. Both forms give
    the same result.

    The rotary part pairs its features as `RotaryEmbedding` does: by
    default the two halves, `(x_i, x_{i + d/2})`; DeepSeek's own code and
    checkpoints rotate adjacent pairs `(x_{2i}, x_{2i+1})`, so load them
    with `rope_interleaved=True`, or de-interleave the rotary output
    columns of `W_Q` (per head) and of `W_KR` (the last
    `qk_rope_head_dim` columns of `kv_down`) once (docs/layers.md). With
    `rope_type="yarn"` (DeepSeek-V3's code: factor 40 over 4,096
    positions) YaRN's attention factor `m` is not applied to the rotated
    features: as in DeepSeek's code, `m²` multiplies the softmax scale of
    every logit, `m² / sqrt(qk_nope_head_dim + qk_rope_head_dim)`.
    (DeepSeek's code scales only when its `max_seq_len` exceeds the
    original length; here `rope_type="yarn"` always does.)

    It runs on the multi-head engine of `MultiHeadAttention` (its own
    projections, cache layout and output): masks and mods as there, the
    path from `keras_attention.ops.plan_attention` (fused, dense, or in
    blocks with memory linear in the length, `chunk_size`).

    Args:
        num_heads: Number of attention heads.
        kv_lora_rank: Size of the key/value latent `c_t`.
        qk_nope_head_dim: Size of each head's key and query part without
            positions.
        qk_rope_head_dim: Size of the rotary part of each query and of the
            shared rotary key; even.
        v_head_dim: Size of each head's value.
        q_lora_rank: Optional size of the query latent; `None` projects
            the query directly. Defaults to `None`.
        output_dim: Size of the output. Defaults to the input's last axis.
        dropout: Dropout rate on the attention weights. Defaults to `0.0`.
        layer_norm_epsilon: Epsilon of the latents' RMS normalisations.
            Defaults to `1e-6`.
        rope_max_wavelength: `RotaryEmbedding`'s `max_wavelength`.
            Defaults to `10000`.
        rope_scaling_factor: `RotaryEmbedding`'s `scaling_factor`.
            Defaults to `1.0`.
        rope_type: `RotaryEmbedding`'s `rope_type`: `"linear"`,
            `"llama3"` or `"yarn"`. Defaults to `"linear"`.
        rope_original_max_position_embeddings: `RotaryEmbedding`'s
            `original_max_position_embeddings`. Defaults to `None`.
        rope_low_freq_factor: `RotaryEmbedding`'s `low_freq_factor`.
            Defaults to `1.0`.
        rope_high_freq_factor: `RotaryEmbedding`'s `high_freq_factor`.
            Defaults to `4.0`.
        rope_beta_fast: `RotaryEmbedding`'s `beta_fast`. Defaults to
            `32.0`.
        rope_beta_slow: `RotaryEmbedding`'s `beta_slow`. Defaults to
            `1.0`.
        rope_attention_factor: YaRN's `m`, folded into the softmax scale
            as `m²`. Defaults to `None`: `0.1 · ln(rope_scaling_factor) +
            1` with `"yarn"` (DeepSeek's `mscale` `c` is `0.1 · c ·
            ln(s) + 1`), else none.
        rope_interleaved: `RotaryEmbedding`'s `interleaved`: whether the
            rotary pairs are adjacent features (DeepSeek's checkpoints).
            Defaults to `False`.
        chunk_size: `None` (blocks where the dense weights would pass 2
            GiB), `0` (dense) or the queries and keys per block.
            Defaults to `None`.
        score_mod: Optional score mod `score_mod(score, batch, head, q_idx,
            kv_idx)` (`keras_attention.ops.mods`), saved in the config.
        mask_mod: Optional mask mod `mask_mod(batch, head, q_idx, kv_idx)`.
        kernel_initializer: Initializer of every projection. Defaults to
            `"glorot_uniform"`.
        seed: Seed of the dropout. Defaults to `None`.
        use_sinks: As `MultiHeadAttention`'s: a learned sink logit per
            head (gpt-oss), a weight `sinks` of shape `(num_heads,)`.
            Defaults to `False`.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`;
            and the engine's `kernel_regularizer`, `kernel_constraint`,
            `activity_regularizer` (of every projection),
            `attention_activation` and `penalty_coefficient`, as
            `MultiHeadAttention`'s.

    Call arguments:
        query: `(batch_size, Tq, dim)`.
        value: Optional `(batch_size, Tv, dim)` the latent is made from.
            Defaults to `query` (self-attention, the paper's form).
        query_mask: Optional boolean `(batch_size, Tq)`.
        value_mask: Optional boolean `(batch_size, Tv)`.
        attention_mask: Optional boolean `(batch_size, Tq, Tv)`; with a
            cache, `(batch_size, Tq, max_length)`.
        use_causal_mask: Whether query `i` only sees keys `j <= i` (with a
            cache, the slots up to its absolute position).
        return_attention_scores: Whether to also return the weights
            `(batch_size, num_heads, Tq, Tv)`.
        training: Whether dropout is active.
        cache: Optional `(batch_size, max_length, kv_lora_rank +
            qk_rope_head_dim)`: each slot's normalised latent, then its
            rotated key. With `cache_update_index` the call's positions
            are written from there first; without it the cache is
            attended as it is (keras-hub's `CachedMultiHeadAttention`
            semantics). The padding masks do not apply to a cache.
        cache_update_index: The position of the call's first query in the
            cache (an integer or a scalar integer tensor).
        score_mod, mask_mod: Optional mods of this call (after the
            constructor's); `q_idx` is the absolute position with a cache.
        attention_bias: Optional float tensor added to the logits,
            broadcastable to `(batch_size, num_heads, Tq, Tv)`.
        absorb: Whether to absorb the up-projections (see above). Defaults
            to `None`: with a cache.

    Returns:
        The output `(batch_size, Tq, output_dim)`, then the weights with
        `return_attention_scores=True`, then the updated cache if one was
        given.

    Example:

    >>> layer = keras_attention.MultiHeadLatentAttention(
    ...     num_heads=4, kv_lora_rank=16, qk_nope_head_dim=8,
    ...     qk_rope_head_dim=4, v_head_dim=8,
    ... )
    >>> x = np.random.rand(2, 6, 32).astype("float32")
    >>> tuple(layer(x, use_causal_mask=True).shape)
    (2, 6, 32)
    >>> cache = np.zeros((2, 10, 16 + 4), "float32")
    >>> out, cache = layer(x[:, :1], cache=cache, cache_update_index=0)
    >>> tuple(out.shape), tuple(cache.shape)
    ((2, 1, 32), (2, 10, 20))

    References:
        - [DeepSeek-AI, 2024, DeepSeek-V2](https://arxiv.org/abs/2405.04434)
    """

    takes = _TAKES

    def __init__(
        self,
        num_heads,
        kv_lora_rank,
        qk_nope_head_dim,
        qk_rope_head_dim,
        v_head_dim,
        q_lora_rank=None,
        output_dim=None,
        dropout=0.0,
        layer_norm_epsilon=1e-6,
        rope_max_wavelength=10000,
        rope_scaling_factor=1.0,
        rope_type="linear",
        rope_original_max_position_embeddings=None,
        rope_low_freq_factor=1.0,
        rope_high_freq_factor=4.0,
        rope_beta_fast=32.0,
        rope_beta_slow=1.0,
        rope_attention_factor=None,
        rope_interleaved=False,
        chunk_size=None,
        score_mod=None,
        mask_mod=None,
        kernel_initializer="glorot_uniform",
        seed=None,
        use_sinks=False,
        **kwargs,
    ):
        positive = _validation.positive_int
        nope = positive("qk_nope_head_dim", qk_nope_head_dim)
        rope = _even("qk_rope_head_dim", qk_rope_head_dim)
        self._refuse_untaken(kwargs)
        super().__init__(
            num_heads,
            key_dim=nope + rope,
            value_dim=positive("v_head_dim", v_head_dim),
            dropout=dropout,
            use_bias=False,
            kernel_initializer=kernel_initializer,
            seed=seed,
            # The queries come pre-scaled by 1 / sqrt(nope + rope): the
            # absorbed queries have another depth.
            score="dot",
            chunk_size=chunk_size,
            score_mod=score_mod,
            mask_mod=mask_mod,
            use_sinks=use_sinks,
            **kwargs,
        )
        self.kv_lora_rank = positive("kv_lora_rank", kv_lora_rank)
        self.qk_nope_head_dim, self.qk_rope_head_dim = nope, rope
        self.v_head_dim = v_head_dim
        self.q_lora_rank = positive("q_lora_rank", q_lora_rank, True)
        self.output_dim = positive("output_dim", output_dim, True)
        self.layer_norm_epsilon = _validation.positive_number(
            "layer_norm_epsilon", layer_norm_epsilon
        )
        self.rope_attention_factor = _latent_rope.attention_factor_arg(
            rope_type, rope_attention_factor
        )
        self.rotary_embedding = _latent_rope.rotary(
            dict(
                max_wavelength=rope_max_wavelength,
                scaling_factor=rope_scaling_factor,
                rope_type=rope_type,
                original_max_position_embeddings=(
                    rope_original_max_position_embeddings
                ),
                low_freq_factor=rope_low_freq_factor,
                high_freq_factor=rope_high_freq_factor,
                beta_fast=rope_beta_fast,
                beta_slow=rope_beta_slow,
                interleaved=rope_interleaved,
            ),
            rope_attention_factor,
            self.dtype_policy,
        )
        self._check_plan()

    @property
    def cache_dim(self):
        """Numbers a position in the cache: the latent and the rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    cache_kinds = (LatentCache,)

    def cache_spec(self):
        """What its cache must match: `(batch_size, max_length,
        cache_dim)`."""
        return _cache.CacheSpec(type(self).__name__, width=self.cache_dim)

    def _project(self, query, value, key, cache, layout=None):
        """The heads: the query's (pre-scaled), and the latents' keys and
        values, up-projected or (absorbed) the latent itself."""
        start = 0 if cache is None else cache.start
        q_nope, q_rope = self._queries(query, start)
        if cache is not None and not cache.writes:
            (latents,) = cache.read()
        else:
            latents = self._latents(value, start)
            if cache is not None:
                (latents,) = cache.write(latents)
        q, k, v = self._heads(q_nope, q_rope, latents, layout == "absorbed")
        scale = 1.0 / float(self.qk_nope_head_dim + self.qk_rope_head_dim)
        # Only the queries are scaled: by YaRN's m², so the logits are.
        scale = scale**0.5 * _latent_rope.logit_factor(
            self.rotary_embedding, self.rope_attention_factor
        )
        return q * ops.cast(scale, q.dtype), k, v

    def _project_out(self, context, query, layout=None):
        """`W_UV` (absorbed: the heads attended over the latent), then
        `W_O`."""
        if layout == "absorbed":
            value_up = ops.cast(self.value_up_kernel, context.dtype)
            context = ops.einsum("bthr,rhv->bthv", context, value_up)
        return self._output_dense(ops.cast(context, self.compute_dtype))

    def call(
        self,
        query,
        value=None,
        query_mask=None,
        value_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        cache=None,
        cache_update_index=None,
        score_mod=None,
        mask_mod=None,
        attention_bias=None,
        absorb=None,
    ):
        name = type(self).__name__
        value = query if value is None else value
        ops_checks.floating(name, query=query, value=value)
        self._check_shapes(query.shape, value.shape)
        absorb = cache is not None if absorb is None else bool(absorb)
        return self._attention_call(
            LayerCall(
                query,
                value,
                query_mask=query_mask,
                value_mask=value_mask,
                attention_mask=attention_mask,
                use_causal_mask=bool(use_causal_mask),
                cache=cache,
                cache_update_index=cache_update_index,
                training=training,
                return_weights=return_attention_scores,
                score_mod=score_mod,
                mask_mod=mask_mod,
                attention_bias=attention_bias,
                layout="absorbed" if absorb else "expanded",
            )
        )

    def compute_output_shape(self, query_shape, value_shape=None):
        return tuple(query_shape[:-1]) + (self.output_dim or query_shape[-1],)

    def compute_output_spec(
        self,
        query,
        value=None,
        return_attention_scores=False,
        cache=None,
        cache_update_index=None,
        **kwargs,
    ):
        value = query if value is None else value
        self._check_shapes(query.shape, value.shape)
        _cache_call.check_no_index(
            type(self).__name__, cache, cache_update_index
        )
        dtype = self.compute_dtype
        output = keras.KerasTensor(
            self.compute_output_shape(query.shape), dtype=dtype
        )
        key_length = value.shape[1] if cache is None else cache.shape[1]
        weights = keras.KerasTensor(
            (query.shape[0], self.num_heads, query.shape[1], key_length),
            dtype=dtype,
        )
        cache = _cache_call.output_spec(cache)
        return _layer_call.outputs(
            output, weights, cache, return_attention_scores
        )

    def get_config(self):
        rotary = self.rotary_embedding
        return {
            **keras.layers.Layer.get_config(self),
            "num_heads": self.num_heads,
            "kv_lora_rank": self.kv_lora_rank,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "v_head_dim": self.v_head_dim,
            "q_lora_rank": self.q_lora_rank,
            "output_dim": self.output_dim,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            **_latent_rope.config(rotary, self.rope_attention_factor),
            "chunk_size": self.chunk_size,
            "score_mod": _mods.serialize("score_mod", self.score_mod),
            "mask_mod": _mods.serialize("mask_mod", self.mask_mod),
            **{
                key: value
                for key, value in _projections.projection_config(self).items()
                if not key.startswith("bias")
            },
            "attention_activation": _logit_activation.serialize(
                self.attention_activation
            ),
            "penalty_coefficient": self.penalty_coefficient,
            "seed": self.seed,
            "use_sinks": self.use_sinks,
            "dtype": self._dtype_policy_config(),
        }

    def _dtype_policy_config(self):
        """The dtype policy, with the projections' own after `quantize`."""
        if not self.built:
            return keras.dtype_policies.serialize(self.dtype_policy)
        denses = [
            getattr(self, "_query_down", None),
            self._query_dense,
            self._kv_down,
            self._output_dense,
        ]
        return _policies.policy_config(self, denses)
