"""Attention across devices: tensor parallelism and context parallelism.

`ContextParallel` (from `keras_attention.ops.ring`) splits the sequence
over a mesh axis: inside it, `flex_attention` and the multi-head layers
run ring attention (`keras_attention.ops.ring_attention`).

The rest of this module is tensor parallelism: how this package's
weights shard over a device mesh.

`layout_map` returns a `keras.distribution.LayoutMap` for
`keras.distribution.ModelParallel`, as keras-hub's
`Backbone.get_layout_map` does for its models: Megatron-LM's split
(Shoeybi et al., 2019) of every multi-head projection over its heads, so
that each device of the model axis holds whole heads and attends to them
alone, with one all-reduce after the output projection.

A `LayoutMap` is keyed by regexes over `variable.path`, not by layer, and
it is read when each variable is created. The rules below are therefore
written over the names of the projections (the same as Keras's own
attention layers, so `keras.layers.MultiHeadAttention` shards too); what a
path cannot say (how many heads a layer has) is read from the variables
of a built model when one is given.
"""

import re

import keras

from keras_attention.ops.ring import ContextParallel as ContextParallel

# The model axis in a rule's axes; replaced by the caller's axis name.
_MODEL = object()
_ANY = r"(?:.*/)?"

#: `(path regex, axes, what the split axis counts, must it divide)`, in
#: the order of the reference's table. A rule that must divide raises
#: when the model axis does not divide it; the others (K/V heads of
#: grouped-query attention, widths) are replicated instead.
_RULES = (
    # EinsumDense projections `(dim, heads, depth)` and their biases
    # `(heads, depth)`: a column split over heads.
    (_ANY + r"(?:query|gate)/kernel", (None, _MODEL), "heads", True),
    (_ANY + r"(?:query|gate)/bias", (_MODEL,), "heads", True),
    (_ANY + r"(?:key|value)/kernel", (None, _MODEL), "key/value heads", False),
    (_ANY + r"(?:key|value)/bias", (_MODEL,), "key/value heads", False),
    # The output projection `(heads, depth, dim)`: a row split over its
    # input heads; its bias `(dim,)` stays replicated (no rule).
    (_ANY + r"attention_output/kernel", (_MODEL,), "heads", True),
    # MultiHeadLatentAttention's up-projections `(kv_lora_rank, heads,
    # depth)`; its down-projections to the latent stay replicated.
    (_ANY + r"(?:key|value)_up_kernel", (None, _MODEL), "heads", True),
    # The translators' and the sentiment model's embeddings `(vocabulary,
    # dim)`: over the embedding dim.
    (
        _ANY + r"(?:source_|target_)?embedding/embeddings",
        (None, _MODEL),
        "embedding dim",
        False,
    ),
    # The Transformer blocks' feed-forward network: column, then row.
    (_ANY + r"feed_forward_inner/kernel", (None, _MODEL), "units", False),
    (_ANY + r"feed_forward_inner/bias", (_MODEL,), "units", False),
    (_ANY + r"feed_forward_outer/kernel", (_MODEL,), "units", False),
    # StructuredSelfAttention's MLP `tanh(H W_s1) W_s2`: the same split.
    (_ANY + r"ws1", (None, _MODEL), "units", False),
    (_ANY + r"ws2", (_MODEL,), "units", False),
)


def _invalid(argument, value, expected):
    return ValueError(
        f"Received an invalid value for argument `{argument}`, expected "
        f"{expected}. Received: {argument}={value!r}"
    )


def _check_axes(device_mesh, model_axis, batch_axis):
    if not isinstance(device_mesh, keras.distribution.DeviceMesh):
        raise _invalid(
            "device_mesh", device_mesh, "a `keras.distribution.DeviceMesh`"
        )
    names = list(device_mesh.axis_names)
    for argument, value in (
        ("model_axis", model_axis),
        ("batch_axis", batch_axis),
    ):
        if not isinstance(value, str) or value not in names:
            raise _invalid(
                argument, value, f"an axis of the mesh, one of {names}"
            )
    if model_axis == batch_axis:
        raise _invalid(
            "batch_axis", batch_axis, "a mesh axis other than `model_axis`"
        )
    return device_mesh.shape[names.index(model_axis)]


