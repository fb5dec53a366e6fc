"""`--distribute none|mirrored|multi-worker|model` on every Keras backend.

The example scripts take one flag and get what the backend offers:

- `none`: one device. TensorFlow's default strategy; no distribution on
  JAX.
- `mirrored`: every local device. `tf.distribute.MirroredStrategy` (all
  local GPUs, or the CPU); `keras.distribution.DataParallel` over
  `keras.distribution.list_devices()` on JAX.
- `multi-worker`: several processes (machines). On TensorFlow,
  `tf.distribute.MultiWorkerMirroredStrategy` with the cluster of
  `TF_CONFIG`; on JAX, `keras.distribution.initialize()` then
  `DataParallel` over every device of every process.
- `model`: tensor parallelism, JAX only (Keras's `ModelParallel` places
  weights on JAX alone). `keras.distribution.ModelParallel` with
  `keras_attention.distribution.layout_map` on a `(batch, model)` mesh of
  the local devices: the heads (and embedding dims) split over the model
  axis, the batches over the batch axis (`model_mesh_shape`).

On JAX, `multi-worker` reads the `KERAS_DISTRIBUTION_JOB_ADDRESSES`,
`KERAS_DISTRIBUTION_NUM_PROCESSES` and `KERAS_DISTRIBUTION_PROCESS_ID`
environment variables of `keras.distribution.initialize`; when they are
not set, it derives them from `TF_CONFIG` (the coordinator is the chief,
or worker 0), so one cluster description serves both backends. Other
backends (PyTorch) support `none` only. See `docs/distributed.md`.

Everything that creates variables (model, optimizer) and `fit` run inside
`scope(strategy)`; `trainer_for` gives the model to fit and `local_copy`
the model to predict with afterwards. Only public Keras and TensorFlow
APIs are used: text models are fit from token ids (the vectorizer runs in
the `tf.data` pipeline), so every strategy sees integer tensors.
Under a multi-worker run every process trains, but only the chief
(`is_chief`) writes the run's files; the others write their checkpoints
and backups under `work_dir`, a directory of their own, as
Keras asks for.
"""

import contextlib
import json
import math
import os

import keras

from keras_attention import distribution
from keras_attention.models import cli

#: The `--distribute` choices, as the scripts' command line spells them.
NAMES = cli.DISTRIBUTE_NAMES
_JAX_ENV = (
    "KERAS_DISTRIBUTION_JOB_ADDRESSES",
    "KERAS_DISTRIBUTION_NUM_PROCESSES",
    "KERAS_DISTRIBUTION_PROCESS_ID",
)


def _is_keras_distribution(strategy) -> bool:
    # `keras.distribution` exports the concrete classes, not their base.
    return isinstance(
        strategy,
        (keras.distribution.DataParallel, keras.distribution.ModelParallel),
    )


def _check_name(name):
    if name not in NAMES:
        raise ValueError(
            "Received an invalid value for argument `distribute`, expected "
            f"one of {list(NAMES)}. Received: distribute={name!r}"
        )


def _tf_config() -> dict:
    text = os.environ.get("TF_CONFIG") or "{}"
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        config = error
    if not isinstance(config, dict):
        raise ValueError(
            "The environment variable TF_CONFIG must be a JSON object "
            "(see docs/distributed.md). Received: TF_CONFIG="
            f"{text!r}"
        )
    return config


def tf_config_index(config: dict | None = None) -> int:
    """This task's index under `TF_CONFIG`; 0 for the chief (or alone).

    Without a `chief` task in the cluster, worker 0 acts as chief.
    Evaluators and other task types never act as chief (index >= 1000).
    """
    config = _tf_config() if config is None else config
    task = config.get("task", {})
    kind = task.get("type", "chief")
    index = int(task.get("index", 0))
    if kind == "chief":
        return 0
    if kind == "worker":
        return index + int("chief" in config.get("cluster", {}))
    return 1000 + index


def _jax_cluster_from_tf_config() -> dict:
    """`keras.distribution.initialize` arguments from `TF_CONFIG`."""
    config = _tf_config()
    cluster = config.get("cluster", {})
    addresses = [*cluster.get("chief", []), *cluster.get("worker", [])]
    if not addresses:
        raise ValueError(
            "--distribute multi-worker on the JAX backend needs the cluster: "
            f"set {', '.join(_JAX_ENV)} (see keras.distribution.initialize) "
            "or TF_CONFIG with 'chief'/'worker' addresses; see "
            "docs/distributed.md. Received: TF_CONFIG="
            f"{os.environ.get('TF_CONFIG')!r}"
        )
    return {
        "job_addresses": ",".join(addresses),
        "num_processes": len(addresses),
        "process_id": tf_config_index(config),
    }


