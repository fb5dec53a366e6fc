"""The one path planner: which kernel an attention call runs, and its blocks.

Every layer and `flex_attention` ask `plan_attention` which path to take;
the threshold, the byte estimate and every "X needs Y" refusal are here
and nowhere else. The paths:

- `"flash"`: `keras.ops.dot_product_attention(..., flash_attention=True)`.
- `"fused"`: `keras_attention.ops.dot_product_attention` (a dot-product
  score, no weights to return or drop out).
- `"dense"`: every logit at once, through the score (the weights can be
  returned, dropped out, activated or penalised).
- `"blocks"`: an online softmax over blocks (`chunked_attention`, or
  `flex_attention`'s blocks when `flex`), memory linear in the length.
- `"ring"`: the blocks of `ring_attention`, the sequence sharded over
  the devices of a `ContextParallel` (asked for with `ring=True`).

`flex` says that the logits go through `flex_attention` (score or mask
mods, or masks that only a mask mod reads in blocks: a tensor mask, a
cache's offsets, grouped query heads).
"""

import dataclasses
import functools

import keras

# With `chunk_size=None`, on a CPU, the blocks are taken when the dense logits
# (batch × heads × Tq × Tk values, batch 1 when it is not static, times
# the score's values per logit: `units` for an additive score) would
# exceed this many bytes: 2 GiB, N = 8192 for one example with 8 heads.
# On an idle CPU the chunked training step measured 1.14-1.20x the dense
# one at N = 2048-8192 (TensorFlow, BENCHMARKS.md), so below this the
# dense path is faster and its memory still modest.
AUTO_CHUNK_MIN_BYTES = 2**31
# On a GPU or TPU the dense step is faster than the blocks wherever it
# fits: on an H200 the blocks took 1.2-2.4x the time of Keras's dense
# layer on JAX and 1.7-45x on PyTorch at 2-16 GiB of logits
# (BENCHMARKS.md). There the blocks are taken only where the dense logits
# would pass this share of the device's memory (a quarter: 35 GiB on an
# H200), or of `ACCELERATOR_MEMORY_BYTES` where the backend does not say.
ACCELERATOR_MEMORY_SHARE = 0.25
ACCELERATOR_MEMORY_BYTES = 16 * 2**30
# Queries and keys per block of the automatic choice: 512 × 512 measured
# fastest on an idle CPU at N = 4096 (1.22x dense, against 1.32x for
# 512 × 256 and 1.59x for 1024 × 1024; BENCHMARKS.md).
AUTO_CHUNK_SIZE = 512
# A causal dot-product attention in a compiled TensorFlow step
# (`tf.function`, XLA: what `model.fit` runs) takes the blocks from this
# many queries and keys on: they skip the key blocks in the future, and
# measured faster than dense from N = 2048 (0.91x in graph mode, 0.73x
# under XLA; 1.09x and 0.86x at 1024). Eager steps run the block loops op
# by op (1.5x dense at N = 4096 in TensorFlow eager), so they keep the
# byte rule.
AUTO_CAUSAL_MIN_LENGTH = 2048


@dataclasses.dataclass(frozen=True)
class Plan:
    """What `plan_attention` chose.

    Attributes:
        path: `"flash"`, `"fused"`, `"dense"`, `"blocks"` or `"ring"`.
        block_size: `(queries, keys)` per block on `"blocks"` and
            `"ring"` (per device), else `None`.
        flex: Whether the logits go through `flex_attention`.

    Example:

    >>> plan = keras_attention.ops.plan_attention("dot", (1, 8, 64, 64), 16)
    >>> plan.path, plan.block_size, plan.flex
    ('blocks', (16, 16), False)
    """

    path: str
    block_size: tuple | None = None
    flex: bool = False


@dataclasses.dataclass(frozen=True)
class _Request:
    """What a call asks of the kernel beyond the score and the shapes:
    `plan_attention`'s keyword arguments, documented there."""

    weights: bool = False
    dropout: bool = False
    mods: bool = False
    tensor_mask: bool = False
    cached: bool = False
    grouped: bool = False
    causal: bool = False
    flash: bool = False
    ring: bool = False
    logits_hook: str | None = None
    score: str | None = None


def dense_bytes(shapes, bytes_per_logit=4):
    """Bytes of the dense logits of `shapes = (batch, heads, Tq, Tk)`.

    The one estimate of the package: `batch × heads × Tq × Tk ×
    bytes_per_logit` (a `None` batch counts as 1); `None` where a length is
    not static.

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


def auto_block_size(shapes, bytes_per_logit=4, causal_pays=False):
    """The automatic choice: `(AUTO_CHUNK_SIZE,) * 2` where the dense
    logits would pass `chunk_threshold()` (or `causal_pays`), else `None`
    (dense)."""
    size = dense_bytes(shapes, bytes_per_logit)
    if size is None:
        return None
    if size < chunk_threshold() and not causal_pays:
        return None
    return AUTO_CHUNK_SIZE, AUTO_CHUNK_SIZE


def chunk_threshold():
    """The bytes of dense logits from which the blocks are taken:
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


