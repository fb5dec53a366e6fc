"""Learning-rate schedules and time budgets of the example trainings.

`learning_rate_schedule` gives Adam's rate (constant or cosine decay over
steps); `TimeLimit` stops `fit` after a number of minutes and can anneal
the rate over them.
"""

import keras
from keras import ops


class TimeLimit(keras.callbacks.Callback):
    """Stops training after the batch that crosses `minutes` of training.

    The time counts from the start of `fit` (validation included). With
    `anneal=True` the optimizer's learning rate also follows a cosine
    from its first value down to 1/20 of it over those minutes, so that
    the decay ends with the time budget however loaded the machine is.
    """

    def __init__(self, minutes, anneal=False):
        super().__init__()
        self.seconds = 60.0 * float(minutes)
        self.anneal = anneal
        self.start = None
        self.peak = None
        self.stopped = False

    def on_train_begin(self, logs=None):
        import time

        self.start = time.perf_counter()
        self.annealed = 0.0
        if self.anneal:
            self.peak = float(
                ops.convert_to_numpy(self.model.optimizer.learning_rate)
            )

    def on_train_batch_end(self, batch, logs=None):
        import math
        import time

        elapsed = time.perf_counter() - self.start
        if elapsed > self.seconds:
            self.stopped = True
            self.model.stop_training = True
        fraction = min(elapsed / self.seconds, 1.0)
        # Every 1/200 of the budget: on JAX each change writes the
        # training state back to the variables first (`jax_state_sync`).
        if self.anneal and (fraction - self.annealed >= 0.005 or self.stopped):
            self.annealed = fraction
            if hasattr(self.model, "jax_state_sync"):
                self.model.jax_state_sync()
            cosine = 0.5 * (1.0 + math.cos(math.pi * fraction))
            self.model.optimizer.learning_rate = self.peak * (
                0.05 + 0.95 * cosine
            )


def learning_rate_schedule(learning_rate, schedule, total_steps):
    """Adam's learning rate: constant, or cosine decay over `total_steps`.

    Args:
        learning_rate: The peak (first) rate.
        schedule: `"constant"`, `"cosine"` (down to 1/20 of the peak at
            `total_steps`, Loshchilov & Hutter, 2017, without restarts) or
            `"cosine_time"` (the same over a time budget: a constant here,
            annealed by `TimeLimit(minutes, anneal=True)`).
        total_steps: Training steps the decay spans.

    Returns:
        A float or a `keras.optimizers.schedules.LearningRateSchedule`.
    """
    if schedule in ("constant", "cosine_time"):
        return learning_rate
    if schedule == "cosine":
        return keras.optimizers.schedules.CosineDecay(
            learning_rate, decay_steps=max(int(total_steps), 1), alpha=0.05
        )
    raise ValueError(
        "Received an invalid value for argument `schedule`, expected "
        "'constant', 'cosine' or 'cosine_time'. "
        f"Received: schedule={schedule!r}"
    )