def _same_mesh(a, b) -> bool:
    return (
        tuple(a.shape) == tuple(b.shape)
        and list(a.axis_names) == list(b.axis_names)
        and [str(d) for d in a.devices.flat] == [str(d) for d in b.devices.flat]
    )


def _check_overrides(overrides, device_mesh):
    """The user's patterns, after checking their map."""
    if overrides is None:
        return []
    if not isinstance(overrides, keras.distribution.LayoutMap):
        raise _invalid(
            "overrides", overrides, "a `keras.distribution.LayoutMap` or None"
        )
    mesh = overrides.device_mesh
    if mesh is not None and not _same_mesh(mesh, device_mesh):
        raise _invalid(
            "overrides",
            overrides,
            "a `LayoutMap` on the same mesh as `device_mesh` (shape "
            f"{tuple(device_mesh.shape)}, axes {list(device_mesh.axis_names)});"
            f" its mesh has shape {tuple(mesh.shape)}, axes "
            f"{list(mesh.axis_names)}",
        )
    return list(overrides)


def _matches(pattern, path) -> bool:
    return re.fullmatch(pattern, path) is not None


def _rule_for(path):
    for rule in _RULES:
        if _matches(rule[0], path):
            return rule
    return None


def _replicated(model, model_axis, size, user_patterns):
    """Paths of `model`'s variables to replicate: a split that does not
    divide; a `ValueError` where that split is over a layer's heads."""
    if model is None:
        return []
    if not isinstance(model, keras.Layer):
        raise _invalid(
            "model", model, "a built `keras.Model` or layer, or None"
        )
    paths = []
    for variable in model.variables:
        path, shape = variable.path, tuple(variable.shape)
        rule = _rule_for(path)
        if rule is None or any(_matches(p, path) for p in user_patterns):
            continue
        pattern, axes, counts, must_divide = rule
        axis = axes.index(_MODEL)
        if axis >= len(shape) or shape[axis] % size == 0:
            continue
        if must_divide:
            raise ValueError(
                f"The mesh axis {model_axis!r} ({size} devices) does not "
                f"divide the {shape[axis]} {counts} of `{path}` (shape "
                f"{shape}): each device must hold whole heads. Choose a "
                f"mesh whose {model_axis!r} axis divides the heads. "
                f"Received: {counts}={shape[axis]}, "
                f"device_mesh.shape[{model_axis!r}]={size}"
            )
        paths.append((path, len(shape)))
    return paths


def _excluding(pattern, user_patterns):
    """`pattern`, except for the paths one of `user_patterns` matches.

    Keras's `LayoutMap` refuses a path that two regexes match, so the
    user's entries win by being cut out of ours (a negative lookahead).
    """
    if not user_patterns:
        return pattern
    others = "|".join(f"(?:{p})" for p in user_patterns)
    return f"(?!(?:{others})\\Z)(?:{pattern})"


