"""The backends' own fused kernels in the engine's table (private module).

The kernels the native paths of the planner name (`ops/_native_plan.py`),
registered in `ops/_registry.py` like this package's. Their modules,
`ops/_native_torch.py` (FlexAttention and SDPA) and `ops/_native_jax.py`
(cuDNN and Pallas), are imported on the first call of one of their
kernels, so that no backend imports another's framework.
"""

from keras_attention.ops import _native_plan
from keras_attention.ops._registry import register


def _torch():
    from keras_attention.ops import _native_torch

    return _native_torch


def _jax():
    from keras_attention.ops import _native_jax

    return _native_jax


@register(_native_plan.TORCH_FLEX)
def torch_flex(call, plan):
    """PyTorch's compiled FlexAttention (`_native_torch.flex`)."""
    return _torch().flex(call, plan)


@register(_native_plan.SDPA)
def sdpa(call, plan):
    """PyTorch's `scaled_dot_product_attention` (`_native_torch.sdpa`)."""
    return _torch().sdpa(call, plan)


@register(_native_plan.CUDNN)
def cudnn(call, plan):
    """cuDNN's flash attention through JAX (`_native_jax.cudnn`)."""
    return _jax().cudnn(call, plan)


@register(_native_plan.PALLAS)
def pallas(call, plan):
    """JAX's Pallas flash kernel (`_native_jax.pallas`)."""
    return _jax().pallas(call, plan)