def _check_tf_cluster() -> None:
    """Refuses multi-worker TensorFlow without a cluster in `TF_CONFIG`.

    `MultiWorkerMirroredStrategy` without one trains alone (one replica)
    and exits 0, so a forgotten `TF_CONFIG` would overwrite the run
    directory with a single-process run; JAX refuses the same.
    """
    cluster = _tf_config().get("cluster", {})
    if not any(cluster.get(job) for job in ("chief", "worker")):
        raise ValueError(
            "--distribute multi-worker on the TensorFlow backend needs the "
            "cluster: set TF_CONFIG with 'chief'/'worker' addresses (see "
            "docs/distributed.md), or train in one process with "
            "--distribute none or mirrored. Received: TF_CONFIG="
            f"{os.environ.get('TF_CONFIG')!r}"
        )


def split_cpu(devices: int) -> None:
    """Splits the CPU into `devices` logical devices (`--cpu-devices`).

    So that `mirrored` has several devices to mirror over on a machine
    without accelerators: `tf.config.set_logical_device_configuration` on
    TensorFlow, `jax_num_cpu_devices` on JAX. Call it first, before
    `get_strategy` and before anything else starts the runtime.
    `MirroredStrategy` then uses the CPU's logical devices only when there
    is no GPU.

    Args:
        devices: How many logical CPU devices, a positive integer.
    """
    if isinstance(devices, bool) or not isinstance(devices, int):
        devices_ok = False
    else:
        devices_ok = devices >= 1
    if not devices_ok:
        raise ValueError(
            "Received an invalid value for argument `cpu_devices`, expected "
            f"a positive integer. Received: cpu_devices={devices!r}"
        )
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * devices
        )
    elif backend == "jax":
        import jax

        jax.config.update("jax_num_cpu_devices", devices)
    elif devices > 1:
        raise ValueError(
            f"--cpu-devices needs the TensorFlow or JAX backend; the "
            f"{backend} backend runs on one device here. Received: "
            f"cpu_devices={devices}"
        )


def model_mesh_shape(devices: int, sizes=()) -> tuple[int, int]:
    """`(batch, model)`: the mesh of `--distribute model` on `devices`.

    The model axis is the largest divisor of `devices` that divides every
    one of `sizes` (the heads, key/value heads and widths that
    `layout_map` splits), so that each device holds whole heads; the
    batch axis takes the rest. With no common divisor, the model axis is
    1 and the run is data parallel.

    Args:
        devices: How many devices, a positive integer.
        sizes: The sizes the model axis must divide.

    Returns:
        `(batch_axis_size, model_axis_size)`.
    """
    common = math.gcd(devices, *sizes)
    return devices // common, common


def _model_parallel(sizes):
    backend = keras.backend.backend()
    if backend != "jax":
        raise ValueError(
            "--distribute model needs the JAX backend (KERAS_BACKEND=jax): "
            "Keras's keras.distribution.ModelParallel places weights on "
            "JAX only (see docs/distributed.md). "
            f"Received: backend={backend!r}"
        )
    devices = keras.distribution.list_devices()
    shape = model_mesh_shape(len(devices), sizes)
    mesh = keras.distribution.DeviceMesh(shape, ["batch", "model"], devices)
    return keras.distribution.ModelParallel(
        layout_map=distribution.layout_map(mesh), batch_dim_name="batch"
    )


