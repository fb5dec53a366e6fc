"""Monotonic attention (Raffel et al., 2017), as tfa's monotonic mechanisms.

At output step `i` the decoder scans the memory from where it stopped at
step `i - 1`, and at each position `j` stops with probability
`p_ij = σ(e_ij + r)` (`e_ij` the score, `r` a learnt scalar bias). Training
uses the expected alignment of this process (Raffel et al., eq. 9-10):

    q_ij = (1 − p_i,j−1) q_i,j−1 + α_i−1,j        (q_i,−1 = 0)
    α_ij = p_ij q_ij

computed in one of three modes, as in tfa:

- `"recursive"`: the recurrence itself, unrolled into exact products
  (`O(source_time²)` per step, no division);
- `"parallel"`: the closed form with cumulative products,
  `α_i = p_i ⊙ cumprod_excl(1 − p_i) ⊙ cumsum(α_i−1 / cumprod_excl(1 − p_i))`
  with the products clipped to `[1e-10, 1]` (fast, less exact when some
  `p_ij` is close to 1);
- `"hard"`: `p_ij = [e_ij + r > 0]` and the alignment is one-hot at the
  first position at or after the previous one where `p_ij = 1` (all
  zero, for good, when there is none): the test-time process.

The initial alignment is one-hot on the first source position, so the
scan starts there. Padded source positions have `p_ij = 0` and get weight
exactly 0; the weights of a step sum to at most 1 (the rest is the
probability of having stopped nowhere).
"""

import keras
from keras import ops

from keras_attention import _validation
from keras_attention.seq2seq import checks
from keras_attention.seq2seq._noise_seeds import seed_range
from keras_attention.seq2seq.attention import BahdanauAttention
from keras_attention.seq2seq.attention import LuongAttention
from keras_attention.seq2seq.attention import check_memory_mask

_PACKAGE = "keras_attention"
MODES = ("parallel", "recursive", "hard")


def _exclusive_cumprod(x):
    """`[1, x_0, x_0 x_1, ...]` along the last axis."""
    ones = ops.ones_like(x[..., :1])
    return ops.cumprod(ops.concatenate([ones, x[..., :-1]], axis=-1), axis=-1)


def monotonic_alignments(p_choose, previous_alignments, mode):
    """The expected (or hard) monotonic alignments of one decoder step.

    Args:
        p_choose: `(batch_size, source_time)` stopping probabilities `p_ij`.
        previous_alignments: `(batch_size, source_time)`, `α_{i−1}`.
        mode: `"recursive"`, `"parallel"` or `"hard"`.

    Returns:
        `α_i`, `(batch_size, source_time)`.

    Example:

    >>> p_choose = np.array([[0.0, 1.0, 1.0]], "float32")  # stop at 1
    >>> previous = np.array([[1.0, 0.0, 0.0]], "float32")
    >>> alignments = keras_attention.seq2seq.monotonic_alignments(
    ...     p_choose, previous, "recursive"
    ... )
    >>> np.asarray(alignments).tolist()
    [[0.0, 1.0, 0.0]]
    """
    p_choose, previous_alignments = checks.alignment_inputs(
        p_choose, previous_alignments, mode, MODES
    )
    if mode == "hard":
        # No stop before the previous position, then the first stop only.
        p_choose = p_choose * ops.cumsum(previous_alignments, axis=-1)
        return p_choose * _exclusive_cumprod(1.0 - p_choose)
    if mode == "parallel":
        kept = ops.clip(_exclusive_cumprod(1.0 - p_choose), 1e-10, 1.0)
        return p_choose * kept * ops.cumsum(previous_alignments / kept, axis=-1)
    # q_j = c_j q_{j-1} + b_j with c_j = 1 - p_{j-1} and b_j = α_{i-1,j}
    # unrolls to q_j = Σ_{k<=j} (Π_{k<m<=j} c_m) b_k. The products come
    # from one cumulative product over a (k, m) grid, without division
    # (exact where some c_m is 0) and without a loop (XLA compiles it).
    positions = ops.arange(ops.shape(p_choose)[-1])
    carry = ops.concatenate(
        [ops.ones_like(p_choose[:, :1]), 1.0 - p_choose[:, :-1]], axis=-1
    )
    after = positions[None, :] > positions[:, None]
    factors = ops.where(after[None], carry[:, None, :], 1.0)
    products = ops.cumprod(factors, axis=-1)
    reached = positions[:, None] <= positions[None, :]
    weights = ops.where(reached[None], products, 0.0)
    q = ops.sum(weights * previous_alignments[:, :, None], axis=1)
    return p_choose * q


