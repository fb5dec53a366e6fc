"""Every "X needs Y" refusal of the planner, and the checks of its
arguments (private module).

`plan.plan_attention` builds one `Request` of a call (what it asks of the
kernel beyond the score and the shapes) and hands it here before it
chooses; a refusal is a `ValueError` (Keras's messages where Keras raises
the same), so the constructors' checks and the calls' are the same text.
"""

import dataclasses

# Keras's override points of `MultiHeadAttention` that a subclass may
# redefine (`plan_attention`'s `hook`).
HOOKS = ("_compute_attention", "_compute_attention_mask", "_masked_softmax")


@dataclasses.dataclass(frozen=True)
class Request:
    """What a call asks of the kernel beyond the score and the shapes:
    `plan_attention`'s keyword arguments, documented there."""

    weights: bool = False
    dropout: bool = False
    mods: bool = False
    tensor_mask: bool = False
    cached: bool = False
    flash: bool = False
    native_flash: bool = True
    ring: bool = False
    logits_hook: str | None = None
    hook: str | None = None
    score: str | None = None
    backward: bool = True
    kept: float | None = None
    limits: tuple = (None, None)
    lse: bool = False
    block_mask: bool = False


def check(form, shapes, chunk_size, request, bytes_per_logit):
    """`plan_attention`'s arguments: a `ValueError` (`TypeError` for a
    hook that is not a string) naming the one that is wrong."""
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
    for name in ("logits_hook", "hook", "score"):
        value = getattr(request, name)
        if value is not None and not isinstance(value, str):
            raise TypeError(
                f"Expected `{name}` to be None or a string. Received: "
                f"{name}={value!r}"
            )
    if request.hook is not None and request.hook not in HOOKS:
        raise ValueError(
            f"Expected `hook` to be None or one of {HOOKS}. Received: "
            f"hook={request.hook!r}"
        )
    kept = request.kept
    if kept is not None and not (
        isinstance(kept, (int, float))
        and not isinstance(kept, bool)
        and 0 <= kept <= 1
    ):
        raise ValueError(
            "Expected `kept` to be None or a share between 0 and 1. "
            f"Received: kept={kept!r}"
        )
    _check_limits(request.limits)


def _check_limits(limits):
    """A band's `(left, right)`, each `None` or an integer (a shifted
    band's side may be negative)."""
    ok = isinstance(limits, (tuple, list)) and len(limits) == 2
    ok = ok and all(
        side is None or (isinstance(side, int) and not isinstance(side, bool))
        for side in limits
    )
    if not ok:
        raise ValueError(
            "Expected `limits` to be a band's `(left, right)`, each None or "
            f"an integer. Received: limits={limits!r}"
        )


def _is_dim(n):
    """A positive integer, `None`, or a backend's symbolic dimension
    (JAX's shape inference), which counts as unknown."""
    if isinstance(n, bool) or isinstance(n, (float, str, bytes)):
        return False
    return not isinstance(n, int) or n > 0


def refuse(form, chunk_size, request):
    """Every "X needs Y" refusal of the planner, as a `ValueError`."""
    _refuse_flash(form, request)
    hook = request.logits_hook
    if request.mods and (request.flash or hook or request.hook):
        raise ValueError(
            "`score_mod`, `mask_mod` and `attention_bias` need the logits "
            "of this package's kernels, without flash attention, "
            "`attention_activation`, `penalty_coefficient` or an "
            f"overridden attention hook. Received: flash_attention="
            f"{request.flash}, logits_hook={hook!r}, hook={request.hook!r}"
        )
    if request.lse and request.hook == "_masked_softmax":
        raise ValueError(
            "Attention sinks need the log-sum-exp of the logits, which an "
            "overridden `_masked_softmax` does not give. Received: "
            "hook='_masked_softmax'"
        )
    if request.ring:
        _refuse_ring(form, request)
    elif chunk_size:
        _refuse_blocks(form, chunk_size, request)


