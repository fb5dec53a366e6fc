"""Rotary position embeddings as a layer (RoFormer, keras-hub's layer)."""

import numbers

import keras
from keras import ops

from keras_attention import _validation
from keras_attention import ops as ka_ops
from keras_attention.ops import checks as ops_checks
from keras_attention.ops import rotary as rotary_ops


def _positive_number(name, value):
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not value > 0
    ):
        raise _validation.invalid(name, value, "a positive number")
    return value


def _fraction(name, value):
    """A number in `(0, 1]`."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not 0 < value <= 1
    ):
        raise _validation.invalid(name, value, "a number in (0, 1]")
    return value


def _truncate(value, rope_type):
    if not isinstance(value, bool):
        raise _validation.invalid("truncate", value, "a bool")
    if not value and rope_type != "yarn":
        raise ValueError(
            "`truncate=False` leaves YaRN's correction range unrounded: it "
            f'needs `rope_type="yarn"`. Received: rope_type={rope_type!r}, '
            f"truncate={value!r}"
        )
    return value


def _axis(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _validation.invalid(name, value, "an integer axis")
    return int(value)


def _scaling_arguments(
    rope_type,
    original,
    low_freq_factor,
    high_freq_factor,
    beta_fast,
    beta_slow,
    attention_factor,
):
    """The scaling arguments, checked; a `ValueError` names the first bad
    one."""
    rotary_ops.check_rope_type(rope_type, original)
    if original is not None:
        _positive_number("original_max_position_embeddings", original)
    scaling = {
        "rope_type": rope_type,
        "original_max_position_embeddings": original,
        "low_freq_factor": low_freq_factor,
        "high_freq_factor": high_freq_factor,
        "beta_fast": beta_fast,
        "beta_slow": beta_slow,
    }
    for name in list(scaling)[2:]:
        scaling[name] = _validation.positive_number(name, scaling[name])
    for low, high in (
        ("low_freq_factor", "high_freq_factor"),
        ("beta_slow", "beta_fast"),
    ):
        if not scaling[low] < scaling[high]:
            raise ValueError(
                f"Expected `{low}` < `{high}`. Received: {low}="
                f"{scaling[low]}, {high}={scaling[high]}"
            )
    if attention_factor is not None:
        if rope_type != "yarn":
            raise ValueError(
                "`attention_factor` scales YaRN's attention: it needs "
                f'`rope_type="yarn"`. Received: rope_type={rope_type!r}, '
                f"attention_factor={attention_factor!r}"
            )
        _validation.positive_number("attention_factor", attention_factor)
    return scaling


@keras.saving.register_keras_serializable(package="keras_attention")
class RotaryEmbedding(keras.layers.Layer):
    """Rotary position embedding: rotates feature pairs by their position.

    RoFormer (Su et al.) encodes position `p` by rotating each pair of
    features by the angle `θ_{p,i} = p · f_i`, `f_i = max_wavelength^(-2i
    / d)`, so that the dot product of a rotated query and key depends on
    their positions only through `p_q - p_k`. The layer has no weights.

    Which features pair: by default the two halves of the feature axis,
    `(x_i, x_{i + d/2})` (GPT-NeoX's layout, Hugging Face's Llama and
    Qwen weights, keras-hub's); with `interleaved=True` adjacent
    features, `(x_{2i}, x_{2i+1})` (GPT-J's, Meta's Llama code's and
    DeepSeek's, whose checkpoints are written for it). The two are the
    same rotation of features in another order: a checkpoint of one kind
    loads into the other by permuting the query and key projections'
    output columns (docs/layers.md).

    Longer contexts than the model was trained on (`rope_type`): the
    default `"linear"` divides the positions by `scaling_factor`, exactly
    as `keras_hub.layers.RotaryEmbedding` does; `"llama3"` is Llama 3.1's
    frequency ramp (Meta's `apply_scaling`: wavelengths longer than
    `original_max_position_embeddings / low_freq_factor` divided by
    `scaling_factor`, shorter than `... / high_freq_factor` kept, a blend
    between); `"yarn"` is YaRN's (Peng et al.; DeepSeek-V3's
    `precompute_freqs_cis`, keras-hub's `rope_type="yarn"`): the pairs
    that turn fewer than `beta_slow` times over the original context are
    interpolated, those that turn more than `beta_fast` times kept, a
    ramp between (its ends rounded to whole pairs, or with
    `truncate=False` not, as gpt-oss sets), and the rotated features are
    multiplied by `attention_factor`, so a rotated query-key logit by its
    square.

    Partial rotation (`partial_rotary_factor`, keras-hub's and Hugging
    Face's name; Qwen3.5 rotates a quarter of each head): the first
    `int(partial_rotary_factor · d)` features are rotated as if they were
    the whole feature axis (their frequencies `λ^(-2i / d_rot)`, the
    halves of those features paired), the rest pass through unchanged.

    Args:
        max_wavelength: The base `λ` of the geometric wavelengths.
            Defaults to `10000`.
        scaling_factor: The context extension `s`: with `"linear"`,
            positions are divided by it. Defaults to `1.0`.
        sequence_axis: The axis of the positions. Defaults to `1`.
        feature_axis: The axis of the rotated features; its size must be
            even. Defaults to `-1`.
        rope_type: `"linear"`, `"llama3"` or `"yarn"` (keras-hub's
            argument). Defaults to `"linear"`.
        original_max_position_embeddings: The context length the model
            was trained on, needed by `"llama3"` (Llama 3.1: 8192) and
            `"yarn"` (DeepSeek-V3: 4096). Defaults to `None`.
        low_freq_factor: `"llama3"`'s long-wavelength bound. Defaults to
            `1.0`.
        high_freq_factor: `"llama3"`'s short-wavelength bound. Defaults
            to `4.0`.
        beta_fast: `"yarn"`'s turns above which a pair is kept. Defaults
            to `32.0`.
        beta_slow: `"yarn"`'s turns below which a pair is interpolated.
            Defaults to `1.0`.
        attention_factor: `"yarn"` only: the factor on the rotated
            features. Defaults to `None`: `0.1 · ln(scaling_factor) + 1`
            (YaRN's; DeepSeek's `mscale` `m` is `0.1 · m · ln(s) + 1`,
            `keras_attention.ops.rotary.yarn_attention_factor`).
        truncate: `"yarn"` only: whether the ends of YaRN's ramp are
            rounded outwards to whole pairs (keras-hub's argument: `True`
            as YaRN, DeepSeek-V3 and keras-hub's default; gpt-oss sets
            `False`). Defaults to `True`.
        partial_rotary_factor: The share of the features that is rotated,
            in `(0, 1]`: the first `int(partial_rotary_factor · d)`, an
            even number, the rest passed through. Defaults to `1.0`.
        interleaved: Whether the pairs are adjacent features. Defaults to
            `False` (the half split).
        **kwargs: Base layer keyword arguments, e.g. `name` and `dtype`.

    Call arguments:
        inputs: A tensor with a sequence and a feature axis, e.g.
            `(batch_size, seq_len, features)` or
            `(batch_size, seq_len, num_heads, head_dim)`.
        start_index: Position of the first element (an integer or a
            scalar integer tensor), for cached decoding. Defaults to `0`.
        positions: Optional `(seq_len,)` or `(batch_size, seq_len)`
            positions; `start_index` is then ignored.

    Returns:
        The rotated tensor, the shape and dtype of `inputs`.

    Example:

    >>> rope = keras_attention.RotaryEmbedding()
    >>> x = np.ones((2, 5, 4, 8), "float32")
    >>> tuple(rope(x).shape)
    (2, 5, 4, 8)
    >>> bool(np.allclose(rope(x)[:, 0], x[:, 0]))
    True
    >>> yarn = keras_attention.RotaryEmbedding(
    ...     scaling_factor=40.0, rope_type="yarn",
    ...     original_max_position_embeddings=4096, interleaved=True,
    ... )
    >>> tuple(yarn(x).shape)
    (2, 5, 4, 8)

    References:
        - [Su et al., 2021](https://arxiv.org/abs/2104.09864)
        - [Peng et al., 2023, YaRN](https://arxiv.org/abs/2309.00071)
    """

    def __init__(
        self,
        max_wavelength=10000,
        scaling_factor=1.0,
        sequence_axis=1,
        feature_axis=-1,
        rope_type="linear",
        original_max_position_embeddings=None,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        beta_fast=32.0,
        beta_slow=1.0,
        attention_factor=None,
        interleaved=False,
        truncate=True,
        partial_rotary_factor=1.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # A rotation per position: a padding mask passes through unchanged.
        self.supports_masking = True
        self.max_wavelength = _positive_number("max_wavelength", max_wavelength)
        self.scaling_factor = _positive_number("scaling_factor", scaling_factor)
        self.sequence_axis = _axis("sequence_axis", sequence_axis)
        self.feature_axis = _axis("feature_axis", feature_axis)
        self.scaling = _scaling_arguments(
            rope_type,
            original_max_position_embeddings,
            low_freq_factor,
            high_freq_factor,
            beta_fast,
            beta_slow,
            attention_factor,
        )
        self.attention_factor = attention_factor
        if not isinstance(interleaved, bool):
            raise _validation.invalid("interleaved", interleaved, "a bool")
        self.interleaved = interleaved
        self.truncate = _truncate(truncate, rope_type)
        self.partial_rotary_factor = _fraction(
            "partial_rotary_factor", partial_rotary_factor
        )

    @property
    def rope_type(self):
        return self.scaling["rope_type"]

    @property
    def output_scale(self):
        """The factor on the rotated features: YaRN's attention factor
        (`attention_factor`, or its default), else `1.0`."""
        if self.rope_type != "yarn":
            return 1.0
        if self.attention_factor is not None:
            return float(self.attention_factor)
        return rotary_ops.yarn_attention_factor(self.scaling_factor)

    def _axes(self, shape):
        rank = len(shape)
        axes = []
        for name in ("sequence_axis", "feature_axis"):
            axis = getattr(self, name)
            if not -rank <= axis < rank:
                raise ValueError(
                    f"`{name}` is out of range for inputs of rank {rank}. "
                    f"Received: {name}={axis}, inputs.shape={tuple(shape)}"
                )
            axes.append(axis % rank)
        if axes[0] == axes[1] or 0 in axes:
            raise ValueError(
                "`sequence_axis` and `feature_axis` must be two different "
                "axes other than the batch axis. Received: "
                f"sequence_axis={self.sequence_axis}, "
                f"feature_axis={self.feature_axis}, "
                f"inputs.shape={tuple(shape)}"
            )
        features = shape[axes[1]]
        turned = None if features is None else self.rotated_features(features)
        if turned is not None and (turned % 2 or turned < 2):
            raise ValueError(
                "The rotated features must be an even number (the first "
                "`int(partial_rotary_factor · features)`): the feature axis "
                "must have an even size. Received: "
                f"inputs.shape={tuple(shape)}, feature_axis="
                f"{self.feature_axis}, partial_rotary_factor="
                f"{self.partial_rotary_factor}"
            )
        return axes

    def rotated_features(self, features):
        """How many of `features` are rotated (the first ones)."""
        if self.partial_rotary_factor == 1:
            return features
        return int(features * self.partial_rotary_factor)

    def build(self, input_shape):
        self._axes(input_shape)

    def angles(self, positions, dim):
        """`(batch or 1, seq_len, dim // 2)` angles of `positions`."""
        angles = ka_ops.rotary_angles(
            positions,
            dim,
            self.max_wavelength,
            self.scaling_factor,
            truncate=self.truncate,
            **self.scaling,
        )
        if len(angles.shape) == 2:
            angles = ops.expand_dims(angles, 0)
        return angles

    def call(self, inputs, start_index=0, positions=None):
        ops_checks.floating("RotaryEmbedding", inputs=inputs)
        axes = tuple(self._axes(inputs.shape))
        rank = len(inputs.shape)
        # Heads `(batch_size, T, heads, head_dim)` need no moving.
        ordered = axes == (1, rank - 1)
        moved = inputs if ordered else ops.moveaxis(inputs, axes, (1, -1))
        if positions is None:
            length = ops.shape(moved)[1]
            positions = ops.arange(length, dtype="float32") + ops.cast(
                start_index, "float32"
            )
        features = moved.shape[-1]
        turned = self.rotated_features(features)
        angles = self.angles(positions, turned)
        for _ in range(len(moved.shape) - 3):
            angles = ops.expand_dims(angles, 2)
        rotated = ka_ops.apply_rotary(
            moved[..., :turned] if turned < features else moved,
            angles,
            self.interleaved,
            scale=self.output_scale,
        )
        if turned < features:
            rotated = ops.concatenate([rotated, moved[..., turned:]], -1)
        return rotated if ordered else ops.moveaxis(rotated, (1, -1), axes)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "max_wavelength": self.max_wavelength,
            "scaling_factor": self.scaling_factor,
            "sequence_axis": self.sequence_axis,
            "feature_axis": self.feature_axis,
            **self.scaling,
            "attention_factor": self.attention_factor,
            "interleaved": self.interleaved,
            "truncate": self.truncate,
            "partial_rotary_factor": self.partial_rotary_factor,
        }
