"""Dtype policies of layers that build their own sublayers (private).

`model.quantize` changes the dtype policies of the quantizable sublayers
(`Dense`, `EinsumDense`) one by one. A layer that creates such sublayers
itself rebuilds them from its own policy when it is loaded, so it records
theirs in its config.
"""

import re

import keras


def policy_config(layer, sublayers) -> dict:
    """The serialized `policy` of a layer, with its sublayers' own.

    Where a sublayer's policy differs from the layer's (after
    `model.quantize`), the result is a `keras.dtype_policies.DTypePolicyMap`
    keyed by patterns that match the sublayers' paths, with the layer's
    policy as its default, so that a loaded layer builds them quantized
    again and their int8 / float8 variables load. The patterns match the
    end of a path, `<layer>/<sublayer>`: the full path depends on where the
    layer is built (a decoder cell is built outside its RNN's scope when
    it is loaded). A layer that was given a map already records into it.

    Args:
        layer: The layer, whose `dtype_policy` and `name` are used.
        sublayers: The layers it creates (`None` entries are skipped).

    Returns:
        The serialized policy, for the `"dtype"` entry of `get_config`.
    """
    maps = keras.dtype_policies.DTypePolicyMap
    policy = layer.dtype_policy
    if not isinstance(policy, maps):
        changed = {
            f"(.*/)?{re.escape(layer.name)}/{re.escape(sub.name)}": (
                sub.dtype_policy
            )
            for sub in sublayers
            if sub is not None and sub.dtype_policy.name != policy.name
        }
        if changed:
            policy = maps(default_policy=policy, policy_map=changed)
    return keras.dtype_policies.serialize(policy)
