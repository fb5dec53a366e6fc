"""Every layer trains under XLA with the `mixed_bfloat16` policy.

The checks and the cases are those of `tests/test_every_layer.py`; this
module only gives the policy its own pytest-xdist unit (`--dist loadfile`).
"""

from tests.test_every_layer import policy_test

test_layer_trains_under_xla_and_mixed_bfloat16 = policy_test("mixed_bfloat16")
