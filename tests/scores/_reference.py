"""Inputs and NumPy references the score tests share."""

import numpy as np
from keras import ops

from tests.layer_basics import normal_arrays

Q, K4, K6 = normal_arrays(0, (2, 3, 4), (2, 5, 4), (2, 5, 6))


def logits(score, q, k):
    return ops.convert_to_numpy(score(q, k))


# NumPy references written from the seed formulas, one key at a time.
def ref_pairwise(q, k, fn):
    out = np.zeros(q.shape[:-1] + (k.shape[-2],))
    for b in range(q.shape[0]):
        for i in range(q.shape[1]):
            for j in range(k.shape[1]):
                out[b, i, j] = fn(q[b, i].astype("float64"), k[b, j])
    return out