def get_strategy(name: str = "none", model_sizes=()):
    """The distribution for `--distribute NAME` on the current backend.

    Call it first, before any other TensorFlow or JAX computation:
    multi-worker set-ups must exist before the runtime starts.

    Args:
        name: `"none"`, `"mirrored"`, `"multi-worker"` or `"model"` (see
            the module docstring for what each means on each backend).
        model_sizes: For `"model"`, the sizes the model axis must divide
            (`model_mesh_shape`). Defaults to `()`.

    Returns:
        On TensorFlow, a `tf.distribute.Strategy`. On JAX, `None` (for
        `"none"`), a `keras.distribution.DataParallel` or (for
        `"model"`) a `keras.distribution.ModelParallel`. On other
        backends, `None`. Use it with `scope`, `is_chief` and `work_dir`.
    """
    _check_name(name)
    if name == "model":
        return _model_parallel(model_sizes)
    if name == "multi-worker":
        _tf_config()  # A malformed one is our error, not a JSON traceback.
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        if name == "none":
            return tf.distribute.get_strategy()
        if name == "mirrored":
            return tf.distribute.MirroredStrategy()
        _check_tf_cluster()
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "none":
        return None
    if backend != "jax":
        raise ValueError(
            f"--distribute {name} needs the TensorFlow or JAX backend; the "
            f"{backend} backend runs on one device here (see "
            f"docs/distributed.md). Received: distribute={name!r}"
        )
    if name == "multi-worker":
        if all(os.environ.get(k) is None for k in _JAX_ENV):
            keras.distribution.initialize(**_jax_cluster_from_tf_config())
        else:
            keras.distribution.initialize()
    return keras.distribution.DataParallel(
        devices=keras.distribution.list_devices()
    )


def scope(strategy):
    """The context in which to build, compile and fit under `strategy`."""
    if strategy is None:
        return contextlib.nullcontext()
    return strategy.scope()


class _ReplicaLogsTrainer(keras.Model):
    """Fits `model` under `tf.distribute.MultiWorkerMirroredStrategy`.

    Keras 3's `fit` does not run under that strategy as it is
    (keras-team/keras#20585, tensorflow/tensorflow#72388): a model created
    in its scope is first built from one batch averaged over the workers,
    which the strategy cannot reduce for a nested `(x, y)` batch, and the
    step's logs are averaged over an axis 0 that scalars do not have. This
    wrapper, created outside the scope around a model created inside it,
    takes the documented way round both: it has no strategy of its own, so
    `fit` (called in the scope) builds it in the first step, and its
    `train_step` / `test_step` (Keras's override points) return each log
    as a `(1,)` tensor, which averages to the same scalar. The wrapped
    model's variables are the ones trained.
    """

    def __init__(self, model, **kwargs):
        super().__init__(name=f"{model.name}_trainer", **kwargs)
        self.wrapped = model
        # Built when `model` is: `BackupAndRestore` requires a built model.
        self.built = model.built

    def call(self, inputs, training=None):
        return self.wrapped(inputs, training=training)

    def train_step(self, data):
        logs = super().train_step(data)
        return {name: keras.ops.reshape(v, (1,)) for name, v in logs.items()}

    def test_step(self, data):
        logs = super().test_step(data)
        return {name: keras.ops.reshape(v, (1,)) for name, v in logs.items()}


def trainer_for(model, strategy):
    """The model to compile and fit for `model` under `strategy`.

    `model` itself, except under a multi-worker `tf.distribute` strategy,
    where it is a wrapper that shares `model`'s variables (see
    `_ReplicaLogsTrainer`). Call it outside `scope(strategy)`, then compile
    the result in the scope and pass it to `build_optimizer`.
    """
    if is_multi_worker(strategy) and not _is_keras_distribution(strategy):
        return _ReplicaLogsTrainer(model)
    return model


def build_optimizer(trainer, strategy):
    """Creates the optimizer's variables of a compiled `trainer` now.

    In `scope(strategy)`, so that they are mirrored; `fit` would otherwise
    create them inside the distributed step. Does nothing when they exist.
    """
    if trainer.optimizer is not None and not trainer.optimizer.built:
        with scope(strategy):
            trainer.optimizer.build(trainer.trainable_variables)


def fit_scope(strategy, model=None):
    """The context in which to call `fit` under `strategy`.

    `scope(strategy)`: a `keras.distribution` places the batches as well
    as the variables, and a `tf.distribute` strategy is the one `fit` uses
    for a model made by `trainer_for`. `model` is accepted for backward
    compatibility and unused.
    """
    del model
    return scope(strategy)


