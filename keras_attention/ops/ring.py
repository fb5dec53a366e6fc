"""Context parallelism: attention over a sequence sharded across devices.

`ring_attention` splits the sequence axis of the query, key and value
over one axis of a `keras.distribution.DeviceMesh`: each device keeps its
block of queries while the key/value blocks pass round the ring of the
axis's devices (`ops/_ring.py`), with the online softmax merged across
devices and a second ring for the gradients. No device holds more of the
sequence than its share and the block passing by, so a sequence that no
one device can hold trains, and the result is the one-device result.

`ContextParallel` is the mesh, the sequence axis and optional batch and
heads axes; as a context manager it sends `flex_attention` and the
multi-head layers (MultiHeadAttention, SelfAttention, GQA, MLA) to the
ring for the calls traced inside it, as PyTorch's `context_parallel`
does. The arrays are sharded by JAX (`jax.shard_map`), so this runs on
the JAX backend only; TensorFlow and PyTorch get a `ValueError` where it
is asked for.
"""

import keras
from keras import ops

from keras_attention.ops import _layout
from keras_attention.ops import _ring
from keras_attention.ops import checks
from keras_attention.ops import mods as mods_lib
from keras_attention.ops.checks import logits_dtype
from keras_attention.ops.logits import kept_lse
from keras_attention.ops.mask_mods import MaskCombination

# The active `ContextParallel` scopes, innermost last: what a layer or
# `flex_attention` reads to tell the planner (`current()` returns it).
ACTIVE = []


def _needs_jax(what):
    backend = keras.backend.backend()
    if backend != "jax":
        raise ValueError(
            f"{what} needs the JAX backend: the sequence is sharded with "
            "`jax.shard_map` over a `keras.distribution.DeviceMesh`, which "
            "TensorFlow and PyTorch do not run. Set KERAS_BACKEND=jax. "
            f"Received: backend={backend!r}"
        )


def _invalid(argument, value, expected):
    return ValueError(
        f"Expected `{argument}` to be {expected}. "
        f"Received: {argument}={value!r}"
    )


