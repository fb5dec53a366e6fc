"""Hard attention: select one value instead of averaging them."""

import keras
import numpy as np
from keras import ops

from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention.layers import _inputs
from keras_attention.layers import _leading_axes
from keras_attention.layers.attention import Attention

_MODES = ("argmax", "sample")
_ESTIMATORS = ("straight_through", "reinforce")


@keras.saving.register_keras_serializable(package="keras_attention")
class HardAttention(Attention):
    """Hard attention: the output is one selected value vector.

    The attention distribution `p_j = softmax_j(s(q, k_j))` is computed as in
    `keras_attention.Attention`, but instead of `Σ p_j v_j` the layer returns
    `v_{j*}` for one position `j*`:

    - `mode="argmax"`: `j* = argmax_j p_j`.
    - `mode="sample"`: during training (`training=True`), `j*` is sampled
      from `p` with the Gumbel-max trick (`argmax_j (log p_j + g_j)`,
      `g_j ~ Gumbel(0, 1)`, seeded by `seed`). At inference it is the argmax,
      so predictions are deterministic.

    The selection has no gradient, so the layer offers two ways to train:

    - `estimator="straight_through"` (default): the forward pass uses the
      one-hot choice `y`, the backward pass the gradient of the relaxed
      weights `softmax((logits + g) / temperature)` (Gumbel-softmax in
      sample mode, `g = 0` in argmax mode): `y + r - stop_gradient(r)`.
    - `estimator="reinforce"`: the choice is a constant for backprop; call
      with `return_log_prob=True` to get `log p_{j*}` and add a REINFORCE
      loss such as `-stop_gradient(reward - baseline) * log_prob`
      (Williams, 1992). Use `mode="sample"` so the policy explores.

    Keys that are masked are never selected; a query with no unmasked key
    selects nothing: zero weights, a zero output and a log-probability of 0.

    Args:
        score: A score name, config dict or `keras_attention.scores.Score`.
            Defaults to `"dot"`.
        mode: `"argmax"` or `"sample"`. Defaults to `"argmax"`.
        estimator: `"straight_through"` or `"reinforce"`. Defaults to
            `"straight_through"`.
        temperature: Temperature of the relaxed weights used for the
            straight-through gradient. Defaults to `1.0`.
        seed: Seed of the sampling. Defaults to `None`.
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        query, value, key: As for `keras_attention.Attention`, rank above
            3 included.
        query_mask, value_mask, key_mask: As for `keras_attention.Attention`.
        attention_mask, use_causal_mask: As for `keras_attention.Attention`.
        training, mask: As for `keras_attention.Attention`.
        return_attention_scores: Whether to also return the one-hot weights.
            Defaults to `False`.
        return_log_prob: Whether to also return `log p_{j*}`, shape
            `(batch_size,)` or `(batch_size, Tq)`. Defaults to `False`.

    Returns:
        The selected values, `(batch_size, Dv)` or `(batch_size, Tq, Dv)`;
        then the one-hot weights if `return_attention_scores=True`; then the
        log-probabilities if `return_log_prob=True`.

    Example:

    >>> layer = keras_attention.HardAttention(score="dot")
    >>> query = np.array([[0.0, 1.0]], "float32")
    >>> values = np.array([[[1.0, 0.0], [0.0, 2.0], [0.0, 1.0]]], "float32")
    >>> out, weights = layer(query, values, return_attention_scores=True)
    >>> np.asarray(out).tolist(), np.asarray(weights).tolist()
    ([[0.0, 2.0]], [[0.0, 1.0, 0.0]])

    References:
        - [Xu et al., 2015, Show, Attend and Tell](
          https://arxiv.org/abs/1502.03044)
        - [Jang et al., 2016, Categorical Reparameterization with
          Gumbel-Softmax](https://arxiv.org/abs/1611.01144)
        - [Williams, 1992, Simple statistical gradient-following algorithms
          for connectionist reinforcement learning](
          https://doi.org/10.1007/BF00992696)
    """

    accepts_list_call = False

    def __init__(
        self,
        score="dot",
        mode="argmax",
        estimator="straight_through",
        temperature=1.0,
        seed=None,
        **kwargs,
    ):
        super().__init__(score=score, dropout=0.0, seed=seed, **kwargs)
        if mode not in _MODES:
            raise ValueError(
                "Received an invalid value for argument `mode`, expected one "
                f"of {_MODES}. Received: mode={mode!r}"
            )
        if estimator not in _ESTIMATORS:
            raise ValueError(
                "Received an invalid value for argument `estimator`, expected "
                f"one of {_ESTIMATORS}. Received: estimator={estimator!r}"
            )
        _validation.positive_number("temperature", temperature)
        self.mode = mode
        self.estimator = estimator
        self.temperature = float(temperature)
        self.seed_generator = keras.random.SeedGenerator(
            _validation.seed("seed", seed)
        )

    def _gumbel(self, shape):
        uniform = keras.random.uniform(
            shape,
            minval=1e-10,
            maxval=1.0,
            dtype="float32",
            seed=self.seed_generator,
        )
        return -ops.log(-ops.log(uniform))

    def call(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        return_log_prob=False,
        training=None,
        mask=None,
    ):
        ka_ops.checks.positions("HardAttention", value=_shape(value))
        query_mask, value_mask = _inputs.keras_masks(
            type(self).__name__, mask, query_mask, value_mask
        )
        if _leading_axes.is_folded(query.shape):
            return _leading_axes.call(
                type(self).__name__,
                self.call,
                query,
                value,
                key,
                self._masks(query_mask, value_mask, key_mask, attention_mask),
                use_causal_mask=use_causal_mask,
                return_attention_scores=return_attention_scores,
                return_log_prob=return_log_prob,
                training=training,
            )
        logits, mask, squeeze = self._weights_and_mask(
            query,
            value,
            key,
            query_mask,
            value_mask,
            key_mask,
            attention_mask,
            use_causal_mask,
        )
        value = query if value is None else value
        weights, hard, probs = self._hard_weights(logits, mask, training)
        if self.penalty_coefficient > 0:
            self.add_loss(
                self.penalty_coefficient * ka_ops.frobenius_penalty(probs)
            )
        weights = ops.cast(weights, value.dtype)
        output = ops.matmul(weights, value)
        outputs = [output]
        if return_attention_scores:
            outputs.append(ops.cast(ops.stop_gradient(hard), value.dtype))
        if return_log_prob:
            log_prob = ops.sum(
                hard * ops.log(ops.maximum(probs, 1e-30)), axis=-1
            )
            outputs.append(ops.cast(log_prob, value.dtype))
        if squeeze:
            outputs = [ops.squeeze(o, 1) for o in outputs]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _hard_weights(self, logits, mask, training):
        """`(weights, hard, probs)`: the weights the values are summed
        with (the one-hot choice, with the estimator's gradient), the
        one-hot choice itself and the softmax it is drawn from."""
        logits = ops.cast(logits, ka_ops.logits_dtype(logits.dtype))
        probs = ka_ops.masked_softmax(logits, mask)
        perturbed = logits
        if self.mode == "sample" and training:
            perturbed = logits + self._gumbel(ops.shape(logits))
        if mask is None:
            mask = ops.ones_like(logits, dtype="bool")
        mask = ops.broadcast_to(mask, ops.shape(logits))
        candidates = ka_ops.mask_logits(perturbed, mask)
        any_key = ops.any(mask, axis=-1, keepdims=True)
        hard = ka_ops.one_hot_argmax(candidates)
        hard = hard * ops.cast(any_key, hard.dtype)
        if self.estimator == "straight_through":
            relaxed = ka_ops.masked_softmax(perturbed / self.temperature, mask)
            # Parenthesised so the forward value is exactly the one-hot choice.
            weights = hard + (relaxed - ops.stop_gradient(relaxed))
        else:
            weights = ops.stop_gradient(hard)
        return weights, hard, probs

    def compute_output_spec(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        return_log_prob=False,
        training=None,
        mask=None,
    ):
        query_mask, value_mask = _inputs.keras_masks(
            type(self).__name__, mask, query_mask, value_mask
        )
        value = query if value is None else value
        self._check_inputs(
            query,
            value,
            key,
            self._masks(query_mask, value_mask, key_mask, attention_mask),
        )
        dtype = self.compute_dtype
        shape = self.compute_output_shape(query.shape, value.shape)
        outputs = [keras.KerasTensor(shape, dtype=dtype)]
        if return_attention_scores:
            weights_shape = tuple(query.shape[:-1]) + (value.shape[-2],)
            outputs.append(keras.KerasTensor(weights_shape, dtype=dtype))
        if return_log_prob:
            outputs.append(
                keras.KerasTensor(tuple(query.shape[:-1]), dtype=dtype)
            )
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def get_config(self):
        config = super().get_config()
        config.pop("dropout")
        return {
            **config,
            "mode": self.mode,
            "estimator": self.estimator,
            "temperature": self.temperature,
        }