def layout_map(
    device_mesh,
    model_axis="model",
    batch_axis="batch",
    *,
    model=None,
    overrides=None,
):
    """A `keras.distribution.LayoutMap` that shards this package's layers.

    Megatron-LM's tensor parallelism over the mesh axis `model_axis`:
    the query, key, value (and gate) kernels `(dim, heads, depth)` of
    `MultiHeadAttention`, `SelfAttention` and `GroupedQueryAttention`
    split over their heads (a column split), their biases `(heads,
    depth)` too, the output kernel `(heads, depth, dim)` over its input
    heads (a row split) and its bias replicated, so that each device
    attends with whole heads and the heads' outputs meet in one
    all-reduce. `MultiHeadLatentAttention`'s up-projections
    (`key_up_kernel`, `value_up_kernel`) and query split over heads too;
    its latent down-projections stay whole. The translators' source and
    target embeddings and the sentiment model's `embedding` split over
    the embedding dim; the Transformer blocks' feed-forward network and
    `StructuredSelfAttention`'s `ws1` / `ws2` column then row. Any other
    weight is replicated. The rules are regexes over `variable.path`,
    written with the projections' names (Keras's `MultiHeadAttention`
    and `GroupedQueryAttention` use the same, so they shard too).

    Use it with `keras.distribution.ModelParallel(layout_map=...,
    batch_dim_name=batch_axis)`, which splits the batches over
    `batch_axis` (that is, the data-parallel replicas) and, on the JAX
    backend only (Keras's `ModelParallel` is JAX-only), places the
    weights: build the model inside its `scope()`. On TensorFlow and
    PyTorch the map itself can be built and read.

    A path cannot tell how many heads a layer has. With `model` (built,
    its variables read) the map is checked against it: a model axis that
    does not divide a layer's query heads raises a `ValueError` naming
    both, and a split it does not divide otherwise (the key/value heads
    of grouped-query attention, an embedding dim, units) becomes an
    exact-path entry that replicates that variable. Without `model` the
    package's attention layers check their heads against the
    distribution's layout as they make their variables (a `ValueError`
    naming the layer, its heads and the mesh axis), and JAX refuses any
    other split that does not divide; pass the same model (e.g. built
    once on one device and rebuilt with `from_config` in the scope: the
    names, and so the paths, are the same).

    Args:
        device_mesh: The `keras.distribution.DeviceMesh`.
        model_axis: The mesh axis the heads split over. Defaults to
            `"model"`.
        batch_axis: The mesh axis the batches split over (the
            distribution's `batch_dim_name`); no weight is split over it.
            Defaults to `"batch"`.
        model: Optional built `keras.Model` (or layer) whose variables
            check the map, see above. Defaults to `None`.
        overrides: Optional `keras.distribution.LayoutMap` of your own,
            on the same mesh. Its entries are kept and win: a path that
            one of its keys matches takes its layout, never this
            function's. Defaults to `None`.

    Returns:
        A new `keras.distribution.LayoutMap` on `device_mesh`.

    Example:

    >>> import keras
    >>> import keras_attention
    >>> mesh = keras.distribution.DeviceMesh(
    ...     (2, 4), ["batch", "model"], [f"cpu:{i}" for i in range(8)]
    ... )
    >>> layouts = keras_attention.distribution.layout_map(mesh)
    >>> layouts["encoder/self_attention/query/kernel"].axes
    (None, 'model')
    >>> layouts["encoder/self_attention/attention_output/kernel"].axes
    ('model',)
    >>> # distribution = keras.distribution.ModelParallel(
    >>> #     layout_map=layouts, batch_dim_name="batch")  # JAX

    References:
        Shoeybi et al., 2019, "Megatron-LM: Training Multi-Billion
        Parameter Language Models Using Model Parallelism".
    """
    size = _check_axes(device_mesh, model_axis, batch_axis)
    user_patterns = _check_overrides(overrides, device_mesh)
    replicated = _replicated(model, model_axis, size, user_patterns)
    result = keras.distribution.LayoutMap(device_mesh)
    for key in user_patterns:
        result[key] = overrides[key]
    for path, rank in replicated:
        result[path] = (None,) * rank
    for pattern, axes, _, _ in _RULES:
        # Keras looks an exact path up first, then every regex; a path
        # must match one regex only, so ours leave out the exact entries.
        exact = [re.escape(p) for p, _ in replicated if _matches(pattern, p)]
        axes = tuple(model_axis if a is _MODEL else a for a in axes)
        result[_excluding(pattern, user_patterns + exact)] = axes
    return result
