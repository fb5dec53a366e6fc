"""`layer.explain(...)`: a multi-head layer's call planned, then stopped
before its kernel runs (private module).

The layer is called as it would be, so the plan explained is the one
that call would run; the engine (`MultiHeadBase._attend`), holding the
call's one record and plan, gives them to `_explained` instead of the
kernel (`ops.explain.explain_call` puts them in words).
"""

from keras import ops

from keras_attention.ops.explain import explain_call


class Explains:
    """The explaining half of `MultiHeadBase`: `explain`, and
    `_explained`, which the engine calls in its kernel's place while the
    layer explains (its `_explaining` holder is set)."""

    def explain(self, *args, **kwargs):
        """Which kernel this layer runs for exactly this call, and why.

        The arguments are the layer's call's (`query`, `value`, masks,
        `use_causal_mask`, a cache, mods, `training`, ...). The layer is
        called as it would be (built first if needed, the heads projected,
        the record made and planned), and stops before its kernel runs.

        Returns:
            A `keras_attention.ops.explain.Explanation`: `.path` (the
            kernel, `Plan.path`), `.reason`, `.block_size`, the bytes
            counted, and what another `chunk_size` would choose.

        Example:

        >>> layer = keras_attention.MultiHeadAttention(2, 4, chunk_size=4)
        >>> x = np.zeros((1, 8, 6), "float32")
        >>> explained = layer.explain(x, x, use_causal_mask=True)
        >>> explained.path, explained.block_size
        ('blocks', (4, 4))
        """
        self._explaining.value = True
        try:
            self(*args, **kwargs)
            explained = self._explaining.value
        finally:
            self._explaining.value = False
        if explained is True:
            raise RuntimeError(
                f"{type(self).__name__}'s call returned without attending, "
                "so it has no plan to explain (a subclass's `call` that "
                "never reaches the engine)."
            )
        return explained

    def _explained(self, record, plan, flags):
        """The call's plan in words, kept for `explain`; the rest of the
        call goes on with zeros of the context's shape and no weights."""
        self._explaining.value = explain_call(
            record, plan, self.chunk_size, **flags
        )
        query, value = record.query, record.value
        shape = tuple(query.shape[:3]) + (value.shape[-1],)
        return ops.zeros(shape, query.dtype), None
