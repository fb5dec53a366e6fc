"""ops/masks.py: the causal mask and combine_masks by hand."""

import numpy as np
from keras import ops

from keras_attention import ops as ka_ops


def test_causal_mask_is_lower_triangular():
    got = ops.convert_to_numpy(ka_ops.causal_mask(3, 5))
    np.testing.assert_array_equal(got, np.tril(np.ones((3, 5), bool)))


def test_combine_masks_ands_every_mask():
    q = np.array([[True, True, False]])
    v = np.array([[True, False, True, True]])
    a = np.ones((1, 3, 4), bool)
    a[0, 0, 3] = False
    got = ops.convert_to_numpy(
        ka_ops.combine_masks(
            3,
            4,
            query_mask=q,
            value_mask=v,
            attention_mask=a,
            use_causal_mask=True,
        )
    )
    want = q[:, :, None] & v[:, None, :] & a & np.tril(np.ones((3, 4), bool))
    np.testing.assert_array_equal(np.broadcast_to(got, want.shape), want)
    assert ka_ops.combine_masks(3, 4) is None
