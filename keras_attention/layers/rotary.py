"""Rotary position embeddings as a layer (RoFormer, keras-hub's layer)."""

import numbers

import keras
from keras import ops

from keras_attention import _validation
from keras_attention import ops as ka_ops


def _positive_number(name, value):
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not value > 0
    ):
        raise _validation.invalid(name, value, "a positive number")
    return value


def _axis(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _validation.invalid(name, value, "an integer axis")
    return int(value)


@keras.saving.register_keras_serializable(package="keras_attention")
class RotaryEmbedding(keras.layers.Layer):
    """Rotary position embedding: rotates feature pairs by their position.

    RoFormer (Su et al.) encodes position `p` by rotating each pair of
    features `(x_i, x_{i + d/2})` by the angle
    `θ_{p,i} = (p / scaling_factor) · max_wavelength^(-2i / d)`, so that
    the dot product of a rotated query and key depends on their positions
    only through `p_q - p_k`. The pairs are the two halves of the feature
    axis (GPT-NeoX's and Llama's layout), exactly as
    `keras_hub.layers.RotaryEmbedding` with its default linear scaling.
    The layer has no weights.

    Args:
        max_wavelength: The base `λ` of the geometric wavelengths.
            Defaults to `10000`.
        scaling_factor: Positions are divided by it (linear position
            interpolation). Defaults to `1.0`.
        sequence_axis: The axis of the positions. Defaults to `1`.
        feature_axis: The axis of the rotated features; its size must be
            even. Defaults to `-1`.
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

    References:
        - [Su et al., 2021](https://arxiv.org/abs/2104.09864)
    """

    def __init__(
        self,
        max_wavelength=10000,
        scaling_factor=1.0,
        sequence_axis=1,
        feature_axis=-1,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # A rotation per position: a padding mask passes through unchanged.
        self.supports_masking = True
        self.max_wavelength = _positive_number("max_wavelength", max_wavelength)
        self.scaling_factor = _positive_number("scaling_factor", scaling_factor)
        self.sequence_axis = _axis("sequence_axis", sequence_axis)
        self.feature_axis = _axis("feature_axis", feature_axis)

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
        if features is not None and features % 2:
            raise ValueError(
                "The rotated feature axis must have an even size. Received: "
                f"inputs.shape={tuple(shape)}, feature_axis="
                f"{self.feature_axis}"
            )
        return axes

    def build(self, input_shape):
        self._axes(input_shape)

    def angles(self, positions, dim):
        """`(batch or 1, seq_len, dim // 2)` angles of `positions`."""
        angles = ka_ops.rotary_angles(
            positions, dim, self.max_wavelength, self.scaling_factor
        )
        if len(angles.shape) == 2:
            angles = ops.expand_dims(angles, 0)
        return angles

    def call(self, inputs, start_index=0, positions=None):
        _validation.floating_inputs("RotaryEmbedding", inputs=inputs)
        sequence_axis, feature_axis = self._axes(inputs.shape)
        moved = ops.moveaxis(inputs, (sequence_axis, feature_axis), (1, -1))
        if positions is None:
            length = ops.shape(moved)[1]
            positions = ops.arange(length, dtype="float32") + ops.cast(
                start_index, "float32"
            )
        angles = self.angles(positions, moved.shape[-1])
        for _ in range(len(moved.shape) - 3):
            angles = ops.expand_dims(angles, 2)
        rotated = ka_ops.apply_rotary(moved, angles)
        return ops.moveaxis(rotated, (1, -1), (sequence_axis, feature_axis))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "max_wavelength": self.max_wavelength,
            "scaling_factor": self.scaling_factor,
            "sequence_axis": self.sequence_axis,
            "feature_axis": self.feature_axis,
        }
