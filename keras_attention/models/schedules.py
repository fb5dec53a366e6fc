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

    def __init__(self, minutes, anneal=False, warmup_steps=0):
        super().__init__()
        self.seconds = 60.0 * float(minutes)
        self.anneal = anneal
        self.warmup_steps = int(warmup_steps)
        self.start = None
        self.peak = None
        self.stopped = False

    def on_train_begin(self, logs=None):
        import time

        self.start = time.perf_counter()
        self.annealed = 0.0
        self.steps = int(ops.convert_to_numpy(self.model.optimizer.iterations))
        if self.anneal:
            self.peak = float(
                ops.convert_to_numpy(self.model.optimizer.learning_rate)
            )
            if self.steps < self.warmup_steps:
                self._set_rate(self.peak * (self.steps + 1) / self.warmup_steps)

    def _set_rate(self, rate):
        # On JAX each change writes the training state back to the
        # variables first (`jax_state_sync`).
        if hasattr(self.model, "jax_state_sync"):
            self.model.jax_state_sync()
        self.model.optimizer.learning_rate = rate

    def on_train_batch_end(self, batch, logs=None):
        import math
        import time

        elapsed = time.perf_counter() - self.start
        if elapsed > self.seconds:
            self.stopped = True
            self.model.stop_training = True
        fraction = min(elapsed / self.seconds, 1.0)
        self.steps += 1
        if not self.anneal:
            return
        warming = self.steps < self.warmup_steps
        warmup = min((self.steps + 1) / max(self.warmup_steps, 1), 1.0)
        # During the warm-up at every step, then every 1/200 of the budget.
        if (
            warming
            or self.steps == self.warmup_steps
            or fraction - self.annealed >= 0.005
            or self.stopped
        ):
            self.annealed = fraction
            cosine = 0.5 * (1.0 + math.cos(math.pi * fraction))
            self._set_rate(self.peak * warmup * (0.05 + 0.95 * cosine))


def learning_rate_schedule(
    learning_rate, schedule, total_steps, warmup_steps=0
):
    """Adam's learning rate: constant, or cosine decay over `total_steps`.

    With `warmup_steps`, the rate first rises linearly from 0 to
    `learning_rate` over that many steps (Goyal et al., 2017; the
    Transformer's warm-up), through Keras's `CosineDecay(warmup_steps=...)`;
    for `"cosine_time"` the warm-up is `TimeLimit(warmup_steps=...)`'s.

    Args:
        learning_rate: The peak (first) rate.
        schedule: `"constant"`, `"cosine"` (down to 1/20 of the peak at
            `total_steps`, Loshchilov & Hutter, 2017, without restarts) or
            `"cosine_time"` (the same over a time budget: a constant here,
            annealed by `TimeLimit(minutes, anneal=True)`).
        total_steps: Training steps the decay spans.
        warmup_steps: Steps of linear warm-up. Defaults to `0` (none).

    Returns:
        A float or a `keras.optimizers.schedules.LearningRateSchedule`.
    """
    warmup_steps = int(warmup_steps)
    if schedule == "cosine_time" or (
        schedule == "constant" and not warmup_steps
    ):
        return learning_rate
    if schedule in ("constant", "cosine"):
        if not warmup_steps:
            return keras.optimizers.schedules.CosineDecay(
                learning_rate, decay_steps=max(int(total_steps), 1), alpha=0.05
            )
        # After the warm-up: constant (alpha=1), or the cosine decay.
        return keras.optimizers.schedules.CosineDecay(
            0.0,
            decay_steps=max(int(total_steps) - warmup_steps, 1),
            alpha=1.0 if schedule == "constant" else 0.05,
            warmup_target=learning_rate,
            warmup_steps=warmup_steps,
        )
    raise ValueError(
        "Received an invalid value for argument `schedule`, expected "
        "'constant', 'cosine' or 'cosine_time'. "
        f"Received: schedule={schedule!r}"
    )
