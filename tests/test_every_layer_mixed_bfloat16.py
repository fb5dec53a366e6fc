"""Every layer trains under XLA with the `mixed_bfloat16` policy.

The checks and the cases are those of `tests/test_every_layer.py`; this
module only gives the policy its own pytest-xdist unit (`--dist loadfile`).
It runs in the JAX lane only (`jax_lane`): each policy's training runs on
one backend (float32 and mixed_float16 on TensorFlow). The TensorFlow lane
trains the layers under mixed_float16, the same reduced-precision path of
Keras's mixed policies; in every lane the property tests
(`tests/test_properties.py`) draw mixed_bfloat16 among their policies.
"""

import pytest

from tests.test_every_layer import policy_test

pytestmark = pytest.mark.jax_lane

test_layer_trains_under_xla_and_mixed_bfloat16 = policy_test("mixed_bfloat16")
