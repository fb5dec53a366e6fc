"""Learning-rate schedules and the time budget."""

import keras
import pytest

from keras_attention.models import schedules


def test_learning_rate_schedules_and_time_limit_anneal():
    rate = schedules.learning_rate_schedule(1e-2, "cosine", 10)
    assert float(rate(0)) == pytest.approx(1e-2)
    assert float(rate(10)) == pytest.approx(5e-4)
    assert schedules.learning_rate_schedule(1e-2, "constant", 10) == 1e-2
    with pytest.raises(ValueError, match="schedule='linear'"):
        schedules.learning_rate_schedule(1e-2, "linear", 10)

    class Stub:
        optimizer = keras.optimizers.Adam(1e-2)
        stop_training = False
        synced = 0

        def jax_state_sync(self):
            self.synced += 1

    stub = Stub()
    limit = schedules.TimeLimit(minutes=1e-9, anneal=True)
    limit.set_model(stub)
    limit.on_train_begin()
    limit.on_train_batch_end(0)
    # Past the budget: stopped, at 1/20 of the first rate.
    assert stub.stop_training and limit.stopped
    assert float(stub.optimizer.learning_rate) == pytest.approx(5e-4)
    # The training state is written back before the rate changes (on JAX
    # Keras's `Callback.model` also does it, at each access).
    assert stub.synced >= 1