class ContextParallel:
    """The sequence axis sharded over a mesh axis: ring attention.

    Use it as a context manager: `flex_attention` and the multi-head
    layers called (traced) inside it attend with `ring_attention` over
    these axes. Keras traces a model's step at its first `fit`,
    `evaluate` or `predict`, so enter it around those calls.

    The path is chosen when a function is traced, and `jax.jit` keeps
    the trace: a function jitted and traced outside the context would run
    its one-device program inside it. So entering the context also sets
    its mesh as JAX's own (`jax.set_mesh`), which is part of `jit`'s
    cache key: a jitted function called inside is traced anew and takes
    the ring, and called outside again it takes its one-device trace.
    Inside a function `jit` is tracing, JAX has no mesh to set (that
    trace is new anyway), and a mesh of devices JAX lacks is named by
    the ring when it runs.

    Args:
        device_mesh: A `keras.distribution.DeviceMesh`.
        sequence_axis: The mesh axis the sequence is split over. Defaults
            to `"sequence"`.
        batch_axis: Optional mesh axis the batch is split over (data
            parallelism beside the ring). Defaults to `None`.
        heads_axis: Optional mesh axis the key/value heads are split over
            (as `keras_attention.distribution.layout_map`'s model axis).
            Defaults to `None`.

    Example:

    ```python
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh((len(devices),), ["sequence"], devices)
    with keras_attention.distribution.ContextParallel(mesh):
        model.fit(x, y)  # its attention layers run the ring
    ```
    """

    def __init__(
        self,
        device_mesh,
        sequence_axis="sequence",
        batch_axis=None,
        heads_axis=None,
    ):
        _needs_jax("ContextParallel")
        if not isinstance(device_mesh, keras.distribution.DeviceMesh):
            raise _invalid(
                "device_mesh", device_mesh, "a `keras.distribution.DeviceMesh`"
            )
        names = list(device_mesh.axis_names)
        axes = {
            "sequence_axis": sequence_axis,
            "batch_axis": batch_axis,
            "heads_axis": heads_axis,
        }
        for argument, value in axes.items():
            optional = argument != "sequence_axis"
            if (optional and value is None) or (
                isinstance(value, str) and value in names
            ):
                continue
            raise _invalid(
                argument, value, f"an axis of the mesh, one of {names}"
            )
        given = [v for v in axes.values() if v is not None]
        if len(set(given)) != len(given):
            raise ValueError(
                "Expected `sequence_axis`, `batch_axis` and `heads_axis` to "
                f"be different mesh axes. Received: {axes}"
            )
        self.device_mesh = device_mesh
        self.sequence_axis = sequence_axis
        self.batch_axis = batch_axis
        self.heads_axis = heads_axis
        self._mesh = None
        # One entry per `__enter__`: JAX's mesh context, or None.
        self._jax_contexts = []

    def axis_size(self, axis):
        """The number of devices along a mesh axis (1 for `None`)."""
        if axis is None:
            return 1
        names = list(self.device_mesh.axis_names)
        return int(self.device_mesh.shape[names.index(axis)])

    def jax_mesh(self):
        """The mesh as a `jax.sharding.Mesh` of the same devices."""
        if self._mesh is None:
            self._mesh = _jax_mesh(self.device_mesh)
        return self._mesh

    def __enter__(self):
        ACTIVE.append(self)
        self._jax_contexts.append(self._set_jax_mesh())
        return self

    def __exit__(self, *exc):
        context = self._jax_contexts.pop()
        if context is not None:
            context.__exit__(*exc)
        ACTIVE.remove(self)
        return False

    def _set_jax_mesh(self):
        """Enters the mesh as JAX's mesh context (part of `jit`'s cache
        key, so that a function traced outside is traced again inside);
        `None` where there is none to enter."""
        import jax

        set_mesh = getattr(jax, "set_mesh", None) or getattr(
            jax.sharding, "use_mesh", None
        )
        if set_mesh is None:
            return None
        try:
            context = set_mesh(self.jax_mesh())
        except ValueError:
            # Inside `jax.jit` (JAX refuses a mesh there; the function is
            # being traced anyway), or devices JAX does not have (the ring
            # raises naming them when it runs).
            return None
        context.__enter__()
        return context

    def __repr__(self):
        return (
            f"ContextParallel(mesh={tuple(self.device_mesh.shape)}, "
            f"sequence_axis={self.sequence_axis!r}, batch_axis="
            f"{self.batch_axis!r}, heads_axis={self.heads_axis!r})"
        )


def current():
    """The innermost active `ContextParallel`, or `None`."""
    return ACTIVE[-1] if ACTIVE else None


def _jax_mesh(device_mesh):
    """A `jax.sharding.Mesh` of a `DeviceMesh`'s devices (Keras names
    them `"platform:id"`)."""
    import jax
    import numpy as np

    by_name = {f"{d.platform}:{d.id}": d for d in jax.devices()}
    devices = []
    for device in np.asarray(device_mesh.devices).reshape(-1):
        if isinstance(device, str):
            device = str(device)
            name = device.lower().replace("gpu", "cuda")
            found = by_name.get(device.lower()) or by_name.get(name)
            if found is None:
                raise ValueError(
                    "Expected the mesh's devices among JAX's devices, "
                    f"{sorted(by_name)}. Received: device={device!r}"
                )
            device = found
        devices.append(device)
    grid = np.array(devices, dtype=object).reshape(device_mesh.shape)
    return jax.sharding.Mesh(grid, tuple(device_mesh.axis_names))


def _parts(mask_mod):
    """The factors of an AND of mask mods (a plain mod is one factor)."""
    if mask_mod is None:
        return []
    if isinstance(mask_mod, MaskCombination) and mask_mod.op == "and":
        return [p for m in mask_mod.mask_mods for p in _parts(m)]
    return [mask_mod]