def _refuse_flash(form, request):
    """What flash attention cannot give (Keras's messages where Keras
    raises the same)."""
    if not request.flash:
        return
    if request.dropout:
        raise ValueError(
            "Dropout is not supported when flash attention is enabled. "
            "Please set dropout to 0.0 to use flash attention."
        )
    if form != "dot":
        raise ValueError(
            "Flash attention needs a score that is a dot product ('dot', "
            "'scaled_dot', 'cosine' or 'bilinear'). Received: "
            f"flash_attention=True, score={request.score or form!r}"
        )
    hook = request.logits_hook
    if hook:
        raise ValueError(
            "Flash attention never forms the logits or the weights, which "
            f"`{hook}` needs: pass flash_attention=False. Received: "
            f"flash_attention=True, logits_hook={hook!r}"
        )
    if request.weights:
        raise ValueError(
            "Returning attention scores is not supported when flash "
            "attention is enabled. Please disable flash attention to "
            "access attention scores."
        )
    if request.lse and request.native_flash:
        raise ValueError(
            "Flash attention (Keras's kernel) does not return the "
            "log-sum-exp that attention sinks need; pass "
            "flash_attention=False. Received: flash_attention=True"
        )


def _refuse_ring(form, request):
    """What the ring (context parallelism) cannot give."""
    wanted = [
        name
        for name, asked in (
            ("a dot-product score", form != "dot"),
            ("no attention weights", request.weights),
            ("no dropout on the weights", request.dropout),
            ("no cache", request.cached),
            ("no `attention_mask` tensor", request.tensor_mask),
            ("no logits hook", request.logits_hook or request.hook),
        )
        if asked
    ]
    if wanted:
        raise ValueError(
            "Context parallelism (`ContextParallel`, the ring) attends in "
            "blocks sharded over devices; it needs "
            f"{', '.join(wanted)}. Received: score="
            f"{request.score or form!r}, return_attention_scores="
            f"{request.weights}, dropout active={request.dropout}, cached="
            f"{request.cached}, attention_mask={request.tensor_mask}, "
            f"logits_hook={request.logits_hook!r}"
        )


def _refuse_blocks(form, chunk_size, request):
    """What a positive `chunk_size` (the blocks) cannot give."""
    hook, overridden = request.logits_hook, request.hook
    if request.flash or overridden:
        raise ValueError(
            "A positive `chunk_size` takes the chunked path, which "
            "bypasses flash attention and overridden `_compute_attention` "
            "/ `_compute_attention_mask` / `_masked_softmax`; pass "
            f"chunk_size=None or 0. Received: chunk_size={chunk_size}, "
            f"flash_attention={request.flash}, hook={overridden!r}"
        )
    if hook:
        raise ValueError(
            f"The chunked path does not support `{hook}`: the blocks never "
            "form the logits it needs; pass chunk_size=None or 0 to use "
            f"it. Received: chunk_size={chunk_size}, logits_hook={hook!r}"
        )
    if form is None:
        raise ValueError(
            "Chunked attention needs a score that is a dot product ('dot', "
            "'scaled_dot', 'cosine' or 'bilinear') or additive ('additive', "
            "'concat'); other scores need every (query, key) pair at once. "
            f"Received: chunk_size={chunk_size}, score={request.score!r}"
        )
    if request.weights:
        raise ValueError(
            "The blocks never hold the attention weights: chunked "
            "attention takes masks and mods, not `return_attention_scores`"
            "; pass chunk_size=None or 0 with "
            f"return_attention_scores=True. Received: chunk_size={chunk_size}"
        )
    if request.dropout:
        raise ValueError(
            "Chunked attention never forms the attention weights, so it "
            "cannot apply dropout to them; use chunk_size=None or 0 with "
            f"dropout. Received: chunk_size={chunk_size}, dropout active"
        )