def _compiled_tensorflow():
    """Whether this call is traced into a TensorFlow graph (or XLA)."""
    if keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    return not tf.executing_eagerly()


def _refuse(form, chunk_size, request):
    """Every "X needs Y" refusal of the planner, as a `ValueError`."""
    hook, flash = request.logits_hook, request.flash
    score = request.score or form
    if request.mods and (form != "dot" or flash or hook):
        raise ValueError(
            "`score_mod`, `mask_mod` and `attention_bias` need a "
            "dot-product score, without flash attention, "
            "`attention_activation`, `penalty_coefficient` or an "
            f"overridden attention hook. Received: score={score!r}, "
            f"flash_attention={flash}, logits_hook={hook!r}"
        )
    if flash and request.weights:
        raise ValueError(
            "Returning attention scores is not supported when flash "
            "attention is enabled. Please disable flash attention to "
            "access attention scores."
        )
    if request.ring:
        _refuse_ring(form, request, score)
    elif chunk_size:
        _refuse_blocks(form, chunk_size, request, score)


def _refuse_ring(form, request, score):
    """What the ring (context parallelism) cannot give."""
    wanted = [
        name
        for name, asked in (
            ("a dot-product score", form != "dot"),
            ("no attention weights", request.weights),
            ("no dropout on the weights", request.dropout),
            ("no cache", request.cached),
            ("no `attention_mask` tensor", request.tensor_mask),
            ("no logits hook", request.logits_hook),
        )
        if asked
    ]
    if wanted:
        raise ValueError(
            "Context parallelism (`ContextParallel`, the ring) attends in "
            "blocks sharded over devices; it needs "
            f"{', '.join(wanted)}. Received: score={score!r}, "
            f"return_attention_scores={request.weights}, dropout active="
            f"{request.dropout}, cached={request.cached}, attention_mask="
            f"{request.tensor_mask}, logits_hook={request.logits_hook!r}"
        )


def _refuse_blocks(form, chunk_size, request, score):
    """What a positive `chunk_size` (the blocks) cannot give."""
    hook = request.logits_hook
    if request.flash or (hook or "").startswith("overridden"):
        raise ValueError(
            "A positive `chunk_size` takes the chunked path, which "
            "bypasses flash attention and overridden `_compute_attention` "
            "/ `_compute_attention_mask` / `_masked_softmax`; pass "
            f"chunk_size=None or 0. Received: chunk_size={chunk_size}, "
            f"flash_attention={request.flash}, logits_hook={hook!r}"
        )
    if hook:
        raise ValueError(
            f"The chunked path does not support `{hook}`: the blocks never "
            "form the logits it needs; pass chunk_size=None or 0 to use "
            f"it. Received: chunk_size={chunk_size}, logits_hook={hook!r}"
        )
    if request.weights:
        raise ValueError(
            "The blocks never hold the attention weights: chunked "
            "attention takes masks and mods, not `return_attention_scores`"
            "; pass chunk_size=None or 0 with "
            f"return_attention_scores=True. Received: chunk_size={chunk_size}"
        )
    if form != "dot" and request.cached:
        raise ValueError(
            "A cached call with a positive `chunk_size` attends in the "
            "blocks of `flex_attention`, which need a dot-product score; "
            f"pass chunk_size=None or 0. Received: chunk_size={chunk_size}, "
            f"score={score!r}"
        )
    if form != "dot" and request.tensor_mask:
        raise ValueError(
            "The blocks of a score that is not a dot product take padding "
            "masks, causal masking and windows only, not `attention_mask`: "
            "pass chunk_size=0 or None to use it. Received: "
            f"chunk_size={chunk_size}, score={score!r}"
        )


def _is_dim(n):
    """A positive integer, `None`, or a backend's symbolic dimension
    (JAX's shape inference), which counts as unknown."""
    if isinstance(n, bool) or isinstance(n, (float, str, bytes)):
        return False
    return not isinstance(n, int) or n > 0