def _split_masks(mask_mod, causal):
    """`(band, mask mods of positions, documents)` of the call's masks.

    The first factor with `limits` (causal, a window, a band) is the
    band whose empty device blocks are skipped; `mods.document` gives its
    segment ids, which travel with their blocks. A mod that holds other
    tensors is refused: only positions cross the ring.
    """
    parts = _parts(mask_mod)
    if causal:
        parts.insert(0, mods_lib.causal())
    band, others, documents = None, [], []
    for part in parts:
        if isinstance(part, mods_lib.Document):
            documents.append(part)
        elif getattr(part, "holds_tensors", False):
            raise ValueError(
                "ring_attention reads mask mods of positions, causal, "
                "windows, bands and `mods.document`; a mod holding other "
                "tensors cannot cross the ring. Pass them as `query_mask` "
                f"/ `key_mask`. Received: mask_mod={part!r}"
            )
        elif band is None and getattr(part, "limits", None) is not None:
            band = part
        else:
            others.append(part)
    if len(documents) > 1:
        raise ValueError(
            "ring_attention reads one `mods.document` mask. Received: "
            f"{len(documents)} of them in mask_mod={mask_mod!r}"
        )
    return band, tuple(others), (documents[0] if documents else None)


def _check_score_mod(score_mod):
    if score_mod is None:
        return None
    if not callable(score_mod) or getattr(score_mod, "tensors", ()):
        raise ValueError(
            "ring_attention reads score mods of positions (ALiBi, "
            "soft-capping); one holding tensors (a bias, a learned table) "
            f"cannot cross the ring. Received: score_mod={score_mod!r}"
        )
    return score_mod


def _check_lengths(context, query, key):
    """The number of devices on the sequence axis, and whether the batch
    is split over `batch_axis` (not while Keras infers shapes with a
    symbolic batch: the ring then sees the whole batch)."""
    axis = context.sequence_axis
    devices = context.axis_size(axis)
    for name, x in (("query", query), ("key", key)):
        length = x.shape[1]
        if not isinstance(length, int):
            raise ValueError(
                "The ring splits a sequence of static length over the "
                f"mesh axis {axis!r}; give the model's inputs a length. "
                f"Received: {name}.shape={tuple(x.shape)}"
            )
        if length % devices:
            raise ValueError(
                f"The mesh axis {axis!r} of {devices} devices must divide "
                f"the sequence it shards. Received: {name}.shape="
                f"{tuple(x.shape)} (length {length}) on a mesh axis of "
                f"size {devices}"
            )
    split_batch = False
    for argument, axis_name, size in (
        ("batch_axis", context.batch_axis, query.shape[0]),
        ("heads_axis", context.heads_axis, key.shape[2]),
    ):
        count = context.axis_size(axis_name)
        if argument == "batch_axis" and not isinstance(size, int):
            continue
        split_batch = split_batch or argument == "batch_axis"
        if size % count:
            what = "batch size" if argument == "batch_axis" else "key heads"
            raise ValueError(
                f"The mesh axis {axis_name!r} ({argument}) of {count} "
                f"devices must divide the {what}. Received: {what}={size} "
                f"on a mesh axis of size {count}"
            )
    return devices, split_batch


