"""`scores.get` (`scores/registry.py`): names, configs, instances, errors.

Moved from `tests/test_scores.py` with `scores.py` -> `scores/`.
"""

import keras
import pytest

from keras_attention import scores


def test_get_accepts_names_aliases_configs_and_instances():
    assert isinstance(scores.get("general"), scores.BilinearScore)
    assert isinstance(scores.get("Bahdanau"), scores.AdditiveScore)
    s = scores.AdditiveScore(units=3, use_bias=True)
    assert scores.get(s) is s
    clone = scores.get(scores.serialize(s))
    assert isinstance(clone, scores.AdditiveScore)
    assert clone.units == 3 and clone.use_bias
    loc = scores.get(scores.serialize(scores.LocationScore(max_length=4)))
    assert loc.max_length == 4


def test_get_location_by_name_says_max_length_is_needed():
    with pytest.raises(ValueError, match="needs `max_length`"):
        scores.get("location")


@pytest.mark.parametrize("bad", ["nope", 3, None])
def test_get_unknown_identifier_raises(bad):
    with pytest.raises(ValueError, match="Could not interpret score"):
        scores.get(bad)


def test_get_config_of_other_layer_raises():
    config = keras.saving.serialize_keras_object(keras.layers.Dense(2))
    with pytest.raises(ValueError, match="config of a keras_attention score"):
        scores.get(config)


def test_get_passes_arguments_to_a_score_made_from_a_name():
    concat = scores.get("concat", units=4, name="score")
    assert isinstance(concat, scores.ConcatScore)
    assert concat.units == 4 and concat.name == "score"
    location = scores.get("location", max_length=7)
    assert isinstance(location, scores.LocationScore)
    assert location.max_length == 7
    with pytest.raises(ValueError, match="needs `max_length`"):
        scores.get("location", max_length=None)
