"""Why an attention call runs the kernel it runs.

`explain_attention` (the ops) and a multi-head layer's `explain` return
an `Explanation` of one call: the `Plan` that call gets (the same
`plan_attention` of the same record, so its `path` is the kernel that
runs), the bytes the planner counted, and what other `chunk_size`s would
choose.
"""

import dataclasses

from keras_attention.ops import engine
from keras_attention.ops import plan as plan_lib
from keras_attention.ops._thresholds import AUTO_CHUNK_SIZE

# The `chunk_size`s an explanation compares: automatic, dense, blocks.
COMPARED = (None, 0, AUTO_CHUNK_SIZE)


@dataclasses.dataclass(frozen=True)
class Explanation:
    """The plan of one attention call, and why.

    Attributes:
        plan: The call's `Plan`.
        shapes: `(batch, heads, Tq, Tk)` as the planner read them.
        chunk_size: The call's `chunk_size`.
        step_bytes: Bytes of `(Tq, Tk)` tensors one dense step would hold
            (`plan.step_bytes`: the logits and weights, a mod's
            temporaries, the backward pass's), or `None` where a length is
            not static.
        threshold: The bytes of a dense step from which the automatic
            choice takes the blocks (`plan.chunk_threshold()`).
        kept: The share of the pairs of blocks the call's masks keep (a
            band's or a block mask's; of the plan's blocks, else of the
            automatic ones), or `None` for all.
        alternatives: `{chunk_size: path}` for the other `chunk_size`s of
            `COMPARED`, or `"refused: ..."` with the planner's reason.

    Example:

    >>> from keras_attention.ops import mods
    >>> q = np.zeros((1, 8, 2, 4), "float32")
    >>> explained = keras_attention.ops.explain_attention(
    ...     q, q, q, mask_mod=mods.causal()
    ... )
    >>> explained.path, explained.alternatives[512]
    ('dense', 'blocks')
    """

    plan: plan_lib.Plan
    shapes: tuple
    chunk_size: int | None
    step_bytes: int | None
    threshold: int
    kept: float | None
    alternatives: dict

    @property
    def path(self):
        """The kernel that runs (`Plan.path`)."""
        return self.plan.path

    @property
    def reason(self):
        """Why this kernel, in words (`Plan.reason`)."""
        return self.plan.reason

    @property
    def block_size(self):
        """`(queries, keys)` per block, or `None` (`Plan.block_size`)."""
        return self.plan.block_size

    def __str__(self):
        lines = [
            f"path: {self.path}"
            + (f" (blocks {self.block_size})" if self.block_size else ""),
            f"reason: {self.reason}",
            f"shapes (batch, heads, Tq, Tk): {self.shapes}",
            f"dense step: {self.step_bytes} bytes "
            f"(blocks from {self.threshold})",
        ]
        if self.kept is not None:
            lines.append(f"pairs of blocks kept: {self.kept:.0%}")
        for size, path in self.alternatives.items():
            lines.append(f"with chunk_size={size}: {path}")
        return "\n".join(lines)


def explain_call(call, plan, chunk_size=None, backward=True, **layer_flags):
    """The `Explanation` of `call` (an `engine.AttentionCall`) planned as
    `plan` with `chunk_size`, `backward` and the layer's flags (those
    of `engine.plan_call`)."""
    alternatives = {}
    for other in COMPARED:
        if other == chunk_size:
            continue
        try:
            alternatives[other] = engine.plan_call(
                call, other, backward, **dict(layer_flags)
            ).path
        except ValueError as error:
            alternatives[other] = f"refused: {error}"
    score = call.score
    return Explanation(
        plan=plan,
        shapes=tuple(call.shapes),
        chunk_size=chunk_size,
        step_bytes=plan_lib.step_bytes(
            call.shapes,
            score.dense_bytes_per_logit,
            backward,
            call.has_mods,
        ),
        threshold=plan_lib.chunk_threshold(),
        kept=engine.kept_share(call, plan.block_size),
        alternatives=alternatives,
    )
