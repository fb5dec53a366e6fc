"""The weights of `MultiHeadLatentAttention` and the heads they make
(private module): the down-projections and their norms, `W_UK` and `W_UV`
as weights of the layer (absorption multiplies by them from the other
side), the output projection, and the queries, latents and heads of one
call from them.

`LatentProjections` is the projections half of the layer's class; the
layer (`latent.py`) holds the options, the cache and the call."""

import keras
from keras import ops

from keras_attention.layers import _projections
from keras_attention.layers import _sharding


class LatentProjections:
    """MLA's sublayers and weights, built from its options, and the heads
    of a call. Mixed into `MultiHeadLatentAttention` before the engine's
    base."""

    def _latent_dense(self, name, equation, output_shape):
        kwargs = self._get_common_kwargs_for_sublayer()
        for bias in ("bias_initializer", "bias_regularizer", "bias_constraint"):
            kwargs.pop(bias)
        return keras.layers.EinsumDense(
            equation, output_shape=output_shape, name=name, **kwargs
        )

    def _up_kernel(self, name, shape):
        return self.add_weight(
            name=name,
            shape=shape,
            initializer=_projections.clone_initializer(self.kernel_initializer),
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )

    def _norm(self, name):
        return keras.layers.RMSNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def build(self, query_shape, value_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        self._check_shapes(query_shape, value_shape)
        _sharding.check_heads(self, self.num_heads)
        heads, dim = self.num_heads, query_shape[-1]
        q_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank is None:
            self._query_dense = self._latent_dense(
                "query", "btd,dhk->bthk", (None, heads, q_dim)
            )
            self._query_dense.build(query_shape)
        else:
            self._query_down = self._latent_dense(
                "query_down", "btd,dr->btr", (None, self.q_lora_rank)
            )
            self._query_down.build(query_shape)
            self._query_norm = self._norm("query_norm")
            latent = tuple(query_shape[:-1]) + (self.q_lora_rank,)
            self._query_norm.build(latent)
            self._query_dense = self._latent_dense(
                "query", "btr,rhk->bthk", (None, heads, q_dim)
            )
            self._query_dense.build(latent)
        self._kv_down = self._latent_dense(
            "kv_down", "btd,dr->btr", (None, self.cache_dim)
        )
        self._kv_down.build(value_shape)
        self._kv_norm = self._norm("kv_norm")
        self._kv_norm.build(tuple(value_shape[:-1]) + (self.kv_lora_rank,))
        # W_UK and W_UV are weights of the layer, not sublayers: absorption
        # multiplies by them from the other side.
        self.key_up_kernel = self._up_kernel(
            "key_up_kernel", (self.kv_lora_rank, heads, self.qk_nope_head_dim)
        )
        self.value_up_kernel = self._up_kernel(
            "value_up_kernel", (self.kv_lora_rank, heads, self.v_head_dim)
        )
        self._output_dense = self._latent_dense(
            "attention_output",
            "bthv,hvd->btd",
            (None, self.output_dim or dim),
        )
        self._output_dense.build(
            tuple(query_shape[:-1]) + (heads, self.v_head_dim)
        )
        self._track_late((query_shape[0], heads, None, q_dim))

    def _check_shapes(self, query_shape, value_shape):
        name = type(self).__name__
        for arg, shape in (("query", query_shape), ("value", value_shape)):
            if len(shape) != 3 or shape[-1] is None:
                raise ValueError(
                    f"{name} expects `{arg}` of shape `(batch_size, T, dim)` "
                    f"with a known `dim`. Received: {arg}.shape={tuple(shape)}"
                )
        if query_shape[-1] != value_shape[-1]:
            raise ValueError(
                f"{name} makes its keys and queries from inputs of one size. "
                f"Received: query.shape={tuple(query_shape)}, "
                f"value.shape={tuple(value_shape)}"
            )

    def _queries(self, query, start):
        """`(q_nope, q_rope)`, `(B, Tq, H, ·)`, the rotary part rotated."""
        hidden = query
        if self.q_lora_rank is not None:
            hidden = self._query_norm(self._query_down(query))
        q = self._query_dense(hidden)
        nope, rope = ops.split(q, [self.qk_nope_head_dim], axis=-1)
        return nope, self.rotary_embedding(rope, start_index=start)

    def _latents(self, value, start):
        """`[c; k^R]` of each position, `(B, Tv, cache_dim)`."""
        down = self._kv_down(value)
        latent, rope = ops.split(down, [self.kv_lora_rank], axis=-1)
        rope = self.rotary_embedding(rope, start_index=start)
        return ops.concatenate([self._kv_norm(latent), rope], axis=-1)

    def _heads(self, q_nope, q_rope, latents, absorb):
        """`(q, k, v)` for `flex_attention`, and whether `v` is the latent
        (the output then still needs `W_UV`)."""
        latent, k_rope = ops.split(latents, [self.kv_lora_rank], axis=-1)
        dtype = self.compute_dtype
        key_up = ops.cast(self.key_up_kernel, dtype)
        if absorb:
            q = ops.einsum("bthn,rhn->bthr", q_nope, key_up)
            q = ops.concatenate([q, q_rope], axis=-1)
            return q, latents[:, :, None, :], latent[:, :, None, :]
        k_nope = ops.einsum("bsr,rhn->bshn", latent, key_up)
        shared = ops.broadcast_to(
            k_rope[:, :, None, :],
            ops.shape(k_nope)[:-1] + (self.qk_rope_head_dim,),
        )
        value_up = ops.cast(self.value_up_kernel, dtype)
        v = ops.einsum("bsr,rhv->bshv", latent, value_up)
        q = ops.concatenate([q_nope, q_rope], axis=-1)
        return q, ops.concatenate([k_nope, shared], axis=-1), v
