"""The backends' own fused kernels in the engine's table (private module).

The kernels the native paths of the planner name (`ops/_native_plan.py`)
are in `ops/_native_torch.py` (FlexAttention and SDPA) and
`ops/_native_jax.py` (cuDNN and Pallas), which register them in
`ops/_registry.py` like this package's. Those modules are imported on the
first look-up of one of their paths, so that no backend imports
another's framework: this module only says which module holds which
path, and no call runs through it.
"""

from keras_attention.ops import _native_plan
from keras_attention.ops._registry import load_with


def _torch():
    from keras_attention.ops import _native_torch  # noqa: F401 (registers)


def _jax():
    from keras_attention.ops import _native_jax  # noqa: F401 (registers)


load_with((_native_plan.TORCH_FLEX, _native_plan.SDPA), _torch)
load_with((_native_plan.CUDNN, _native_plan.PALLAS), _jax)
