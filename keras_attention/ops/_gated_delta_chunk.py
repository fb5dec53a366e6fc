"""The gated delta rule in chunks: the parallel form for training and
long inputs (private; `keras_attention.ops.gated_delta_rule`).

The WY representation of Yang, Kautz & Hatamizadeh (2024, section 3):
inside a chunk of `C` positions the writes `v'` solve one unit
lower-triangular system,

    (I + L) v' = β ∘ V − (β ∘ e ∘ K) S₀,   L_ij = β_i (k_i·k_j) D_ij (i > j)

so `v' = u − w S₀` with `u = T (β ∘ V)`, `w = T (β ∘ e ∘ K)`, `T = (I +
L)⁻¹`, all chunks at once. Only the state passes from chunk to chunk, in
one `keras.ops.scan` over the chunks (the compiled graph does not grow
with the length):

    o = (Q ∘ e) S₀ + (Q Kᵀ ∘ D) v'
    S ← exp(G_C) S₀ + (K ∘ f)ᵀ v'

`D_ij = exp(g_{j+1} + ... + g_i)` for `j ≤ i` in one document, else 0;
`e_i = D` from the chunk's start, `f_j = D` to its end. Each sum is of the
decays between the two positions, added up by a cumulative sum of the
masked decays (never a difference of two cumulative sums, which loses the
small terms beside a very negative one and overflows `exp` where the
mask would drop it); the exponent is masked before `exp`, so no masked
entry is ever `exp` of a large positive number.
"""

from keras import ops


def _chunks(x, chunk_size):
    """`(batch, T, ...)`, `T` a multiple of `chunk_size`, to `(chunks,
    batch, ..., chunk_size[, depth])`: the chunks first, for the scan."""
    shape = ops.shape(x)
    x = ops.reshape(x, (shape[0], -1, chunk_size) + tuple(shape[2:]))
    # (batch, chunks, C, heads[, depth]) -> (chunks, batch, heads, C[, depth])
    order = (1, 0, 3, 2, 4) if len(shape) == 4 else (1, 0, 3, 2)
    return ops.transpose(x, order)


def _decays(g, reset):
    """`D (…, C, C)`, `e (…, C)` (from the chunk's start) and the decay of
    the state over the whole chunk, `(…)`, of `g (…, C)`."""
    size = ops.shape(g)[-1]
    rows = ops.arange(size)[:, None]
    cols = ops.arange(size)[None, :]
    strict = rows > cols
    connected = rows >= cols
    first = None
    if reset is not None:
        document = ops.cumsum(reset, axis=-1)
        connected = connected & (
            document[..., :, None] == document[..., None, :]
        )
        first = document == 0
    # exponent_ij = g_{j+1} + ... + g_i: a cumulative sum down the rows of
    # the decays below the diagonal.
    exponent = ops.cumsum(ops.where(strict, g[..., :, None], 0.0), axis=-2)
    decay = ops.where(
        connected, ops.exp(ops.where(connected, exponent, 0.0)), 0.0
    )
    start = ops.exp(ops.cumsum(g, axis=-1))
    if first is not None:
        start = ops.where(first, start, 0.0)
    return decay, start, start[..., -1]


def _pad(x, pad):
    """`x` with `pad` zeros after its positions (axis 1)."""
    if pad == 0:
        return x
    widths = [[0, 0], [0, pad]] + [[0, 0]] * (len(x.shape) - 2)
    return ops.pad(x, widths)


def chunk_gated_delta_rule(
    query, key, value, g, beta, state, reset, chunk_size
):
    """The gated delta rule, `chunk_size` positions at a time.

    Args, returns: as `recurrent_gated_delta_rule`; `chunk_size` is the
    number of positions of a chunk (the input is padded to a multiple
    with positions that neither decay nor write).
    """
    length = query.shape[1]
    pad = -length % chunk_size
    query, key, value, g, beta = (
        _chunks(_pad(x, pad), chunk_size) for x in (query, key, value, g, beta)
    )
    if reset is not None:
        reset = _chunks(_pad(reset[..., None], pad), chunk_size)
    decay, start, across = _decays(g, reset)
    size = ops.shape(g)[-1]
    strict = ops.arange(size)[:, None] > ops.arange(size)[None, :]
    keys = ops.einsum("...id,...jd->...ij", key, key)
    lower = ops.where(strict, keys * decay * beta[..., :, None], 0.0)
    inverse = ops.solve_triangular(
        lower + ops.eye(size, dtype=lower.dtype),
        ops.eye(size, dtype=lower.dtype),
        lower=True,
    )
    written = ops.matmul(inverse, value * beta[..., None])
    carried = ops.matmul(inverse, key * (beta * start)[..., None])
    to_end = key * decay[..., -1, :][..., None]

    def step(carry, inputs):
        state, _ = carry
        u, w, k, a = inputs
        v = u - ops.matmul(w, state)
        end = state * a[..., None, None] + ops.einsum(
            "...ik,...iv->...kv", k, v
        )
        return (end, v), (state, v)

    # The carry holds the chunk's writes beside the state: Keras's scan on
    # TensorFlow needs what each step emits to be shaped as the carry.
    (state, _), (states, writes) = ops.scan(
        step,
        (state, ops.zeros_like(written[0])),
        (written, carried, to_end, across),
    )
    scores = ops.einsum("...id,...jd->...ij", query, key) * decay
    output = ops.matmul(query * start[..., None], states)
    output = output + ops.matmul(scores, writes)
    # (chunks, batch, heads, C, Dv) -> (batch, T, heads, Dv)
    output = ops.transpose(output, (1, 0, 3, 2, 4))
    shape = ops.shape(output)
    output = ops.reshape(output, (shape[0], -1, shape[3], shape[4]))
    return output[:, :length], state
