"""The planner's decision for the backends' own fused kernels (private).

`keras_attention.ops.plan_attention` first plans this package's kernels
(`plan._choose`); `choose` then hands the call to a kernel of the backend
wherever the call can be expressed in it, and otherwise keeps this
package's, saying why in `Plan.reason`:

- `"torch_flex"`: PyTorch's compiled FlexAttention
  (`torch.nn.attention.flex_attention` under `torch.compile`): the score
  mods, mask mods, masks and block masks of any call, on CUDA; on the CPU
  for inference only (PyTorch compiles no backward pass and no
  log-sum-exp there), where SDPA does not serve and this package's kernel
  would take the blocks.
- `"sdpa"`: PyTorch's `scaled_dot_product_attention`. On CUDA, for a
  call with no mask or a causal one (its FlashAttention kernel). On the
  CPU, for training and inference, a call with no score mod: no mask,
  causal (`is_causal`), or its masks, mask mods and bias as one dense
  mask, except where this package's blocks skip pairs that such a mask
  would not; the lse (sinks) from its CPU flash kernel.
- `"cudnn"`: `jax.nn.dot_product_attention(implementation="cudnn")` on a
  GPU: causal, causal windows, key lengths (`mods.padding`) and a bias, in
  float16 or bfloat16.
- `"pallas"`: JAX's Pallas flash kernel with segment ids
  (`jax.experimental.pallas.ops.gpu.attention.mha`) on a GPU: documents
  (`mods.document`), causal or not.

The rules the native kernels break are this package's to keep: returned
or dropped-out weights, the logits hooks and an explicit `chunk_size` keep
this package's kernels; a kernel that gives no log-sum-exp is not chosen
when the call needs it (sinks); the kernels bridge fully masked rows to
zeros. The device is read once, by `platform()`, which the tests replace.
`describe` makes a call's `NativeCall` from its record: it reads the
call's mods (`ops/_call_mods.py`) and, on PyTorch, asks autograd and the
compiler (`ops/_torch_probe.py`); it runs no kernel.
"""

import dataclasses
import functools

import keras

from keras_attention.ops import _call_mods

TORCH_FLEX, SDPA, CUDNN, PALLAS = "torch_flex", "sdpa", "cudnn", "pallas"
NATIVE_PATHS = (TORCH_FLEX, SDPA, CUDNN, PALLAS)

# The kernels tried, in order, on each `(backend, device)` of `platform()`.
KERNELS = {
    ("torch", "gpu"): (SDPA, TORCH_FLEX),
    ("torch", "cpu"): (SDPA, TORCH_FLEX),
    ("jax", "gpu"): (CUDNN, PALLAS),
}
# On the CPU PyTorch's compiled FlexAttention pays only where this
# package's kernel takes the blocks, and from this many queries and keys
# (below, its compilation costs more than the call).
CPU_FLEX_MIN_LENGTH = 2048
# cuDNN's flash attention: head sizes up to this, multiples of 8 (256 on
# Hopper and later, which is not probed), in these dtypes.
CUDNN_MAX_HEAD = 128
CUDNN_DTYPES = ("float16", "bfloat16")
# The Pallas kernel's blocks of queries and keys, which must divide the
# lengths.
PALLAS_BLOCK = 128

_REASONS = {
    TORCH_FLEX: "PyTorch's compiled FlexAttention",
    SDPA: "PyTorch's scaled_dot_product_attention",
    CUDNN: "cuDNN's flash attention (jax.nn.dot_product_attention)",
    PALLAS: "JAX's Pallas flash kernel with segment ids",
}


def platform():
    """`(backend, device)`: the Keras backend and where it computes,
    `"cpu"`, `"gpu"` or `"tpu"` (read once per process; `"meta"` during a
    symbolic pass on PyTorch, which is not kept)."""
    backend = keras.backend.backend()
    if backend == "torch":
        return backend, _torch_device()
    return _platform(backend)


@functools.cache
def _platform(backend):
    if backend == "jax":
        import jax

        return backend, jax.devices()[0].platform
    return backend, "cpu"


# PyTorch's device, once read outside a symbolic pass.
_TORCH_DEVICE = []


def _torch_device():
    """The device of a new tensor, kept once it is a real one: Keras's
    symbolic passes on PyTorch (a functional model built, an output
    spec) place tensors on `"meta"`, and a device read there and kept
    would leave every later call without the native kernels."""
    if _TORCH_DEVICE:
        return _TORCH_DEVICE[0]
    device = keras.ops.zeros(()).device.type
    if device == "meta":
        return device
    _TORCH_DEVICE.append("gpu" if device == "cuda" else device)
    return _TORCH_DEVICE[0]


