"""layers/_multi_head_checks.py: the multi-head layers' argument and
shape checks, with Keras's words where Keras has a check."""

import pytest

from keras_attention.layers import _multi_head_checks as checks


def test_output_shape_and_attention_axes_become_tuples():
    assert checks.output_shape_tuple(None) is None
    assert checks.output_shape_tuple(8) == (8,)
    assert checks.output_shape_tuple([2, 3]) == (2, 3)
    for bad in (0, (), (2, -1), True, "8"):
        with pytest.raises(ValueError, match="Invalid `output_shape`"):
            checks.output_shape_tuple(bad)
    assert checks.attention_axes_tuple(None) is None
    assert checks.attention_axes_tuple(-2) == (-2,)
    assert checks.attention_axes_tuple([1, 2]) == (1, 2)
    for bad in ("1", [1.0], (True,)):
        with pytest.raises(ValueError, match="Received: attention_axes="):
            checks.attention_axes_tuple(bad)
