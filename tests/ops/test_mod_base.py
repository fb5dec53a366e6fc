"""ops/_mod_base.py: the base of the mods."""

import numpy as np
import pytest

from keras_attention.ops import _mod_base
from keras_attention.ops import mods


def test_mods_of_values_compare_and_show_their_config():
    assert mods.sliding_window(3) == mods.sliding_window(3)
    assert mods.sliding_window(3) != mods.sliding_window(4)
    assert hash(mods.causal()) == hash(mods.causal())
    assert repr(mods.band(2, None)) == "Band(left=2, right=None)"


def test_mods_of_tensors_compare_by_identity_and_have_no_config():
    document = mods.document(np.zeros((1, 3), "int32"))
    assert document == document
    assert document != mods.document(np.zeros((1, 3), "int32"))
    assert repr(document) == "Document(...)"
    with pytest.raises(TypeError, match="holds tensors of one call"):
        document.get_config()


def test_positive_integer_names_the_argument():
    assert _mod_base.positive_integer(3, "window") == 3
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match=f"Received: window={bad!r}"):
            _mod_base.positive_integer(bad, "window")
