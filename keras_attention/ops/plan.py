"""The one path planner: which kernel an attention call runs, and its blocks.

Every layer call and every `flex_attention` call is planned once, here:
the threshold, the estimate of a step's bytes and every "X needs Y"
refusal are in this module and nowhere else (its thresholds, with the
measurements behind them, in `ops/_thresholds.py`). The `Plan` names the
kernel that runs:

- `"flash"`: `keras.ops.dot_product_attention(..., flash_attention=True)`.
- `"fused"`: this package's fused kernel (`_fused.fused_attention`: a
  dot-product score, no weights to return or drop out, no logits hook;
  FlashAttention's backward, the log-sum-exp beside the output).
- `"keras_fused"`: `keras.ops.dot_product_attention`, chosen instead of
  `"fused"` on PyTorch where the call needs no log-sum-exp (`fused_path`).
- `"dense"`: every logit at once, through the score (the weights can be
  returned, dropped out, activated or penalised; mods applied densely).
- `"blocks"`: the block kernel, an online softmax over blocks with a
  recomputing backward pass: memory linear in the length, the blocks a
  band or a `BlockMask` empties skipped.
- `"ring"`: the blocks of `ring_attention`, the sequence sharded over
  the devices of a `ContextParallel` (asked for with `ring=True`).
- `"torch_flex"`, `"sdpa"`, `"cudnn"`, `"pallas"`: the backend's own
  fused kernels where the call fits them (`ops/_native_plan.py`).
"""

import dataclasses
import functools

import keras

from keras_attention.ops import _native_plan
from keras_attention.ops import _refusals
from keras_attention.ops._native_plan import NATIVE_PATHS
from keras_attention.ops._refusals import Request
from keras_attention.ops._thresholds import ACCELERATOR_MEMORY_BYTES
from keras_attention.ops._thresholds import ACCELERATOR_MEMORY_SHARE
from keras_attention.ops._thresholds import AUTO_CHUNK_MIN_BYTES
from keras_attention.ops._thresholds import AUTO_CHUNK_SIZE
from keras_attention.ops._thresholds import AUTO_CHUNK_SIZES
from keras_attention.ops._thresholds import BACKWARD_COPIES
from keras_attention.ops._thresholds import FINE_BLOCKS_BELOW
from keras_attention.ops._thresholds import FORWARD_COPIES
from keras_attention.ops._thresholds import JAX_CPU_MIN_BYTES
from keras_attention.ops._thresholds import JAX_CPU_MIN_LENGTH
from keras_attention.ops._thresholds import MOD_COPIES
from keras_attention.ops._thresholds import NARROW_BAND
from keras_attention.ops._thresholds import SPARSE_MAX_SHARE
from keras_attention.ops._thresholds import SPARSE_MIN_LENGTH

PATHS = (
    "flash",
    "fused",
    "keras_fused",
    "dense",
    "blocks",
    "ring",
    *NATIVE_PATHS,
)


def fused_path(lse=False):
    """The fused kernel of this backend: `"keras_fused"` (Keras's
    `dot_product_attention`, PyTorch's fused kernel forward and backward,
    about 1.8x this package's contractions on a CPU; BENCHMARKS.md) on
    PyTorch where no log-sum-exp is asked, which it does not give; else
    `"fused"`, this package's."""
    if keras.backend.backend() == "torch" and not lse:
        return "keras_fused"
    return "fused"


@dataclasses.dataclass(frozen=True)
class Plan:
    """What `plan_attention` chose.

    Attributes:
        path: The kernel that runs: `"flash"`, `"fused"`,
            `"keras_fused"`, `"dense"`,
            `"blocks"`, `"ring"`, or a native one (`"torch_flex"`,
            `"sdpa"`, `"cudnn"`, `"pallas"`).
        block_size: `(queries, keys)` per block on `"blocks"` and
            `"ring"` (per device), else `None`.
        reason: Why this kernel (and why no native one), in a few words.

    Example:

    >>> plan = keras_attention.ops.plan_attention("dot", (1, 8, 64, 64), 16)
    >>> plan.path, plan.block_size
    ('blocks', (16, 16))
    """

    path: str
    block_size: tuple | None = None
    reason: str = ""


def dense_bytes(shapes, bytes_per_logit=4):
    """Bytes of the dense logits of `shapes = (batch, heads, Tq, Tk)`.

    `batch × heads × Tq × Tk × bytes_per_logit` (a `None` batch counts as
    1); `None` where a length is not static.

    Example:

    >>> from keras_attention.ops.plan import dense_bytes
    >>> dense_bytes((None, 8, 1024, 1024))
    33554432
    """
    batch, heads, q_len, k_len = shapes
    if not all(isinstance(n, int) for n in (q_len, k_len)):
        return None
    batch = batch if isinstance(batch, int) else 1
    return batch * heads * q_len * k_len * bytes_per_logit


