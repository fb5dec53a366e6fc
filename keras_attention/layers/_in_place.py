"""Cache writes in place on PyTorch, for the owner of the caches (private
module).

`keras.ops.slice_update` is functional: on PyTorch it clones the whole
tensor at every write, and with a tensor index (a decoding loop's) it
builds an index grid and scatters besides. Under XLA (JAX, TensorFlow) a
compiled decoding loop writes its caches in place anyway; an eager loop
cannot know that no one else holds the tensor it writes. The owner of
every cache a loop writes says so: within `writing_in_place()` the
caches' `slice_update` on PyTorch changes the tensor it is given and
returns it. `models.Generator` opens it around its eager loop, which
allocates the caches and replaces each one by its written copy at every
step; on the other backends it changes nothing. Under `torch.compile`
(`Generator(..., jit_compile=True)`) a step's position is a tensor whose
value is not known: the write takes it as `index_copy_`'s positions.
"""

import contextlib
import threading

import keras
from keras import ops

_STATE = threading.local()


@contextlib.contextmanager
def writing_in_place():
    """Within it, on PyTorch, `slice_update` writes in place."""
    previous = getattr(_STATE, "on", False)
    _STATE.on = keras.backend.backend() == "torch"
    try:
        yield
    finally:
        _STATE.on = previous


def slice_update(tensor, start, update):
    """`keras.ops.slice_update(tensor, start, update)`: `tensor` itself,
    written, within `writing_in_place` on PyTorch; a new tensor
    otherwise. `start` holds integers or scalar tensors with values."""
    if not getattr(_STATE, "on", False):
        return ops.slice_update(tensor, start, update)
    if compiling():
        return _traced_write(tensor, start, update)
    index = tuple(
        slice(int(at), int(at) + size)
        for at, size in zip(start, update.shape, strict=True)
    )
    tensor[index] = update
    return tensor


def compiling():
    """Whether PyTorch's compiler is tracing the call (`torch.compile`):
    a tensor's value is not known there, and reading it breaks the
    graph."""
    if keras.backend.backend() != "torch":
        return False
    import torch

    return torch.compiler.is_compiling()


def _traced_write(tensor, start, update):
    """The in-place write under `torch.compile`: the integer starts as
    slices of a view, the one start that is a tensor (a decoding step's
    position) as the positions of `index_copy_`."""
    import torch

    traced = [d for d, at in enumerate(start) if not isinstance(at, int)]
    if len(traced) > 1:
        return ops.slice_update(tensor, start, update)
    view = tensor
    for dim, (at, size) in enumerate(zip(start, update.shape, strict=True)):
        if dim not in traced:
            view = view.narrow(dim, at, size)
    if not traced:
        view.copy_(update)
        return tensor
    (dim,) = traced
    at = ops.cast(start[dim], "int64")
    positions = at + torch.arange(update.shape[dim], device=tensor.device)
    view.index_copy_(dim, positions, update.to(tensor.dtype))
    return tensor
