"""Heads that the current distribution's layout cannot split (private).

A `keras.distribution.LayoutMap` is keyed by regexes over variable paths
and read when each variable is made; a path does not say how many heads a
layer has, so `keras_attention.distribution.layout_map(mesh)` without
`model=` splits every projection's heads axis over the model axis. A
layer whose heads that axis does not divide failed inside JAX
(`IndivisibleError`) when its variables were made. `check_heads` asks the
distribution for the layout of each projection's kernel before the layer
makes it, and raises a `ValueError` that names the layer, its heads and
the mesh axis. It reads only the public distribution API, so it sits
below `keras_attention.distribution` (docs/architecture.md).
"""

import math

import keras

#: The kernels whose heads axis a layout may split: `(path under the
#: layer, heads axis, query heads or key/value heads)`. The projections
#: `(dim, heads, depth)`, MLA's up-projections `(rank, heads, depth)` and
#: the output projection `(heads, depth, dim)`.
_KERNELS = (
    ("query/kernel", 1, "query"),
    ("gate/kernel", 1, "query"),
    ("key/kernel", 1, "key/value"),
    ("value/kernel", 1, "key/value"),
    ("key_up_kernel", 1, "query"),
    ("value_up_kernel", 1, "query"),
    ("attention_output/kernel", 0, "query"),
)


def _devices(mesh, axis):
    """Devices along `axis`: a mesh axis name or a tuple of them."""
    names = list(mesh.axis_names)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return math.prod(mesh.shape[names.index(a)] for a in axes)


def check_heads(layer, num_heads, num_key_value_heads=None):
    """Raises if the current distribution splits heads it cannot divide.

    Call it from `build`, before the projections are made: `layer.path`
    is then the prefix of their variables' paths.

    Args:
        layer: The attention layer being built.
        num_heads: Its query heads.
        num_key_value_heads: Its key/value heads. Defaults to `num_heads`.
    """
    distribution = keras.distribution.distribution()
    if not isinstance(distribution, keras.distribution.ModelParallel):
        return
    mesh = distribution.device_mesh
    counts = {"query": num_heads, "key/value": num_key_value_heads}
    counts["key/value"] = counts["key/value"] or num_heads
    for name, heads_axis, which in _KERNELS:
        path = f"{layer.path}/{name}"
        layout = distribution.get_tensor_layout(path)
        axes = () if layout is None else tuple(layout.axes)
        axis = axes[heads_axis] if heads_axis < len(axes) else None
        heads = counts[which]
        if axis is None or heads % _devices(mesh, axis) == 0:
            continue
        devices = _devices(mesh, axis)
        remedy = (
            "`keras_attention.distribution.layout_map(mesh, model=...)`, "
            "given the model built once outside the distribution, "
            "replicates them"
            if which == "key/value"
            else "each device must hold whole query heads: choose a mesh "
            f"whose {axis!r} axis divides them"
        )
        raise ValueError(
            f"{type(layer).__name__} {layer.name!r} has {heads} {which} "
            f"heads, which the mesh axis {axis!r} ({devices} devices) of "
            f"the distribution's layout for `{path}` does not divide: "
            f"{remedy}. Received: {which} heads={heads}, "
            f"device_mesh.shape[{axis!r}]={devices}"
        )
