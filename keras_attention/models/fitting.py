"""The training scaffold that both examples share.

`keras_attention.models.sentiment` and `keras_attention.models.translation`
build their model and their `tf.data` pipelines; everything around the
call to `fit` is here, the same for both:

- datasets: `batched` shards by data under a multi-worker strategy,
  shuffles with a seed, batches, maps and prefetches;
- distribution: `strategy_from_flags` takes the examples' `--distribute`
  and `--cpu-devices` (flags defined in `examples/_cli.py`), and `fit`
  compiles and fits under the strategy (see
  `keras_attention.models.distribute`);
- callbacks, in this order: `BackupAndRestore` (first, so that an epoch is
  backed up before a later callback can stop the run), `EarlyStopping` on
  the validation loss with the best weights restored, `ModelCheckpoint` of
  the best weights, then the caller's own;
- resume: a run killed midway resumes from its last finished epoch when
  started again with the same output directory (the backup is deleted
  when training ends); beside the backup, each finished epoch's seconds
  are recorded, so that a resumed run knows how long the epochs it
  restored took;
- results: one `FitResult`, whose counts say which epochs this call ran
  and which it restored; reports: `training_metrics` (those counts as
  `metrics.json` keys), `write_run` (the chief writes `model.keras` and
  `metrics.json`) and `print_metrics`.

Under a multi-worker strategy every worker trains, but only the chief
writes the run's files; the others keep their checkpoints and backups in
`output_dir/worker-<index>/`. TensorFlow is imported inside the functions
that need it.
"""

import dataclasses
import json
import os
import time

import keras

from keras_attention.models import distribute

CHECKPOINT = "checkpoint.weights.h5"
BACKUP = "backup"
#: In the backup directory (so deleted with it): `{epoch: seconds}` of the
#: epochs finished so far, over every call that resumed the run.
EPOCH_SECONDS = "epoch_seconds.json"


@dataclasses.dataclass
class FitResult:
    """What a training function returns.

    Attributes:
        model: The trained model with the best validation weights; under a
            strategy with several replicas, a copy that predicts on this
            process alone (`distribute.local_copy`).
        history: `History.history`, the logs by epoch (of this call).
        train_seconds: Wall-clock time of this call's `fit`.
        epochs_trained: Epochs run by this call (not those restored from a
            backup).
        epochs_restored: Epochs restored from the backup of a killed run
            (`0` for a fresh run): this call started at the next one.
        restored_seconds: The seconds that the killed runs spent on the
            restored epochs, as recorded beside the backup (not the epoch
            lost in the kill, nor the time before the first epoch began).
        train_steps: Training batches run by this call.
        time_limit_stopped: Whether a wall-time cap (`TimeLimit`) ended
            training before its epochs.
    """

    model: keras.Model
    history: dict
    train_seconds: float
    epochs_trained: int
    epochs_restored: int = 0
    restored_seconds: float = 0.0
    train_steps: int = 0
    time_limit_stopped: bool = False

    @property
    def checkpoint_epoch(self):
        """The 1-based epoch of the weights kept: the lowest `val_loss`.

        `EarlyStopping(restore_best_weights=True)` restores them when the
        call ends (the best of this call's epochs); `None` without a
        validation loss.
        """
        losses = self.history.get("val_loss")
        if not losses:
            return None
        best = min(range(len(losses)), key=losses.__getitem__)
        return self.epochs_restored + best + 1

    @property
    def epochs_total(self) -> int:
        """Epochs that the model has trained: restored plus this call's."""
        return self.epochs_restored + self.epochs_trained

    @property
    def train_seconds_total(self) -> float:
        """Seconds of this call plus those of the epochs it restored."""
        return self.train_seconds + self.restored_seconds


def training_metrics(result) -> dict:
    """A `FitResult`'s counts as the examples' `metrics.json` keys.

    `epochs_trained` and `train_seconds` count this invocation alone (after
    a kill, the resumed part), `epochs_restored` the epochs taken from the
    backup, `epochs_total` and `train_seconds_total` the whole run;
    `checkpoint_epoch` is the epoch whose weights the model kept,
    `steps_per_second` this call's training batches over its seconds
    (validation and the first step's tracing included), and
    `time_limit_stopped` whether a wall-time cap ended the run.
    """
    seconds = result.train_seconds
    return {
        "epochs_trained": result.epochs_trained,
        "epochs_restored": result.epochs_restored,
        "epochs_total": result.epochs_total,
        "train_seconds": round(result.train_seconds, 1),
        "train_seconds_total": round(result.train_seconds_total, 1),
        "checkpoint_epoch": result.checkpoint_epoch,
        "train_steps": result.train_steps,
        "steps_per_second": (
            round(result.train_steps / seconds, 4) if seconds > 0 else None
        ),
        "time_limit_stopped": result.time_limit_stopped,
    }