# Arguments of the soft mechanisms that mean nothing here: the weights
# come from the monotonic process (no `probability_fn`), and the
# "location" score, the only user of `max_length`, is refused.
_REFUSED = {
    "probability_fn": "the weights come from the monotonic process",
    "max_length": "only the 'location' score uses it, and monotonic "
    "attention needs a score of the memory's contents",
}


def _refuse(name, kwargs):
    for argument, reason in _REFUSED.items():
        if argument in kwargs:
            raise ValueError(
                f"{name} takes no `{argument}` ({reason}). Received: "
                f"{argument}={kwargs[argument]!r}"
            )


class _Monotonic:
    """The monotonic step shared by the Bahdanau and Luong mechanisms."""

    def _init_monotonic(
        self, mode, sigmoid_noise, sigmoid_noise_seed, score_bias_init
    ):
        if mode not in MODES:
            raise ValueError(
                "Received an invalid value for argument `mode`, expected "
                f"one of {list(MODES)}. Received: mode={mode!r}"
            )
        _validation.non_negative("sigmoid_noise", sigmoid_noise)
        if mode == "hard" and sigmoid_noise > 0:
            raise ValueError(
                "Sigmoid noise is not allowed in hard mode (its decisions "
                f"are already discrete). Received: mode={mode!r}, "
                f"sigmoid_noise={sigmoid_noise!r}"
            )
        self.mode = mode
        self.sigmoid_noise = float(sigmoid_noise)
        self.sigmoid_noise_seed = sigmoid_noise_seed
        self.score_bias_init = _validation.number(
            "score_bias_init", score_bias_init
        )
        self._seed_generator = (
            keras.random.SeedGenerator(sigmoid_noise_seed)
            if self.sigmoid_noise > 0
            else None
        )

    def _build_monotonic(self):
        self.score_bias = self.add_weight(
            name="score_bias",
            shape=(),
            initializer=keras.initializers.Constant(self.score_bias_init),
        )

    def initial_alignments(self, batch_size, source_length, dtype):
        """One-hot on the first source position: the scan starts there."""
        first = ops.equal(ops.arange(source_length), 0)
        row = ops.cast(first, dtype)[None, :]
        return ops.broadcast_to(row, (batch_size, source_length))

    def draw_seed(self, dtype):
        """Two random integers below `seed_range(dtype)`, `int32` `(2,)`.

        Drawn from the mechanism's seed generator, which must advance
        outside any loop (a seed generator updated inside JAX's `scan`
        leaks a tracer): `AttentionDecoderCell.get_initial_state` draws
        it, and the cell carries it in its state.
        """
        return keras.random.randint(
            (2,), 0, seed_range(dtype), seed=self._seed_generator, dtype="int32"
        )

    def draw_noise(self, shape, dtype, seed=None):
        """Standard normal noise, `shape`, in `dtype`.

        With `seed=None`, from the mechanism's seed generator (outside a
        loop only). With `seed`, an integer tensor `(2,)`: stateless, the
        same seed giving the same noise, so it can run inside any loop.
        """
        if seed is None:
            return keras.random.normal(
                shape, dtype=dtype, seed=self._seed_generator
            )
        state = self._seed_generator.state
        # The generator reads `seed` as its state and its update is
        # dropped with the scope: nothing is assigned inside the loop.
        mapping = [(state, ops.cast(seed, state.dtype))]
        with keras.StatelessScope(state_mapping=mapping):
            return keras.random.normal(
                shape, dtype=dtype, seed=self._seed_generator
            )

    def _energies(self, query, memory, keys=None):
        """`e + r`, `(batch_size, source_time)` in the logits dtype."""
        logits = self._logits(ops.expand_dims(query, 1), memory, keys)[:, 0]
        return logits + ops.cast(self.score_bias, logits.dtype)

    def call(
        self,
        query,
        memory,
        memory_mask=None,
        previous_alignments=None,
        training=None,
        noise=None,
        keys=None,
    ):
        self._check_inputs(query, memory)
        if len(query.shape) != 2:
            raise ValueError(
                f"{type(self).__name__} attends one decoder step at a time "
                "(each step starts where the previous one stopped): it "
                "expects `query` of shape `(batch_size, query_depth)`. "
                f"Received: query.shape={tuple(query.shape)}"
            )
        check_memory_mask(type(self).__name__, memory_mask, memory.shape)
        energies = self._energies(query, memory, keys)
        dtype = energies.dtype
        batch, source_length = ops.shape(memory)[0], ops.shape(memory)[1]
        if previous_alignments is None:
            previous_alignments = self.initial_alignments(
                batch, source_length, dtype
            )
        previous_alignments = ops.cast(previous_alignments, dtype)
        if training and self.sigmoid_noise > 0:
            if noise is None:
                noise = self.draw_noise(ops.shape(energies), dtype)
            noise = ops.reshape(ops.cast(noise, dtype), ops.shape(energies))
            energies = energies + self.sigmoid_noise * noise
        if self.mode == "hard":
            p_choose = ops.cast(energies > 0, dtype)
        else:
            p_choose = ops.sigmoid(energies)
        if memory_mask is not None:
            p_choose = p_choose * ops.cast(memory_mask, dtype)
        weights = monotonic_alignments(p_choose, previous_alignments, self.mode)
        weights = ops.cast(weights, memory.dtype)
        context = ops.matmul(ops.expand_dims(weights, 1), memory)[:, 0]
        return context, weights

    def _monotonic_config(self):
        return {
            "mode": self.mode,
            "sigmoid_noise": self.sigmoid_noise,
            "sigmoid_noise_seed": self.sigmoid_noise_seed,
            "score_bias_init": self.score_bias_init,
        }