def step_bytes(shapes, bytes_per_logit=4, backward=True, mods=False):
    """Bytes of `(Tq, Tk)` tensors that one dense step holds: the logits
    and weights (`FORWARD_COPIES`), a mod's temporaries (`MOD_COPIES`) and
    the backward pass's (`BACKWARD_COPIES`); `None` where a length is not
    static.

    Example:

    >>> from keras_attention.ops.plan import step_bytes
    >>> step_bytes((1, 4, 1024, 1024)) // 2**20, step_bytes(
    ...     (1, 4, 1024, 1024), backward=False
    ... ) // 2**20
    (64, 32)
    """
    size = dense_bytes(shapes, bytes_per_logit)
    if size is None:
        return None
    copies = FORWARD_COPIES + (MOD_COPIES if mods else 0)
    copies += BACKWARD_COPIES if backward else 0
    return size * copies


def band_share(limits, lengths, block_size, query_offset=0):
    """The share of the pairs of blocks that a band keeps.

    `limits` is the band's `(left, right)` (query `i` sees keys `i - left
    ..= i + right`, `None` open), `lengths` `(Tq, Tk)`, `block_size`
    `(queries, keys)`; the queries begin at `query_offset`.

    Example:

    >>> from keras_attention.ops.plan import band_share
    >>> band_share((None, 0), (2048, 2048), (512, 512))  # causal
    0.625
    """
    left, right = limits
    q_len, k_len = lengths
    qc, kc = min(block_size[0], q_len), min(block_size[1], k_len)
    nq, nk = -(-q_len // qc), -(-k_len // kc)
    kept = 0
    for i in range(nq):
        first_q, last_q = query_offset + i * qc, query_offset + (i + 1) * qc
        first = 0 if left is None else max(0, (first_q - left) // kc)
        last = nk if right is None else min(nk, (last_q - 1 + right) // kc + 1)
        kept += max(0, last - first)
    return kept / (nq * nk)


def chunk_threshold():
    """The bytes of a dense step from which the blocks are taken:
    `AUTO_CHUNK_MIN_BYTES` on a CPU; on a GPU or TPU, the larger of it and
    `ACCELERATOR_MEMORY_SHARE` of the device's memory."""
    memory = accelerator_memory()
    if memory is None:
        return AUTO_CHUNK_MIN_BYTES
    return max(AUTO_CHUNK_MIN_BYTES, int(memory * ACCELERATOR_MEMORY_SHARE))


@functools.cache
def accelerator_memory():
    """Bytes of memory of the device the backend computes on, or `None`
    on a CPU (read once per process)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform == "cpu":
            return None
        stats = device.memory_stats() or {}
        return stats.get("bytes_limit", ACCELERATOR_MEMORY_BYTES)
    if backend == "torch":
        import torch

        if not torch.cuda.is_available():
            return None
        index = torch.cuda.current_device()
        return torch.cuda.get_device_properties(index).total_memory
    if backend == "tensorflow":
        import tensorflow as tf

        if not tf.config.list_logical_devices("GPU"):
            return None
        return ACCELERATOR_MEMORY_BYTES
    return None


def plan_attention(
    form,
    shapes,
    chunk_size=None,
    *,
    weights=False,
    dropout=False,
    mods=False,
    tensor_mask=False,
    cached=False,
    flash=False,
    native_flash=True,
    ring=False,
    logits_hook=None,
    hook=None,
    score=None,
    bytes_per_logit=4,
    backward=True,
    kept=None,
    limits=(None, None),
    lse=False,
    block_size=None,
    native=None,
):
    """The kernel of one attention call, its block sizes, or a refusal.

    Each layer call and each `flex_attention` call asks once; the `Plan`
    names the kernel that runs, and nothing below chooses again.

    Args:
        form: The score's form: `"dot"` (a dot product of transformed
            inputs, `Score.dot_product_form`), `"additive"`
            (`Score.additive_form`) or `None` (dense only); `Score.form`.
        shapes: `(batch, query heads, Tq, Tk)`, each an integer or `None`.
        chunk_size: `None` (automatic: the blocks where the dense step
            would pass `chunk_threshold()` bytes, or where a band or a
            block mask leaves few blocks), `0` (dense) or the block size.
        weights: The weights are wanted (returned, or a penalty on them).
        dropout: Dropout is active on the weights (or, in a constructor,
            its rate is positive).
        mods: A score mod, a mask mod or an attention bias.
        tensor_mask: An explicit boolean `attention_mask` tensor.
        cached: The keys are a cache's slots.
        flash: Flash attention is on.
        native_flash: Whether flash attention runs Keras's flash kernel
            (`"flash"`; MultiHeadAttention) or this package's fused one
            with the flag's refusals (`"fused"`; GroupedQueryAttention,
            as Keras's layer refuses dropout and scores). Defaults to
            `True`.
        ring: The sequence is sharded over devices (a `ContextParallel`
            is active): the ring, with `chunk_size` (or
            `AUTO_CHUNK_SIZE`) queries and keys per block on each device.
        logits_hook: Why the logits must be formed densely (an activation
            of the logits, a penalty), or `None`.
        hook: A Keras hook that a subclass overrides and the call goes
            through (`"_compute_attention"`, `"_compute_attention_mask"`
            or `"_masked_softmax"`; the blocks and the ring bypass them),
            or `None`. An overridden softmax needs the logits (the dense
            kernel); the others run the dense or the fused kernel.
        score: The score's name, for the errors.
        bytes_per_logit: What the dense path holds per pair
            (`Score.dense_bytes_per_logit`). Defaults to `4`.
        backward: Whether the step is differentiated (its backward pass
            counts in the estimate). Defaults to `True`.
        kept: The share of the pairs of blocks that a band or a block
            mask keeps (`band_share`), or `None` for all.
        limits: `(left, right)` of a band holding every pair the call
            keeps (`AttentionMasks.bounds`; a causal window of `w` keys is
            `(w - 1, 0)`): a band at most `NARROW_BAND` keys wide runs in
            blocks of that size. Defaults to `(None, None)`, no band.
        lse: The log-sum-exp of each row is wanted (attention sinks).
        block_size: `(queries, keys)` per block of a `BlockMask` the
            call brings: with `chunk_size=None` the blocks are taken, of
            this size (a positive `chunk_size` must match it). Defaults to
            `None`, no block mask.
        native: The call's `NativeCall` (made by the engine): the
            backend's fused kernels where the call fits them. Defaults to
            `None`, this package's kernels only.

    Returns:
        A `Plan`.

    Raises:
        ValueError: what the call asks that the path cannot give (a
            positive `chunk_size` with the weights, flash attention or a
            logits hook; mods with flash attention; ...).

    Example:

    >>> plan = keras_attention.ops.plan_attention(
    ...     "dot", (2, 8, 128, 128), None, weights=True
    ... )
    >>> plan.path
    'dense'
    >>> plan.reason
    'the weights are returned or dropped out: the logits are formed'
    """
    request = Request(
        weights=bool(weights),
        dropout=bool(dropout),
        mods=bool(mods),
        tensor_mask=bool(tensor_mask),
        cached=bool(cached),
        flash=bool(flash),
        native_flash=bool(native_flash),
        ring=bool(ring),
        logits_hook=logits_hook,
        hook=hook,
        score=score,
        backward=bool(backward),
        kept=kept,
        limits=limits,
        lse=bool(lse),
        block_mask=block_size is not None,
    )
    _refusals.check(form, shapes, chunk_size, request, bytes_per_logit)
    _refusals.refuse(form, chunk_size, request)
    sizes = _block_size(chunk_size, block_size, request, shapes)
    plan = _choose(form, shapes, chunk_size, request, bytes_per_logit)
    if plan.path == "blocks":
        plan = dataclasses.replace(plan, block_size=sizes)
    return _native_plan.choose(plan, form, shapes, chunk_size, request, native)


def auto_chunk_size(skips=True) -> int:
    """Queries and keys per block of the automatic choice on this
    backend: `AUTO_CHUNK_SIZES`'s where the blocks skip pairs (`skips`:
    the call has a band or a mask, and a sequence shorter than
    `FINE_BLOCKS_BELOW`), else `AUTO_CHUNK_SIZE`.

    Example:

    >>> from keras_attention.ops import plan
    >>> plan.auto_chunk_size() in (256, 512)
    True
    >>> plan.auto_chunk_size(skips=False)
    512
    """
    if not skips:
        return AUTO_CHUNK_SIZE
    return AUTO_CHUNK_SIZES.get(keras.backend.backend(), AUTO_CHUNK_SIZE)


def _skips(request, shapes):
    """Whether the call's masks let the blocks skip pairs of blocks of a
    sequence shorter than `FINE_BLOCKS_BELOW` (or of unknown length)."""
    lengths = shapes[2:4]
    short = not all(isinstance(n, int) for n in lengths) or (
        min(lengths) < FINE_BLOCKS_BELOW
    )
    return request.kept is not None and request.kept < 1 and short


def _narrow(limits):
    """Whether a band of `limits` is at most `NARROW_BAND` keys wide."""
    left, right = limits
    return (
        left is not None
        and right is not None
        and (left + right + 1 <= NARROW_BAND)
    )


def _block_size(chunk_size, block_size, request, shapes):
    """The blocks' `(queries, keys)`: a block mask's, which a positive
    `chunk_size` must match, else `chunk_size` or `auto_chunk_size()`
    (the smaller where a mask lets the blocks of a short sequence skip
    pairs, `_skips`; `NARROW_BAND` for a band as narrow, `_narrow`)."""
    if block_size is None:
        size = chunk_size or auto_chunk_size(_skips(request, shapes))
        if not chunk_size and _narrow(request.limits):
            size = min(size, NARROW_BAND)
        return (size, size)
    block_size = tuple(block_size)
    if chunk_size and block_size != (chunk_size, chunk_size):
        raise ValueError(
            "A positive `chunk_size` must match the block size of "
            f"`block_mask`. Received: chunk_size={chunk_size}, "
            f"block_mask.block_size={block_size}"
        )
    return block_size


def _choose(form, shapes, chunk_size, request, bytes_per_logit):
    """The kernel, once every refusal has passed."""
    if request.ring:
        size = chunk_size or AUTO_CHUNK_SIZE
        return Plan("ring", (size, size), "a ContextParallel is active")
    if request.flash:
        path = "flash" if request.native_flash else fused_path(request.lse)
        return Plan(path, None, "flash_attention is on")
    if request.logits_hook:
        return Plan("dense", None, f"{request.logits_hook} needs the logits")
    if request.hook == "_masked_softmax":
        why = "the overridden _masked_softmax needs the logits"
        return Plan("dense", None, why)
    if request.hook:
        return _dense(form, request, f"the overridden {request.hook} is called")
    if chunk_size:
        return Plan("blocks", (chunk_size, chunk_size), "chunk_size")
    if request.weights or request.dropout:
        return _dense(form, request, "")
    if chunk_size is None and form is not None:
        reason = "a block mask is given"
        if not request.block_mask:
            reason = _blocks_pay(shapes, request, bytes_per_logit)
        if reason:
            return Plan("blocks", None, reason)  # sized by the caller
    return _dense(form, request, "chunk_size=0" if chunk_size == 0 else "")


def _dense(form, request, reason):
    """The fused kernel where it can run, the dense logits elsewhere."""
    weights = request.weights or request.dropout
    if form == "dot" and not (request.mods or weights):
        path = fused_path(request.lse)
        return Plan(path, None, reason or "the dense step is small")
    why = "the weights are returned or dropped out"
    if not weights:
        why = "mods" if form == "dot" else "the score is not a dot product"
    return Plan("dense", None, reason or f"{why}: the logits are formed")


def _in_units(size):
    """Bytes as GiB, MiB or KiB, one decimal."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _mapped_afresh(shapes, size):
    """Whether a dense step of `size` bytes is one that JAX's CPU maps
    afresh on each call (`JAX_CPU_MIN_BYTES`, `JAX_CPU_MIN_LENGTH`)."""
    return (
        keras.backend.backend() == "jax"
        and accelerator_memory() is None
        and min(shapes[2], shapes[3]) >= JAX_CPU_MIN_LENGTH
        and size > JAX_CPU_MIN_BYTES
    )


def _blocks_pay(shapes, request, bytes_per_logit):
    """Why the automatic choice takes the blocks, or `""` (dense)."""
    size = step_bytes(shapes, bytes_per_logit, request.backward, request.mods)
    if size is None:
        return ""
    if size > chunk_threshold():
        return f"the dense step would hold {_in_units(size)}"
    if _mapped_afresh(shapes, size):
        return (
            f"on JAX's CPU the dense step's {_in_units(size)} would be "
            "mapped afresh on each call"
        )
    kept = 1.0 if request.kept is None else request.kept
    long = min(shapes[2], shapes[3]) >= SPARSE_MIN_LENGTH
    if long and kept <= SPARSE_MAX_SHARE and accelerator_memory() is None:
        return f"the blocks skip {1 - kept:.0%} of the pairs"
    return ""
