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
step; on the other backends it changes nothing.
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
    index = tuple(
        slice(int(at), int(at) + size)
        for at, size in zip(start, update.shape, strict=True)
    )
    tensor[index] = update
    return tensor