def reinforce_loss(log_prob, reward, baseline=0.0):
    """REINFORCE surrogate loss `-mean((reward - baseline) · log_prob)`.

    Minimising it follows the policy gradient of the expected reward; the
    reward and baseline are treated as constants.

    Args:
        log_prob: Log-probabilities of the chosen positions, as returned by
            `HardAttention(..., return_log_prob=True)`.
        reward: Reward per choice, broadcastable to `log_prob`.
        baseline: Baseline subtracted from the reward to reduce variance
            (e.g. a running mean of the reward). Defaults to `0.0`.

    Returns:
        Scalar loss.

    Raises:
        ValueError: `reward` or `baseline` does not broadcast to the shape
            of `log_prob` (a `(batch_size, 1)` reward against a
            `(batch_size,)` log-probability would silently average the
            outer product).

    Example:

    >>> log_prob = np.log(np.array([0.5, 0.25], "float32"))
    >>> reward = np.array([1.0, 0.0], "float32")
    >>> round(float(keras_attention.reinforce_loss(log_prob, reward)), 4)
    0.3466
    """
    ka_ops.checks.floating("reinforce_loss", log_prob=log_prob, reward=reward)
    log_prob = ops.convert_to_tensor(log_prob)
    for name, value in (("reward", reward), ("baseline", baseline)):
        _check_broadcasts_to(name, value, log_prob)
    advantage = ops.stop_gradient(
        ops.cast(reward, log_prob.dtype) - ops.cast(baseline, log_prob.dtype)
    )
    return -ops.mean(advantage * log_prob)


def _static_shape(x):
    """`x`'s shape with unknown dimensions as `None`."""
    shape = getattr(x, "shape", None)
    shape = np.shape(x) if shape is None else shape
    return tuple(d if isinstance(d, int) else None for d in shape)


def _check_broadcasts_to(name, value, log_prob):
    """`value` must broadcast to `log_prob`'s shape, not beyond it."""
    shape, target = _static_shape(value), _static_shape(log_prob)
    fits = len(shape) <= len(target) and all(
        a in (1, None) or b is None or a == b
        for a, b in zip(reversed(shape), reversed(target), strict=False)
    )
    if not fits:
        raise ValueError(
            f"`{name}` must broadcast to the shape of `log_prob` (one value "
            f"per choice, or one for all). Received: {name}.shape={shape}, "
            f"log_prob.shape={target}"
        )


def _shape(tensor):
    return tuple(getattr(tensor, "shape", ()))
