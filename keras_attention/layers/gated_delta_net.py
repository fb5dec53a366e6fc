"""Gated DeltaNet, the linear-attention layer of Qwen3-Next and Qwen3.5."""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention.layers import _cache
from keras_attention.layers import _cache_call
from keras_attention.layers._gated_delta_cache import GatedDeltaCache
from keras_attention.ops import checks
from keras_attention.ops.gated_delta import gated_delta_rule

# keras-hub's L2 normalisation of the query and key, `x · rsqrt(Σx² + ε)`.
_L2_EPSILON = 1e-6


def _l2_normalize(x):
    return x * ops.rsqrt(ops.sum(x * x, axis=-1, keepdims=True) + _L2_EPSILON)


def _last_inputs(padded, valid, width):
    """The last `width` valid rows of `padded (batch, width + T, C)` (its
    first `width` rows: the state before the call): the convolution's next
    state. Rows end where the last valid position is (right padding)."""
    length = ops.shape(padded)[1] - width
    if valid is None:
        return padded[:, length:]
    positions = ops.arange(1, length + 1, dtype="int32")
    end = ops.max(ops.where(valid, positions, 0), axis=1)
    index = end[:, None] + ops.arange(width, dtype="int32")[None, :]
    return ops.take_along_axis(padded, index[:, :, None], axis=1)