@dataclasses.dataclass(frozen=True)
class NativeCall:
    """What the native kernels need to know of a call, beyond the plan's
    flags (`describe` makes it from the call record).

    Attributes:
        masks: The kinds of mask of the call, sorted: `"causal"`,
            `"causal_window"` (the `w` most recent keys), `"band"` (any
            other band), `"query_padding"`, `"key_padding"`,
            `"attention_mask"`, `"lengths"` (`mods.padding`), `"document"`
            (`mods.document` of self-attention) and `"mask_mod"` (any other
            mask mod).
        score_mod: A score mod is given.
        bias: An additive bias is given.
        offset: The queries begin after position 0 (a cache).
        lowers: Whether PyTorch's compiler lowers the call's mods and masks
            (`None`: not probed, as on the CPU for a call too short for
            FlexAttention there, or differentiated).
        dtype: The dtype of the query heads.
        head_dim: The query and key heads' size.
        value_dim: The value heads' size.
        grouped: The key/value heads are fewer than the query heads.
        backward: Whether the call is differentiated (on PyTorch: whether
            autograd records it).
        cpu_lse: Whether PyTorch's CPU flash kernel can be called for its
            log-sum-exp (`_torch_probe.cpu_flash_lse`).

    Example:

    >>> from keras_attention.ops import NativeCall, plan_attention
    >>> native = NativeCall(
    ...     masks=("causal",), dtype="bfloat16", head_dim=64, value_dim=64
    ... )
    >>> plan = plan_attention("dot", (1, 8, 1024, 1024), native=native)
    >>> plan.path in ("fused", "sdpa", "cudnn")  # by the device
    True
    """

    masks: tuple = ()
    score_mod: bool = False
    bias: bool = False
    offset: bool = False
    lowers: bool | None = None
    dtype: str = "float32"
    head_dim: int | None = None
    value_dim: int | None = None
    grouped: bool = False
    backward: bool = True
    cpu_lse: bool = True


def describe(call, backward=True):
    """The `NativeCall` of `call` (an `engine.AttentionCall`): its kinds of
    mask, mods, dtype and heads, and whether it is differentiated.

    On PyTorch whether the call is differentiated is autograd's answer,
    not `backward`'s (a layer called eagerly with `training=False`
    outside `torch.no_grad()` is still recorded, and a kernel without a
    backward pass would fail there). Where the platform has no native
    kernel, `choose` reads nothing of the call: an empty `NativeCall`,
    the call's kinds not summarised."""
    backend, device = platform()
    if not KERNELS.get((backend, device)):
        return NativeCall()
    offset = call.query_offset
    lowers, cpu_lse = None, False
    if backend == "torch":
        from keras_attention.ops import _torch_probe

        backward = _torch_probe.records_gradients(call)
        cpu_lse = _torch_probe.cpu_flash_lse()
        # Probing runs the mods: skipped on the CPU where FlexAttention
        # is refused anyway (training, or a short call: a decoding step).
        long = cpu_flex_length((call.query.shape[1], call.key.shape[1]))
        if device != "cpu" or (long and not backward):
            lowers = _torch_probe.lowers(*_call_mods.call_mods(call))
    return NativeCall(
        masks=_call_mods.mask_kinds(call),
        score_mod=call.score_mod is not None,
        bias=call.bias is not None,
        offset=not (isinstance(offset, int) and offset == 0),
        lowers=lowers,
        dtype=keras.backend.standardize_dtype(call.query.dtype),
        head_dim=call.key.shape[-1],
        value_dim=call.value.shape[-1],
        grouped=call.key.shape[2] != call.query.shape[2],
        backward=bool(backward),
        cpu_lse=cpu_lse,
    )


def choose(ours, form, shapes, chunk_size, request, native):
    """The native kernel of the call, or `ours` (this package's kernel's
    plan) with why no native kernel runs added to its reason.

    `native` is the call's `NativeCall`; `None` (a constructor's check, a
    direct `plan_attention`) plans this package's kernels only.
    """
    if native is None:
        return ours
    if not isinstance(native, NativeCall):
        raise TypeError(
            "Expected `native` to be None or a `NativeCall` (made by the "
            f"engine for one call). Received: native={native!r}"
        )
    backend, device = platform()
    kernels = KERNELS.get((backend, device), ())
    if not kernels:
        return _ours(ours, f"no native kernel on {backend} ({device})")
    why = _ours_only(form, chunk_size, request)
    if why:
        return _ours(ours, why)
    refusals = []
    for kernel in kernels:
        why = _CHECKS[kernel](ours, shapes, request, native, device)
        if not why:
            where = _where(kernel, request, native, device)
            return type(ours)(kernel, None, _REASONS[kernel] + where)
        refusals.append(f"{kernel}: {why}")
    return _ours(ours, "; ".join(refusals))


def _where(kernel, request, native, device):
    """What the reason adds to a native kernel's name on the CPU."""
    if device != "cpu":
        return ""
    if kernel == TORCH_FLEX:
        return " (inference on the CPU)"
    how = "the lse from its CPU flash kernel" if request.lse else ""
    if sdpa_mask(native):
        how = ", ".join(p for p in ("the masks as one dense mask", how) if p)
    elif native.masks:
        how = ", ".join(p for p in ("is_causal", how) if p)
    return f" ({how})" if how else ""