def local_copy(model, strategy):
    """`model`, or a copy of it that predicts on this process alone.

    Under a `tf.distribute` strategy with several replicas, Keras 3's
    `predict_on_batch` hands the whole batch to every replica and
    concatenates their outputs, and after a multi-worker run `predict`
    splits each batch over the workers. The copy is made through a `.keras`
    file outside `scope(strategy)`, so it has plain variables with the
    trained values and no strategy; elsewhere `model` is returned as it
    is.
    """
    if num_replicas(strategy) < 2 or _is_keras_distribution(strategy):
        return model
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "model.keras")
        model.save(path)
        return keras.saving.load_model(path, compile=False)


def even_batches(dataset, batch_size: int, strategy, sample_weight=False):
    """Pads each batch of `dataset` to `batch_size` rows for `strategy`.

    A `keras.distribution` splits every batch evenly over the devices, so
    a short last batch (say 31 rows on 2 devices) cannot be placed. Under
    one, the missing rows are filled with zeros: an empty sentence, or an
    all-padding source and target that a loss with `ignore_class=0`
    ignores; with `sample_weight=True` a third element, `1` for real rows
    and `0` for filler, keeps them out of the loss and metrics. (The mean
    loss Keras reports then counts the filler rows in its denominator, a
    constant factor of at most `(n + batch_size - 1) / n` for `n` examples,
    the same every epoch.) Elsewhere `dataset` is returned as it is.

    Args:
        dataset: A batched `tf.data.Dataset` of `(inputs, targets)`.
        batch_size: The global batch size, a multiple of the number of
            replicas.
        strategy: From `get_strategy`.
        sample_weight: Append the `(batch_size,)` weights. Defaults to
            `False`.

    Returns:
        A `tf.data.Dataset`.
    """
    if not _is_keras_distribution(strategy):
        return dataset
    import tensorflow as tf

    replicas = num_replicas(strategy)
    if batch_size % replicas:
        raise ValueError(
            "Received an invalid value for argument `batch_size`, expected a "
            f"multiple of the number of replicas ({replicas}). Received: "
            f"batch_size={batch_size}"
        )

    def pad(*element):
        rows = tf.shape(tf.nest.flatten(element)[0])[0]
        missing = batch_size - rows

        def pad_rows(tensor):
            paddings = [[0, missing]] + [[0, 0]] * (tensor.shape.rank - 1)
            return tf.pad(tensor, paddings)

        padded = tf.nest.map_structure(pad_rows, element)
        if sample_weight:
            weights = tf.pad(tf.ones([rows]), [[0, missing]])
            return (*padded, weights)
        return padded

    # Every batch is full now; batching again (the same rows together)
    # makes the batch size static, which multi-process sharding reads.
    batches = dataset.cardinality()
    return (
        dataset.map(pad)
        .unbatch()
        .padded_batch(batch_size, drop_remainder=True)
        .apply(tf.data.experimental.assert_cardinality(batches))
        .prefetch(tf.data.AUTOTUNE)
    )


def is_multi_worker(strategy) -> bool:
    """Whether `strategy` spans several processes (`multi-worker`)."""
    if strategy is None:
        return False
    if _is_keras_distribution(strategy):
        import jax

        return jax.process_count() > 1
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def num_replicas(strategy) -> int:
    """How many replicas share each global batch."""
    if strategy is None:
        return 1
    if _is_keras_distribution(strategy):
        # The batch axis: under ModelParallel the model axis holds one
        # replica split over its devices.
        mesh = strategy.device_mesh
        axis = list(mesh.axis_names).index(strategy.batch_dim_name)
        return int(mesh.shape[axis])
    return int(strategy.num_replicas_in_sync)


def worker_index(strategy=None) -> int:
    """This process's index in the cluster; 0 for the chief (or alone).

    On JAX under `keras.distribution`, the process index; otherwise read
    from `TF_CONFIG` (see `tf_config_index`).
    """
    if _is_keras_distribution(strategy):
        import jax

        return jax.process_index()
    return tf_config_index()


def is_chief(strategy=None) -> bool:
    """Whether this process writes the run's files (model, metrics)."""
    return worker_index(strategy) == 0


def work_dir(output_dir: str, strategy=None) -> str:
    """Where this process keeps checkpoints and backups.

    `output_dir` for the chief; `output_dir/worker-<index>` for the other
    workers, whose copies are thrown away (every worker must save, since
    saving a distributed model is a collective operation, but they must
    not overwrite the chief's files).
    """
    index = worker_index(strategy)
    if index == 0:
        return output_dir
    return os.path.join(output_dir, f"worker-{index}")