class _EpochClock(keras.callbacks.Callback):
    """Records each finished epoch's seconds in `EPOCH_SECONDS`.

    It also counts the call's training batches (`steps`).

    An epoch counts from the end of the one before (from the start of
    training for the first of a call, so its compilation too). The file is
    replaced whole, never half written, just before `BackupAndRestore`
    backs the epoch up (a kill in between leaves a second that no
    backup restores, ignored); it keeps the epochs of earlier, killed
    calls.
    """

    def __init__(self, backup_dir):
        super().__init__()
        self.backup_dir = backup_dir
        self.path = os.path.join(backup_dir, EPOCH_SECONDS)
        self.seconds = {}

    def on_train_begin(self, logs=None):
        self.seconds = _read_epoch_seconds(self.path)
        self.steps = 0
        self._last = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        self.seconds[epoch] = now - self._last
        self._last = now
        os.makedirs(self.backup_dir, exist_ok=True)
        with open(self.path + ".tmp", "w") as f:
            json.dump({str(e): s for e, s in self.seconds.items()}, f)
        os.replace(self.path + ".tmp", self.path)


def _read_epoch_seconds(path) -> dict:
    """`{epoch: seconds}` from `path`; empty if it is absent or unreadable."""
    try:
        with open(path) as f:
            return {int(e): float(s) for e, s in json.load(f).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def strategy_from_flags(distribute_name="none", cpu_devices=None, sizes=()):
    """Splits the CPU if asked, then returns the strategy (and prints it).

    Call it first: logical devices and multi-worker set-ups must exist
    before any other TensorFlow or JAX op.

    Args:
        distribute_name: `"none"`, `"mirrored"`, `"multi-worker"` or
            `"model"`.
        cpu_devices: Logical CPU devices to make first, or `None`.
        sizes: For `"model"`, the heads and widths the model axis must
            divide (`distribute.model_mesh_shape`).

    Returns:
        What `distribute.get_strategy` returns.
    """
    if cpu_devices is not None:
        distribute.split_cpu(cpu_devices)
    strategy = distribute.get_strategy(distribute_name, sizes)
    print(f"replicas: {distribute.num_replicas(strategy)}")
    if isinstance(strategy, keras.distribution.ModelParallel):
        mesh = strategy.device_mesh
        axes = zip(mesh.axis_names, mesh.shape, strict=True)
        print("mesh: " + " x ".join(f"{n} {s}" for n, s in axes))
    return strategy


#: Bucket boundaries of `batched(length_fn=...)`: 2 tokens wide up to 40,
#: then wider (Multi30k's sentences have 13 words on average).
LENGTH_BUCKETS = [*range(4, 41, 2), 50, 64, 96]


def batched(
    dataset, batch_size, shuffle=False, seed=None, map_fn=None, length_fn=None
):
    """Shuffles (seeded), batches, maps and prefetches `dataset`.

    The dataset is sharded by data (not by file) under a multi-worker
    strategy, as datasets made from tensors must be.

    Args:
        dataset: An unbatched `tf.data.Dataset`.
        batch_size: The global batch size.
        shuffle: Whether to shuffle the whole dataset, again each epoch.
        seed: Seed of the shuffling.
        map_fn: Optional function applied to each batch.
        length_fn: Optional function of an element giving its length (an
            `int32` scalar): then each batch holds elements of about one
            length (`tf.data`'s `bucket_by_sequence_length`, buckets
            `LENGTH_BUCKETS` tokens wide), so a batch cut to its longest
            element pads little.

    Returns:
        A `tf.data.Dataset`.
    """
    import tensorflow as tf

    if shuffle:
        dataset = dataset.shuffle(
            int(dataset.cardinality()), seed=seed, reshuffle_each_iteration=True
        )
    if length_fn is None:
        dataset = dataset.batch(batch_size)
    else:
        dataset = dataset.bucket_by_sequence_length(
            length_fn,
            LENGTH_BUCKETS,
            [batch_size] * (len(LENGTH_BUCKETS) + 1),
        )
    if map_fn is not None:
        dataset = dataset.map(map_fn, num_parallel_calls=tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


def make_callbacks(work_dir, patience, callbacks=None):
    """Backup, early stopping, best-weights checkpoint, then `callbacks`."""
    return [
        keras.callbacks.BackupAndRestore(os.path.join(work_dir, BACKUP)),
        keras.callbacks.EarlyStopping(
            monitor="val_loss", patience=patience, restore_best_weights=True
        ),
        keras.callbacks.ModelCheckpoint(
            os.path.join(work_dir, CHECKPOINT),
            monitor="val_loss",
            save_best_only=True,
            save_weights_only=True,
        ),
        *(callbacks or []),
    ]


def fit(
    model,
    train_data,
    validation_data,
    output_dir,
    *,
    compile_args,
    batch_size,
    trainer=None,
    strategy=None,
    epochs=10,
    patience=3,
    verbose="auto",
    callbacks=None,
    sample_weight=False,
) -> FitResult:
    """Compiles and fits under `strategy`, with backups and checkpoints.

    Build `model` (and `trainer`) in `distribute.scope(strategy)` and call
    this outside it.

    Args:
        model: The model to return, trained.
        train_data: A batched `tf.data.Dataset` of training batches.
        validation_data: The same for validation.
        output_dir: Run directory (created); see the module docstring.
        compile_args: A function without arguments that returns the
            arguments of `compile` (optimizer, loss, ...) as a dict; it is
            called in the strategy's scope, where the optimizer must be
            created.
        batch_size: The global batch size of the datasets.
        trainer: The model to compile and fit, sharing `model`'s layers (a
            view of it from token ids, say); defaults to `model`.
        strategy: From `distribute.get_strategy`; defaults to none.
        epochs: Most epochs. Defaults to `10`.
        patience: Epochs without a lower validation loss before stopping.
            Defaults to `3`.
        verbose: `fit`'s verbosity. Defaults to `"auto"`.
        callbacks: Extra Keras callbacks, run after the built-in ones.
        sample_weight: Under a `keras.distribution`, append weights that
            keep the rows filling the last batch out of the loss and
            metrics (`distribute.even_batches`). Defaults to `False`.

    Returns:
        A `FitResult`.
    """
    fitted = distribute.trainer_for(
        model if trainer is None else trainer, strategy
    )
    with distribute.scope(strategy):
        fitted.compile(**compile_args())
    distribute.build_optimizer(fitted, strategy)
    work_dir = distribute.work_dir(output_dir, strategy)
    os.makedirs(work_dir, exist_ok=True)
    clock = _EpochClock(os.path.join(work_dir, BACKUP))
    start = time.perf_counter()
    with distribute.fit_scope(strategy):
        history = fitted.fit(
            distribute.even_batches(
                train_data, batch_size, strategy, sample_weight
            ),
            validation_data=distribute.even_batches(
                validation_data, batch_size, strategy, sample_weight
            ),
            epochs=epochs,
            # The clock first: an epoch's seconds are on disk before its
            # backup, so that every restored epoch has them.
            callbacks=[clock, *make_callbacks(work_dir, patience, callbacks)],
            # The datasets shuffle themselves, with their seed.
            shuffle=False,
            verbose=verbose,
        )
    seconds = time.perf_counter() - start
    restored = _epochs_restored(history.epoch, clock.seconds, epochs)
    return FitResult(
        model=distribute.local_copy(model, strategy),
        history=dict(history.history),
        train_seconds=seconds,
        epochs_trained=len(history.epoch),
        epochs_restored=restored,
        restored_seconds=sum(
            s for e, s in clock.seconds.items() if e < restored
        ),
        train_steps=clock.steps,
    )


def _epochs_restored(ran, recorded, epochs) -> int:
    """How many epochs the backup held, from `History.epoch` (`ran`).

    `fit` starts at the first epoch not backed up. When it ran none, the
    backup held `epochs` or more: as many as `recorded` (the clock's
    `{epoch: seconds}`) knows, if it knows more.
    """
    if ran:
        return ran[0]
    return max(epochs, max(recorded, default=-1) + 1)


def write_run(output_dir, model, metrics, strategy=None) -> bool:
    """The chief writes `model.keras` and `metrics.json` to `output_dir`.

    Returns:
        Whether this process wrote them (whether it is the chief).
    """
    if not distribute.is_chief(strategy):
        return False
    os.makedirs(output_dir, exist_ok=True)
    model.save(os.path.join(output_dir, "model.keras"))
    with open(os.path.join(output_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    return True


def print_metrics(metrics, keys) -> None:
    """Prints `key: value` for each of `keys` present in `metrics`."""
    for key in keys:
        if key in metrics:
            print(f"{key}: {metrics[key]}")
