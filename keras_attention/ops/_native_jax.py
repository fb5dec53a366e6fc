"""JAX's fused kernels as kernels of the engine (private module).

- `cudnn`: `jax.nn.dot_product_attention(implementation="cudnn")`:
  causal, a causal window (`local_window_size`), key lengths
  (`key_value_seq_lengths`, from `mods.padding`) and a bias. An example
  whose keys are all padding gets zeros (JAX's kernels give the mean of
  the values there).
- `pallas`: the Pallas flash kernel with segment ids
  (`jax.experimental.pallas.ops.gpu.attention.mha`), for documents.

`IMPLEMENTATION` and `INTERPRET` are what the kernels pass to JAX: the
tests set them to `"xla"` and `True` to run the same calls on a CPU.
Imported on the first look-up of a JAX path in the engine's table
(`ops/_native.py`), where its kernels register.
"""

import jax
import jax.numpy as jnp
from keras import ops

from keras_attention.ops import _call_mods
from keras_attention.ops import _native_plan
from keras_attention.ops._registry import Result
from keras_attention.ops._registry import register

IMPLEMENTATION = "cudnn"
INTERPRET = False


def _dot_form(call):
    """The transformed query and key, and a Python scale."""
    q, k, scale = call.dot_product_form()
    if scale is None:
        scale = 1.0
    elif not isinstance(scale, (int, float)):
        q, scale = q * scale, 1.0
    dtype = call.value.dtype
    return ops.cast(q, dtype), ops.cast(k, dtype), float(scale)


@register(_native_plan.CUDNN)
def cudnn(call, plan):
    """cuDNN's flash attention with the call's causal mask, window,
    key lengths and bias."""
    q, k, scale = _dot_form(call)
    causal, left = _call_mods.causal_window(call)
    padding = _call_mods.mask_mod_of_kind(call, "lengths")
    lengths = None
    if padding is not None:
        lengths = jnp.asarray(padding.lengths, jnp.int32)
    out = jax.nn.dot_product_attention(
        q,
        k,
        ops.convert_to_tensor(call.value),
        bias=_call_mods.four_d_bias(call, q.dtype),
        scale=scale,
        is_causal=causal,
        key_value_seq_lengths=lengths,
        local_window_size=None if left is None else (left, 0),
        implementation=IMPLEMENTATION,
    )
    if lengths is not None:
        out = jnp.where(lengths[:, None, None, None] > 0, out, 0)
    return Result(ops.cast(out, call.value.dtype))


@register(_native_plan.PALLAS)
def pallas(call, plan):
    """The Pallas flash kernel, its segment ids the call's documents."""
    from jax.experimental.pallas.ops.gpu import attention

    q, k, scale = _dot_form(call)
    causal, _ = _call_mods.causal_window(call)
    document = _call_mods.mask_mod_of_kind(call, "document")
    out = attention.mha(
        q,
        k,
        ops.cast(call.value, q.dtype),
        jnp.asarray(document.segment_ids, jnp.int32),
        sm_scale=scale,
        causal=causal,
        interpret=INTERPRET,
    )
    return Result(ops.cast(out, call.value.dtype))
