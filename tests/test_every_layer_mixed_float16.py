"""Every layer trains under XLA with the `mixed_float16` policy.

The checks and the cases are those of `tests/test_every_layer.py`; this
module only gives the policy its own pytest-xdist unit (`--dist loadfile`).
It runs in the TensorFlow lane only (`tensorflow_lane`): the JAX lane
trains the layers under `mixed_bfloat16` (the same reduced-precision code
path), and every lane calls every layer under `mixed_float16` in the layer
basics (`tests/layer_basics.py`) and the property tests
(`tests/test_properties.py`).
"""

import pytest

from tests.test_every_layer import policy_test

pytestmark = pytest.mark.tensorflow_lane

test_layer_trains_under_xla_and_mixed_float16 = policy_test("mixed_float16")