def _check(form, shapes, chunk_size, request, bytes_per_logit):
    if form not in ("dot", "additive", None):
        raise ValueError(
            "Expected `form` to be 'dot', 'additive' or None. Received: "
            f"form={form!r}"
        )
    ok = isinstance(shapes, (tuple, list)) and len(shapes) == 4
    ok = ok and all(_is_dim(n) for n in shapes)
    if not ok:
        raise ValueError(
            "Expected `shapes` to be `(batch, heads, Tq, Tk)`, each a "
            f"positive integer or None. Received: shapes={shapes!r}"
        )
    if chunk_size is not None and (
        isinstance(chunk_size, bool)
        or not isinstance(chunk_size, int)
        or chunk_size < 0
    ):
        raise ValueError(
            "Expected `chunk_size` to be None (automatic), 0 (dense) or a "
            f"positive integer. Received: chunk_size={chunk_size!r}"
        )
    if (
        isinstance(bytes_per_logit, bool)
        or not isinstance(bytes_per_logit, int)
        or bytes_per_logit < 1
    ):
        raise ValueError(
            "Expected `bytes_per_logit` to be a positive integer. "
            f"Received: bytes_per_logit={bytes_per_logit!r}"
        )
    for name in ("logits_hook", "score"):
        value = getattr(request, name)
        if value is not None and not isinstance(value, str):
            raise TypeError(
                f"Expected `{name}` to be None or a string. Received: "
                f"{name}={value!r}"
            )


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
    grouped=False,
    causal=False,
    flash=False,
    ring=False,
    logits_hook=None,
    score=None,
    bytes_per_logit=4,
):
    """The path of one attention call, its block sizes, or a refusal.

    Args:
        form: The score's form: `"dot"` (a dot product of transformed
            inputs, `Score.dot_product_form`), `"additive"`
            (`Score.additive_form`) or `None` (dense only); `Score.form`.
        shapes: `(batch, query heads, Tq, Tk)`, each an integer or `None`.
        chunk_size: `None` (blocks where the dense logits would pass
            `AUTO_CHUNK_MIN_BYTES`), `0` (dense) or the block size.
        weights: The weights are wanted (returned, or a penalty on them).
        dropout: Dropout is active on the weights.
        mods: A score mod, a mask mod or an attention bias.
        tensor_mask: An explicit boolean `attention_mask` tensor.
        cached: The keys are a cache's slots (positions offset).
        grouped: Fewer key/value heads than query heads.
        causal: The future is masked.
        flash: Flash attention is on.
        ring: The sequence is sharded over devices (a `ContextParallel`
            is active): the ring, with `chunk_size` (or
            `AUTO_CHUNK_SIZE`) queries and keys per block on each device.
        logits_hook: Why the logits must be formed densely (an activation
            of the logits, a penalty, an overridden hook), or `None`.
        score: The score's name, for the errors.
        bytes_per_logit: What the dense path holds per pair
            (`Score.dense_bytes_per_logit`). Defaults to `4`.

    Returns:
        A `Plan`.

    Raises:
        ValueError: what the call asks that the path cannot give (a
            positive `chunk_size` with the weights, flash attention or a
            logits hook; mods without a dot-product score; ...).

    Example:

    >>> plan = keras_attention.ops.plan_attention(
    ...     "dot", (2, 8, 128, 128), None, weights=True
    ... )
    >>> plan.path
    'dense'
    """
    request = _Request(
        weights=bool(weights),
        dropout=bool(dropout),
        mods=bool(mods),
        tensor_mask=bool(tensor_mask),
        cached=bool(cached),
        grouped=bool(grouped),
        causal=bool(causal),
        flash=bool(flash),
        ring=bool(ring),
        logits_hook=logits_hook,
        score=score,
    )
    _check(form, shapes, chunk_size, request, bytes_per_logit)
    _refuse(form, chunk_size, request)
    return _choose(form, shapes, chunk_size, request, bytes_per_logit)


def _choose(form, shapes, chunk_size, request, bytes_per_logit):
    """The path, once every refusal has passed."""
    if request.ring:
        size = chunk_size or AUTO_CHUNK_SIZE
        return Plan("ring", (size, size))
    if request.flash:
        return Plan("flash")
    if request.logits_hook:
        return Plan("dense")
    block = None
    wants_dense = request.weights or request.dropout
    if chunk_size:
        block = (chunk_size, chunk_size)
    elif chunk_size is None and form is not None and not wants_dense:
        if not (form == "additive" and request.tensor_mask):
            causal_pays = (
                request.causal
                and form == "dot"
                and min(shapes[2] or 0, shapes[3] or 0)
                >= AUTO_CAUSAL_MIN_LENGTH
                and _compiled_tensorflow()
            )
            block = auto_block_size(shapes, bytes_per_logit, causal_pays)
    if block is not None:
        # Additive blocks read padding masks and bands only (never a cache
        # when planned automatically: their dense path serves it).
        if form == "additive" and request.cached:
            block = None
        else:
            flex = form == "dot" and (
                request.mods
                or request.tensor_mask
                or request.cached
                or request.grouped
            )
            return Plan("blocks", block, flex)
    if request.mods:
        return Plan("dense", flex=True)
    if form == "dot" and not wants_dense:
        return Plan("fused")
    return Plan("dense")