@keras.saving.register_keras_serializable(package=_PACKAGE)
class BahdanauMonotonicAttention(_Monotonic, BahdanauAttention):
    """Monotonic additive attention (Raffel et al., 2017; tfa's name).

    `e_ij = vᵀ tanh(W_q h_i + W_k h̄_j)` (weight-normalised with
    `normalize=True`), `p_ij = σ(e_ij + r)`, and the alignments of the
    monotonic process described in `keras_attention.seq2seq.monotonic`.
    One decoder step at a time: use it in an `AttentionDecoderCell`, which
    passes the previous alignments.

    Args:
        units: Size of the hidden layer of the score. Defaults to `None`,
            the memory depth.
        normalize: Whether to weight-normalise `v`. Defaults to `False`.
        mode: How the alignments are computed: `"parallel"` (the
            default), `"recursive"` or `"hard"` (see
            `keras_attention.seq2seq.monotonic`).
        sigmoid_noise: Standard deviation of the Gaussian noise added to
            the energies before the sigmoid during training (Raffel et al.
            use 1, to push the `p_ij` towards 0 or 1). Defaults to `0.0`.
            Not allowed in hard mode.
        sigmoid_noise_seed: Seed of that noise. Defaults to `None`.
        score_bias_init: Initial value of the learnt scalar bias `r` added
            to the energies (Raffel et al. suggest a negative value such as
            `-4` for long sources). Defaults to `0.0`.
        kernel_initializer: Defaults to `"glorot_uniform"`.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        query: The decoder state `(batch_size, query_depth)`.
        memory: The encoder outputs `(batch_size, source_time, depth)`.
        memory_mask: Optional boolean `(batch_size, source_time)`.
        previous_alignments: `α_{i−1}` `(batch_size, source_time)`.
            Defaults to one-hot on the first position.
        training: Whether to add the sigmoid noise.
        keys: Optional `project_memory(memory)` (see
            `BahdanauAttention`).

    Returns:
        `(context, weights)`: `(batch_size, depth)`, `(batch_size,
        source_time)`.

    Example:

    >>> attention = keras_attention.seq2seq.BahdanauMonotonicAttention(
    ...     units=8, mode="hard"
    ... )
    >>> memory = np.random.rand(2, 5, 6).astype("float32")
    >>> context, weights = attention(np.ones((2, 4)), memory)
    >>> tuple(context.shape), tuple(weights.shape)
    ((2, 6), (2, 5))

    References:
        - [Raffel et al., 2017](https://arxiv.org/abs/1704.00784)
        - [Bahdanau et al., 2014](https://arxiv.org/abs/1409.0473)
    """

    def __init__(
        self,
        units=None,
        normalize=False,
        mode="parallel",
        sigmoid_noise=0.0,
        sigmoid_noise_seed=None,
        score_bias_init=0.0,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        _refuse("BahdanauMonotonicAttention", kwargs)
        super().__init__(
            units=units,
            normalize=normalize,
            kernel_initializer=kernel_initializer,
            **kwargs,
        )
        self._init_monotonic(
            mode, sigmoid_noise, sigmoid_noise_seed, score_bias_init
        )

    def build(self, query_shape, memory_shape):
        super().build(query_shape, memory_shape)
        self._build_monotonic()

    def get_config(self):
        config = {**super().get_config(), **self._monotonic_config()}
        config.pop("probability_fn", None)
        return config


@keras.saving.register_keras_serializable(package=_PACKAGE)
class LuongMonotonicAttention(_Monotonic, LuongAttention):
    """Monotonic multiplicative attention (Raffel et al., 2017; tfa's name).

    `e_ij = g · score(h_i, h̄_j)` with a Luong score (`"general"`:
    `h_iᵀ W h̄_j`, tfa's; or `"dot"`, `"concat"`), `g` a learnt scalar
    starting at 1 with `scale=True` (else 1), `p_ij = σ(e_ij + r)`, and the
    alignments of the monotonic process described in
    `keras_attention.seq2seq.monotonic`. One decoder step at a time: use it
    in an `AttentionDecoderCell`, which passes the previous alignments.

    Args:
        score: `"general"` (the default), `"dot"` or `"concat"`.
        units: Hidden size of the `"concat"` score.
        scale: Whether to learn the scalar `g`. Defaults to `False`.
        mode: How the alignments are computed: `"parallel"` (the
            default), `"recursive"` or `"hard"` (see
            `keras_attention.seq2seq.monotonic`).
        sigmoid_noise: Standard deviation of the Gaussian noise added to
            the energies before the sigmoid during training (Raffel et al.
            use 1, to push the `p_ij` towards 0 or 1). Defaults to `0.0`.
            Not allowed in hard mode.
        sigmoid_noise_seed: Seed of that noise. Defaults to `None`.
        score_bias_init: Initial value of the learnt scalar bias `r` added
            to the energies (Raffel et al. suggest a negative value such as
            `-4` for long sources). Defaults to `0.0`.
        kernel_initializer: Defaults to `"glorot_uniform"`.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        query: The decoder state `(batch_size, query_depth)`.
        memory: The encoder outputs `(batch_size, source_time, depth)`.
        memory_mask: Optional boolean `(batch_size, source_time)`.
        previous_alignments: `α_{i−1}` `(batch_size, source_time)`.
            Defaults to one-hot on the first position.
        training: Whether to add the sigmoid noise.
        keys: Optional `project_memory(memory)` (see
            `BahdanauAttention`).

    Returns:
        `(context, weights)`: `(batch_size, depth)`, `(batch_size,
        source_time)`.

    Example:

    >>> attention = keras_attention.seq2seq.LuongMonotonicAttention(
    ...     "dot", mode="recursive", score_bias_init=-1.0
    ... )
    >>> memory = np.random.rand(2, 5, 4).astype("float32")
    >>> context, weights = attention(np.ones((2, 4)), memory)
    >>> float(keras.ops.max(keras.ops.sum(weights, -1))) <= 1.0 + 1e-6
    True

    References:
        - [Raffel et al., 2017](https://arxiv.org/abs/1704.00784)
        - [Luong et al., 2015](https://arxiv.org/abs/1508.04025)
    """

    def __init__(
        self,
        score="general",
        units=None,
        scale=False,
        mode="parallel",
        sigmoid_noise=0.0,
        sigmoid_noise_seed=None,
        score_bias_init=0.0,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        _refuse("LuongMonotonicAttention", kwargs)
        if score == "location":
            raise ValueError(
                "LuongMonotonicAttention needs a score of the memory's "
                "contents: one of ['dot', 'general', 'concat']. "
                f"Received: score={score!r}"
            )
        super().__init__(
            score=score,
            units=units,
            kernel_initializer=kernel_initializer,
            **kwargs,
        )
        if not isinstance(scale, bool):
            raise ValueError(
                "Received an invalid value for argument `scale`, expected "
                f"a bool. Received: scale={scale!r}"
            )
        self.scale = scale
        self._init_monotonic(
            mode, sigmoid_noise, sigmoid_noise_seed, score_bias_init
        )

    def build(self, query_shape, memory_shape):
        super().build(query_shape, memory_shape)
        self._build_monotonic()
        if self.scale:
            self.g = self.add_weight(name="g", shape=(), initializer="ones")

    def _energies(self, query, memory, keys=None):
        logits = self._logits(ops.expand_dims(query, 1), memory, keys)[:, 0]
        if self.scale:
            logits = logits * ops.cast(self.g, logits.dtype)
        return logits + ops.cast(self.score_bias, logits.dtype)

    def get_config(self):
        config = {
            **super().get_config(),
            **self._monotonic_config(),
            "scale": self.scale,
        }
        for key in ("probability_fn", "max_length"):
            config.pop(key, None)
        return config