def sdpa_mask(native):
    """Whether SDPA takes the call's masks and mods as a dense mask (not
    `is_causal`, nor no mask)."""
    beyond = set(native.masks) - {"causal"}
    return bool(beyond or native.bias or (native.offset and native.masks))


def _ours(plan, why):
    return dataclasses.replace(plan, reason=f"{plan.reason}; ours: {why}")


def _ours_only(form, chunk_size, request):
    """Why the call keeps this package's kernels whatever the backend."""
    if request.ring:
        return "a ContextParallel is active"
    if request.flash:
        return "flash_attention=True asks for Keras's kernel"
    if request.weights or request.dropout:
        return "the weights are returned or dropped out"
    if request.logits_hook or request.hook:
        return f"{request.logits_hook or request.hook} needs the logits"
    if chunk_size is not None:
        return f"chunk_size={chunk_size} asks for this package's kernels"
    if form != "dot":
        return "the score is not a dot product"
    return ""


def _sdpa(ours, shapes, request, native, device):
    if device == "cpu":
        return _cpu_sdpa(ours, request, native)
    mods = request.mods or native.score_mod or native.bias
    if mods or set(native.masks) - {"causal"}:
        return "masks or mods beyond causal"
    if native.offset and native.masks:
        return "a causal mask after a cache's positions"
    if request.lse:
        return "it returns no log-sum-exp (sinks)"
    return ""


def _cpu_sdpa(ours, request, native):
    """Why SDPA does not run on the CPU: no score mod, its flash kernel's
    equal head sizes; a dense mask (read whole) not where the blocks skip
    pairs."""
    if native.score_mod:
        return "a score mod"
    if request.block_mask:
        return "a block mask"
    if native.value_dim != native.head_dim:
        return "value heads of another size (its CPU flash kernel)"
    if native.bias and native.backward:
        return "a bias in training (its CPU flash kernel has no gradient of it)"
    if request.lse and not native.cpu_lse:
        return "no log-sum-exp from this PyTorch's CPU kernel (sinks)"
    kept = 1.0 if request.kept is None else request.kept
    if sdpa_mask(native) and ours.path == "blocks" and kept < 1.0:
        return (
            f"its dense mask, where the blocks skip {1 - kept:.0%} of the pairs"
        )
    return ""


def _torch_flex(ours, shapes, request, native, device):
    why = _cpu_flex(ours, shapes, request, native) if device == "cpu" else ""
    if why:
        return why
    if not native.lowers:
        return "PyTorch's compiler cannot lower the mods (docs/flex.md)"
    if native.dtype == "float64":
        return "float64"
    return ""


def _cpu_flex(ours, shapes, request, native):
    """Why PyTorch's compiled FlexAttention does not run on the CPU (its
    mods aside): checked first, so that `describe` need not probe the
    mods of a call refused anyway (`cpu_flex_length`)."""
    if native.backward:
        return "no backward pass on the CPU (training)"
    if request.lse:
        return "no log-sum-exp on the CPU (sinks)"
    if ours.path != "blocks":
        return "the dense step is faster on the CPU"
    if not cpu_flex_length(shapes[2:]):
        return f"fewer than {CPU_FLEX_MIN_LENGTH} queries or keys"
    return ""


def cpu_flex_length(lengths):
    """Whether the query and key lengths are long enough for PyTorch's
    compiled FlexAttention on the CPU (unknown lengths are not)."""
    return min(n or 0 for n in lengths) >= CPU_FLEX_MIN_LENGTH


def _cudnn(ours, shapes, request, native, device):
    allowed = {"causal", "causal_window", "lengths"}
    if native.dtype not in CUDNN_DTYPES:
        return f"float16 or bfloat16 only, not {native.dtype}"
    head = native.head_dim
    if head is None or head > CUDNN_MAX_HEAD or head % 8:
        return f"head size {head} (at most {CUDNN_MAX_HEAD}, a multiple of 8)"
    if native.value_dim != head:
        return "value heads of another size"
    if native.score_mod or set(native.masks) - allowed:
        return "masks or mods beyond causal, windows, lengths and a bias"
    if native.offset and native.masks:
        return "a mask after a cache's positions"
    if native.bias and native.backward and any(n % 2 for n in shapes[2:]):
        return "a bias in training with an odd length"
    if request.lse:
        return "the log-sum-exp (sinks)"
    return ""


def _pallas(ours, shapes, request, native, device):
    if native.score_mod or native.bias or native.offset:
        return "mods, a bias or a cache"
    if "document" not in native.masks or set(native.masks) - {
        "document",
        "causal",
    }:
        return "documents, causal or not, only"
    if native.grouped or native.value_dim != native.head_dim:
        return "grouped or differently sized heads"
    _, _, q_len, k_len = shapes
    if q_len != k_len or not isinstance(q_len, int) or q_len % PALLAS_BLOCK:
        return f"equal lengths that are multiples of {PALLAS_BLOCK}"
    if request.lse:
        return "the log-sum-exp (sinks)"
    return ""


_CHECKS = {
    TORCH_FLEX: _torch_flex,
    SDPA: _sdpa,
    CUDNN: _cudnn,
    PALLAS: _pallas,
}
