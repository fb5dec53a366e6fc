"""What the planner asks PyTorch about a call, beneath the planner and
the kernels (private module; imported on PyTorch only).

- `records_gradients`: whether autograd records the call (a step that is
  differentiated, whatever the layer's `training` says).
- `lowers`: whether PyTorch's compiler can lower the call's mods inside
  FlexAttention: each mod run once on one-element index tensors, every
  op recorded.
- `cpu_flash_lse`: whether PyTorch's CPU flash kernel, which SDPA runs
  there, can be called for the log-sum-exp it computes.
- `bound`: a score mod reading its tensors as given now, as the
  FlexAttention kernel binds it (so the probe runs what the kernel
  compiles).
"""

import functools

import torch
from keras import ops
from torch.utils._python_dispatch import TorchDispatchMode

from keras_attention.ops.mask_mods import keep

# What PyTorch's compiler lowers inside a mod besides pointwise ops: casts,
# constants and fills of one element.
_LOWERED = {
    "_to_copy",
    "lift_fresh",
    "scalar_tensor",
    "zeros_like",
    "ones_like",
    "full_like",
    "clone",
    "alias",
    "detach",
}


# Reads of a captured tensor it lowers: by index tensors, or an integer.
_GATHERS = {"index", "select"}


class _Recorder(TorchDispatchMode):
    """Records whether every op run is one PyTorch's compiler lowers in a
    mod: a pointwise op on one-element tensors, or a gather by indexing
    (of any tensor, `_GATHERS`). A reshape, a squeeze, an `index_select` (which
    `keras.ops.take` runs), or any op on a whole captured tensor is not."""

    def __init__(self):
        super().__init__()
        self.lowered = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        small = all(t.numel() <= 1 for t in args if isinstance(t, torch.Tensor))
        pointwise = torch.Tag.pointwise in func.tags or name in _LOWERED
        if name not in _GATHERS and not (pointwise and small):
            self.lowered = False
        return func(*args, **(kwargs or {}))


def lowers(score_mod, mask_mod):
    """Whether PyTorch's compiled FlexAttention can lower the mods: each
    run once on one-element index tensors, every op recorded."""
    index = ops.zeros((1,), "int32")
    score = ops.zeros((1,), "float32")
    recorder = _Recorder()
    try:
        # Bound as the kernel binds it, before it is compiled.
        scored = None if score_mod is None else bound(score_mod)
        with recorder:
            if scored is not None:
                scored(score, index, index, index, index)
            if mask_mod is not None:
                keep(mask_mod, index, index, index, index)
    except Exception:  # a mod that fails here would fail to compile too
        return False
    return recorder.lowered


def records_gradients(call):
    """Whether autograd records the call (a training step, not
    inference): gradients enabled and a tensor of the call needs them."""
    if not torch.is_grad_enabled():
        return False
    tensors = [call.query, call.key, call.value, call.bias, call.sinks]
    tensors += list(getattr(call.score_mod, "tensors", ()) or ())
    for tensor in tensors:
        value = getattr(tensor, "value", tensor)  # a Keras variable's
        if isinstance(value, torch.Tensor) and value.requires_grad:
            return True
    return False


def bound(score_mod):
    """A score mod reading its tensors as given now: a layer that is a
    score mod (`RelativePositionBias`) becomes the plain mod it calls,
    so that no layer call happens inside the compiled kernel."""
    tensors = getattr(score_mod, "tensors", ()) or ()
    if not tensors:
        return score_mod
    return score_mod.with_tensors([ops.convert_to_tensor(t) for t in tensors])


@functools.cache
def cpu_flash_lse():
    """Whether PyTorch's CPU flash kernel and its backward pass can be
    called directly (`_native_torch._FlashWithLse`): they are ATen's,
    not a public API, and may be missing from a build."""
    name = "_scaled_dot_product_flash_attention_for_cpu"
    return all(hasattr(torch.ops.aten, name + n) for n in ("", "_backward"))