@keras.saving.register_keras_serializable(package="keras_attention")
class GatedDeltaNet(keras.layers.Layer):
    """Gated DeltaNet: linear attention with a gated delta-rule state.

    Qwen3-Next's and Qwen3.5's linear-attention layer (Yang, Kautz &
    Hatamizadeh, 2024). The input is projected to queries, keys and values
    (`in_proj_qkv`), which pass a short depthwise causal convolution
    (`conv1d_kernel`) and SiLU; queries and keys are L2-normalised per head.
    Per value head, a decay `g = −exp(A_log) · softplus(a + dt_bias)` and a
    write strength `β = sigmoid(b)` (`in_proj_a`, `in_proj_b`) drive
    `keras_attention.ops.gated_delta_rule`; its output passes a per-head
    RMSNorm (`norm`) gated by `silu(z)` (`in_proj_z`) and the output
    projection (`out_proj`). The weights are keras-hub's
    `Qwen3_5GatedDeltaNet`'s, in its order and under its names, so
    `layer.set_weights(hub_layer.get_weights())` reproduces it.

    With `per_channel_decay=True` the decay is one per key channel, as in
    Kimi Delta Attention (KDA, Kimi Linear): `in_proj_a` and `dt_bias` give
    `g (batch, T, value_heads, key_head_dim)`, each row of the state
    decaying on its own. The rest of the layer stays Qwen3.5's (Kimi
    Linear's own layer also has a convolution per projection, low-rank
    gate projections and a sigmoid output gate), so that option does not
    load Kimi Linear's weights.

    Beyond keras-hub's layer: padded positions (a Keras mask or `mask=`)
    neither decay nor write the state and are not seen by the convolution,
    so each row equals its unpadded self, left or right padded; and the
    chunked op is one compiled loop over the chunks.

    Args:
        num_key_heads: Heads of the queries and keys.
        key_head_dim: Size of each query and key head.
        num_value_heads: Heads of the values (and of the state), a
            multiple of `num_key_heads`. Defaults to `num_key_heads`.
        value_head_dim: Size of each value head. Defaults to
            `key_head_dim`.
        conv_kernel_size: Width of the causal convolution. Defaults to `4`.
        norm_epsilon: Epsilon of the output's RMSNorm. Defaults to `1e-6`.
        chunk_size: Positions per chunk of the op. Defaults to `64`.
        per_channel_decay: Whether the decay is one per key channel, as
            Kimi Delta Attention's (KDA, Kimi Linear), instead of one per
            value head: `in_proj_a` then gives `num_value_heads ·
            key_head_dim` values and `dt_bias` has as many, `A_log` stays
            one per value head. Defaults to `False` (Qwen3.5's).
        kernel_initializer: Initializer of the projections. Defaults to
            `"glorot_uniform"`.
        **kwargs: Base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: `(batch_size, time, features)`.
        mask: Boolean `(batch_size, time)`, `True` for real positions; a
            Keras mask on `inputs` is used automatically.
        cache: `None`, a `keras_attention.GatedDeltaCache`, or keras-hub's
            tuple `(conv_state, recurrent_state)`: the state before the
            call's first position.
        cache_update_index: Accepted for the cache interface and ignored
            (the state has no positions).
        training: Unused (no dropout).

    Returns:
        The output `(batch_size, time, features)` (zeros at padded
        positions), or `(output, cache)` with a cache (of the kind given)
        holding the state after the call.

    Example:

    >>> layer = keras_attention.GatedDeltaNet(
    ...     num_key_heads=2, key_head_dim=8, num_value_heads=4
    ... )
    >>> x = np.random.rand(2, 10, 16).astype("float32")
    >>> tuple(layer(x).shape)
    (2, 10, 16)

    References:
        - [Yang, Kautz & Hatamizadeh, 2024, Gated Delta Networks:
          Improving Mamba2 with Delta Rule](https://arxiv.org/abs/2412.06464)
        - [keras-hub's `Qwen3_5GatedDeltaNet`](https://github.com/keras-team/keras-hub/blob/master/keras_hub/src/models/qwen3_5/qwen3_5_gated_delta_net.py)
    """

    def __init__(
        self,
        num_key_heads,
        key_head_dim,
        num_value_heads=None,
        value_head_dim=None,
        conv_kernel_size=4,
        norm_epsilon=1e-6,
        chunk_size=64,
        per_channel_decay=False,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        positive = _validation.positive_int
        self.num_key_heads = positive("num_key_heads", num_key_heads)
        self.key_head_dim = positive("key_head_dim", key_head_dim)
        self.num_value_heads = positive(
            "num_value_heads", num_value_heads, allow_none=True
        )
        self.value_head_dim = positive(
            "value_head_dim", value_head_dim, allow_none=True
        )
        heads = self.num_value_heads or self.num_key_heads
        if heads % self.num_key_heads:
            raise _validation.invalid(
                "num_value_heads",
                num_value_heads,
                f"a multiple of num_key_heads={num_key_heads}",
            )
        self.conv_kernel_size = positive("conv_kernel_size", conv_kernel_size)
        self.norm_epsilon = _validation.non_negative(
            "norm_epsilon", norm_epsilon
        )
        self.chunk_size = positive("chunk_size", chunk_size)
        if not isinstance(per_channel_decay, bool):
            raise _validation.invalid(
                "per_channel_decay", per_channel_decay, "a boolean"
            )
        self.per_channel_decay = per_channel_decay
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True

    @property
    def _heads(self):
        """`(key heads, value heads, key size, value size)`."""
        return (
            self.num_key_heads,
            self.num_value_heads or self.num_key_heads,
            self.key_head_dim,
            self.value_head_dim or self.key_head_dim,
        )

    @property
    def conv_dim(self):
        """Channels of the convolution: the queries, keys and values."""
        key_heads, value_heads, key_dim, value_dim = self._heads
        return 2 * key_heads * key_dim + value_heads * value_dim

    def cache_spec(self):
        """What a `GatedDeltaCache` of this layer must match."""
        _, value_heads, key_dim, value_dim = self._heads
        return _cache.CacheSpec(
            layer_name=type(self).__name__,
            kv_heads=value_heads,
            key_dim=key_dim,
            value_dim=value_dim,
            window=self.conv_kernel_size - 1,
            width=self.conv_dim,
        )

    def _dense(self, units, name, input_shape):
        dense = keras.layers.Dense(
            units,
            use_bias=False,
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name=name,
        )
        dense.build(input_shape)
        return dense

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "GatedDeltaNet expects inputs `(batch_size, time, features)`"
                f" with known features. Received: inputs.shape={input_shape}"
            )
        _, value_heads, key_dim, value_dim = self._heads
        decays = (
            value_heads * key_dim if self.per_channel_decay else value_heads
        )
        self.in_proj_qkv = self._dense(
            self.conv_dim, "in_proj_qkv", input_shape
        )
        self.in_proj_z = self._dense(
            value_heads * value_dim, "in_proj_z", input_shape
        )
        self.in_proj_b = self._dense(value_heads, "in_proj_b", input_shape)
        self.in_proj_a = self._dense(decays, "in_proj_a", input_shape)
        self.conv1d_kernel = self.add_weight(
            name="conv1d_kernel",
            shape=(self.conv_dim, self.conv_kernel_size),
            initializer="glorot_uniform",
        )
        self.dt_bias = self.add_weight(
            name="dt_bias", shape=(decays,), initializer="ones"
        )
        self.A_log = self.add_weight(
            name="A_log", shape=(value_heads,), initializer="zeros"
        )
        # The RMSNorm runs in float32 under mixed precision, as keras-hub's.
        self.norm = keras.layers.RMSNormalization(
            epsilon=self.norm_epsilon, dtype="float32", name="norm"
        )
        self.norm.build((None, value_dim))
        self.out_proj = self._dense(
            input_shape[-1], "out_proj", (None, None, value_heads * value_dim)
        )

    def _convolve(self, mixed, state, valid):
        """The causal depthwise convolution and SiLU over the state's last
        inputs and the call's; and the convolution's next state."""
        width = self.conv_kernel_size - 1
        if valid is not None:
            mixed = ops.where(valid[..., None], mixed, ops.zeros_like(mixed))
        padded = ops.concatenate([ops.transpose(state, (0, 2, 1)), mixed], 1)
        length = ops.shape(mixed)[1]
        kernel = ops.cast(self.conv1d_kernel, mixed.dtype)
        out = sum(
            padded[:, j : j + length] * kernel[:, j]
            for j in range(self.conv_kernel_size)
        )
        last = _last_inputs(padded, valid, width)
        return ops.silu(out), ops.transpose(last, (0, 2, 1))

    def _gates(self, inputs, valid):
        """`g` `(batch, T, value_heads[, key_head_dim])` and `β` `(batch,
        T, value_heads)`, float32; padded positions neither decay nor
        write."""
        a = ops.cast(self.in_proj_a(inputs), "float32")
        beta = ops.sigmoid(ops.cast(self.in_proj_b(inputs), "float32"))
        rate = ops.exp(ops.cast(self.A_log, "float32"))
        g = ops.softplus(a + ops.cast(self.dt_bias, "float32"))
        if self.per_channel_decay:
            _, value_heads, key_dim, _ = self._heads
            shape = ops.shape(a)[:2] + (value_heads, key_dim)
            g = -rate[:, None] * ops.reshape(g, shape)
        else:
            g = -rate * g
        if valid is not None:
            kept = valid[..., None]
            beta = ops.where(kept, beta, 0.0)
            g = ops.where(
                kept[..., None] if self.per_channel_decay else kept, g, 0.0
            )
        return g, beta

    def _open(self, cache, index, inputs):
        """The call's `CacheCall` (the state before it), or `None`."""
        if cache is None:
            _cache_call.check_no_index(type(self).__name__, None, index)
            return None
        if not isinstance(cache, GatedDeltaCache):
            cache = GatedDeltaCache(*cache)
        shape = tuple(inputs.shape)
        return _cache_call.CacheCall(
            cache,
            index,
            self.cache_spec(),
            shape[0],
            shape[1],
            self.compute_dtype,
        )

    def call(
        self,
        inputs,
        mask=None,
        cache=None,
        cache_update_index=None,
        training=None,
    ):
        key_heads, value_heads, key_dim, value_dim = self._heads
        checks.positions(type(self).__name__, inputs=inputs.shape)
        opened = self._open(cache, cache_update_index, inputs)
        valid = None if mask is None else ops.cast(mask, "bool")
        batch, length = ops.shape(inputs)[0], ops.shape(inputs)[1]
        if opened is None:
            conv_state = ops.zeros(
                (batch, self.conv_dim, self.conv_kernel_size - 1),
                self.compute_dtype,
            )
            state = None
        else:
            conv_state, state = opened.read()
        mixed, conv_state = self._convolve(
            self.in_proj_qkv(inputs), conv_state, valid
        )
        split = (key_heads * key_dim, 2 * key_heads * key_dim)
        query, key, value = ops.split(mixed, split, axis=-1)
        query = _l2_normalize(
            ops.reshape(query, (batch, length, key_heads, key_dim))
        )
        key = _l2_normalize(
            ops.reshape(key, (batch, length, key_heads, key_dim))
        )
        value = ops.reshape(value, (batch, length, value_heads, value_dim))
        g, beta = self._gates(inputs, valid)
        out, state = gated_delta_rule(
            query,
            key,
            value,
            g,
            beta,
            initial_state=state,
            output_final_state=True,
            chunk_size=self.chunk_size,
        )
        out = ops.cast(self.norm(ops.cast(out, "float32")), self.compute_dtype)
        z = ops.reshape(self.in_proj_z(inputs), ops.shape(out))
        out = ops.reshape(out * ops.silu(z), (batch, length, -1))
        output = self.out_proj(out)
        if valid is not None:
            output = ops.where(valid[..., None], output, ops.zeros_like(output))
        if opened is None:
            return output
        opened.write(conv_state, state)
        if isinstance(cache, GatedDeltaCache):
            return output, opened.result
        return output, opened.result.tensors

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def compute_output_spec(self, inputs, cache=None, **kwargs):
        output = keras.KerasTensor(inputs.shape, self.compute_dtype)
        if cache is None:
            return output
        if isinstance(cache, GatedDeltaCache):
            return output, _cache_call.output_spec(cache)
        return output, tuple(_cache_call.output_spec(t) for t in cache)

    def get_config(self):
        config = {
            "num_key_heads": self.num_key_heads,
            "key_head_dim": self.key_head_dim,
            "num_value_heads": self.num_value_heads,
            "value_head_dim": self.value_head_dim,
            "conv_kernel_size": self.conv_kernel_size,
            "norm_epsilon": self.norm_epsilon,
            "chunk_size": self.chunk_size,
            "per_channel_decay": self.per_channel_decay,
            "kernel_initializer": keras.initializers.serialize(
                self.kernel_initializer
            ),
        }
        return {**super().get_config(), **config}