def ring_attention(
    query,
    key,
    value,
    context=None,
    *,
    causal=False,
    mask_mod=None,
    score_mod=None,
    query_mask=None,
    key_mask=None,
    scale=None,
    chunk_size=512,
    return_lse=False,
):
    """Attention with the sequence sharded over devices (ring attention).

    The same result, and gradients, as `flex_attention` on one device, in
    its layout `(batch_size, T, heads, depth)`: the sequence axis of the
    query, key and value is split over `context.sequence_axis`, each
    device attends its queries to the key/value block it holds with the
    block kernel (an online softmax, memory linear in the block), and the
    key/value blocks pass round the ring of devices, `P` steps for `P`
    devices (Liu et al., 2023). A pair of device blocks that the band
    (`causal`, a window mod) or the documents (`mods.document`) leave
    empty is skipped; the band's mask is evaluated only on pairs it cuts.

    Args:
        query: `(batch_size, Tq, heads, depth)`.
        key: `(batch_size, Tk, kv_heads, depth)`, `heads % kv_heads == 0`.
        value: `(batch_size, Tk, kv_heads, Dv)`.
        context: A `ContextParallel`. Defaults to the active one.
        causal: Whether query `i` only sees keys `j <= i`. Defaults to
            `False`.
        mask_mod: Optional mask mod of positions (`mods.causal`,
            `mods.sliding_window`, `mods.band`, `mods.prefix_lm`, your
            own of `q_idx` and `kv_idx`), `mods.document(segment_ids)`, or
            their `and_masks`.
        score_mod: Optional score mod of positions (`mods.alibi`,
            `mods.soft_cap`).
        query_mask: Optional boolean `(batch_size, Tq)`; masked queries get
            a zero output.
        key_mask: Optional boolean `(batch_size, Tk)`; masked keys get
            weight 0.
        scale: Factor on the logits. Defaults to `1 / sqrt(depth)`.
        chunk_size: Queries and keys per block of the kernel on each
            device. Defaults to `512`.
        return_lse: Whether to also return the log-sum-exp of each row,
            `(batch_size, heads, Tq)` (`-inf` for a query with no kept
            key), with gradients through it. Defaults to `False`.

    Returns:
        The output `(batch_size, Tq, heads, Dv)` in the dtype of `value`,
        sharded as the query; with `return_lse=True` also the
        log-sum-exp.

    Raises:
        ValueError: on TensorFlow or PyTorch; when a mesh axis does not
            divide what it shards (the sequence, the batch, the key
            heads); for a mod that holds tensors other than documents.
    """
    _needs_jax("ring_attention")
    context = context if context is not None else current()
    if not isinstance(context, ContextParallel):
        raise _invalid(
            "context",
            context,
            "a `ContextParallel`, or called inside one (`with "
            "ContextParallel(mesh): ...`)",
        )
    query, key, value = (ops.convert_to_tensor(t) for t in (query, key, value))
    checks.grouped_heads("ring_attention", query, key, value)
    devices, split_batch = _check_lengths(context, query, key)
    size = (checks.chunk_sizes(chunk_size),) * 2
    band, others, document = _split_masks(mask_mod, causal)
    out_dtype = keras.backend.standardize_dtype(value.dtype)
    dtype = logits_dtype(out_dtype)
    tensors = (ops.cast(t, dtype) for t in (query, key, value))
    q, k, v = _layout.to_layout(*tensors)
    if scale is None:
        scale = 1.0 / float(query.shape[-1]) ** 0.5
    lengths = (query.shape[1] // devices, key.shape[1] // devices)
    config = _ring.Config(
        axis=context.sequence_axis,
        size=devices,
        scale=float(scale),
        sizes=(min(size[0], lengths[0]), min(size[1], lengths[1])),
        lengths=lengths,
        band=band,
        mask_mods=others,
        score_mod=_check_score_mod(score_mod),
    )
    extras = {}
    kv_extras = {}
    if query_mask is not None:
        extras["query_mask"] = ops.cast(query_mask, "bool")
    if key_mask is not None:
        kv_extras["key_mask"] = ops.cast(key_mask, "bool")
    if document is not None:
        extras["segment_ids"] = ops.cast(document.segment_ids, "int32")
        kv_extras["segment_ids"] = ops.cast(document.kv_segment_ids, "int32")
    batch_axis = context.batch_axis if split_batch else None
    out, lse = _sharded(
        context, config, batch_axis, (q, k, v), (extras, kv_extras)
    )
    out = ops.cast(_layout.ungroup(out), out_dtype)
    if not return_lse:
        return out
    return out, kept_lse(_layout.rows(lse))


def _sharded(context, config, batch_axis, tensors, extras):
    """`_ring.attend` on every device of the mesh, `jax.shard_map`:
    `extras` are the query's and the key's `(B, T)` tensors."""
    import jax
    from jax.sharding import PartitionSpec

    seq, heads = context.sequence_axis, context.heads_axis
    blocks = PartitionSpec(batch_axis, heads, None, seq, None)
    rows = PartitionSpec(batch_axis, seq)

    def local(q, k, v, extras, kv_extras):
        return _ring.attend(config, q, k, v, extras, kv_extras)

    run = jax.shard_map(
        local,
        mesh=context.jax_mesh(),
        in_specs=(
            blocks,
            blocks,
            blocks,
            *({name: rows for name in part} for part in extras),
        ),
        out_specs=(blocks, blocks),
        check_vma=False,
    )
    return run(*tensors, *extras)
