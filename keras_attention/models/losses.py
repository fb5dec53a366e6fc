"""Losses of the example models.

`SmoothedSequenceLoss` is the translation example's label-smoothed
cross-entropy over token ids, padding ignored.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_attention")
class SmoothedSequenceLoss(keras.losses.Loss):
    """Cross-entropy over token ids with label smoothing, padding ignored.

    Per target token `t` with gold id `y_t > 0`: `(1 - ε) (-log p(y_t)) +
    ε mean_v(-log p(v))` (Szegedy et al., 2016: the smoothed target puts
    `ε` uniformly over the vocabulary); the batch loss is the mean over
    the non-padding tokens (id 0 is padding). With `ε = 0` it is
    `SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)`.

    Args:
        label_smoothing: `ε` in `[0, 1)`. Defaults to `0.1`.
        name: Defaults to `"smoothed_sequence_loss"`.
        **kwargs: `keras.losses.Loss` arguments.
    """

    def __init__(
        self, label_smoothing=0.1, name="smoothed_sequence_loss", **kwargs
    ):
        super().__init__(name=name, **kwargs)
        if isinstance(label_smoothing, bool) or not (
            isinstance(label_smoothing, (int, float))
            and 0.0 <= label_smoothing < 1.0
        ):
            raise ValueError(
                "Received an invalid value for argument `label_smoothing`, "
                "expected a number in [0, 1). "
                f"Received: label_smoothing={label_smoothing!r}"
            )
        self.label_smoothing = float(label_smoothing)

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        log_probs = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)
        gold = ops.take_along_axis(
            log_probs, ops.expand_dims(y_true, -1), axis=-1
        )[..., 0]
        eps = self.label_smoothing
        loss = -(1.0 - eps) * gold - eps * ops.mean(log_probs, axis=-1)
        mask = ops.cast(ops.not_equal(y_true, 0), "float32")
        # The reduction averages over every position: rescale so that it
        # averages over the non-padding ones.
        return loss * mask / ops.maximum(ops.mean(mask), 1e-9)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}
