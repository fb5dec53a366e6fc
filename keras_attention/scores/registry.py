"""The registry of the scores: `get`, `serialize`, `deserialize`.

`get(identifier)` turns a name, a config dict or an instance into a score
layer, like `keras.activations.get`.
"""

import keras

from keras_attention.scores.additive import AdditiveScore
from keras_attention.scores.additive import ConcatScore
from keras_attention.scores.base import Score
from keras_attention.scores.dot_product import BilinearScore
from keras_attention.scores.dot_product import CosineScore
from keras_attention.scores.dot_product import DotScore
from keras_attention.scores.dot_product import ScaledDotScore
from keras_attention.scores.location import LocationScore

_BY_NAME = {
    "dot": DotScore,
    "scaled_dot": ScaledDotScore,
    "cosine": CosineScore,
    "bilinear": BilinearScore,
    "general": BilinearScore,
    "additive": AdditiveScore,
    "bahdanau": AdditiveScore,
    "concat": ConcatScore,
}


def serialize(score: Score) -> dict:
    """Returns the config dict of a score layer.

    Example:

    >>> score = keras_attention.scores.AdditiveScore(units=8)
    >>> config = keras_attention.scores.serialize(score)
    >>> config["class_name"], config["config"]["units"]
    ('AdditiveScore', 8)
    """
    return keras.saving.serialize_keras_object(score)


def deserialize(config: dict) -> Score:
    """Creates a score layer from a config dict made by `serialize`.

    Example:

    >>> score = keras_attention.scores.AdditiveScore(units=8)
    >>> config = keras_attention.scores.serialize(score)
    >>> again = keras_attention.scores.deserialize(config)
    >>> type(again).__name__, again.units
    ('AdditiveScore', 8)
    """
    return keras.saving.deserialize_keras_object(config)


def get(identifier, dtype=None, **kwargs) -> Score:
    """Returns a score layer for a name, a config dict or an instance.

    Args:
        identifier: One of `"dot"`, `"scaled_dot"`, `"cosine"`,
            `"bilinear"` (alias `"general"`), `"additive"` (alias
            `"bahdanau"`), `"concat"`; a dict made by `serialize`; or a
            `Score` instance, returned as is. `"location"` needs
            `max_length`: pass it as a keyword argument, or pass
            `LocationScore(max_length=...)` instead of the name.
        dtype: Dtype policy of a score created from a name (the layer that
            owns the score passes its own). Defaults to `None`, the global
            policy. A config dict keeps the dtype it holds and an instance
            is returned as is.
        **kwargs: Arguments of a score created from a name, e.g. `units`,
            `kernel_initializer` or `name` (how Luong's mechanism makes
            its scores).

    Returns:
        A `Score` layer.

    Example:

    >>> score = keras_attention.scores.get("concat", units=4)
    >>> type(score).__name__, score.units
    ('ConcatScore', 4)
    """
    if isinstance(identifier, Score):
        return identifier
    if isinstance(identifier, dict):
        score = deserialize(identifier)
        if not isinstance(score, Score):
            raise ValueError(
                "Expected a config of a keras_attention score. "
                f"Received: score={identifier!r}"
            )
        return score
    if isinstance(identifier, str):
        name = identifier.lower()
        if name == "location" and kwargs.get("max_length") is None:
            raise ValueError(
                "The 'location' score needs `max_length`: pass "
                "`keras_attention.scores.LocationScore(max_length=...)` "
                f"instead of a name. Received: score={identifier!r}"
            )
        if name in _BY_NAME or name == "location":
            score_class = _BY_NAME.get(name, LocationScore)
            return score_class(dtype=_policy_of_a_new_score(dtype), **kwargs)
    raise ValueError(
        "Could not interpret score identifier. Expected one of "
        f"{sorted(_BY_NAME) + ['location']}, a config dict or a "
        f"keras_attention.scores.Score instance. Received: score={identifier!r}"
    )


def _policy_of_a_new_score(dtype):
    if isinstance(dtype, keras.dtype_policies.DTypePolicyMap):
        # The map is keyed by the owner's sublayer paths; a score made
        # here takes the map's default.
        dtype = dtype.default_policy
    if isinstance(dtype, keras.DTypePolicy):
        # A name keeps the score's recorded arguments serializable.
        dtype = dtype.name
    return dtype
