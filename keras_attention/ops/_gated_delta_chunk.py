"""The gated delta rule in chunks: the parallel form for training and
long inputs (private; `keras_attention.ops.gated_delta_rule`).

The WY representation of Yang, Kautz & Hatamizadeh (2024, section 3):
inside a chunk of `C` positions the writes `v'` solve one unit
lower-triangular system,

    (I + L) v' = β ∘ V − (β ∘ e ∘ K) S₀,   L_ij = β_i (k_i·k_j) D_ij (i > j)

so `v' = u − w S₀` with `u = T (β ∘ V)`, `w = T (β ∘ e ∘ K)`, `T = (I +
L)⁻¹`, all chunks at once. Only the state passes from chunk to chunk, in
one `keras.ops.scan` over the chunks (the compiled graph does not grow
with the length; `_gated_delta_scan.py`, which writes out its gradient):

    o = (Q ∘ e) S₀ + (Q Kᵀ ∘ D) v'
    S ← exp(G_C) S₀ + (K ∘ f)ᵀ v'

`D_ij = exp(g_{j+1} + ... + g_i)` for `j ≤ i` in one document, else 0;
`e_i = D` from the chunk's start, `f_j = D` to its end. Each sum is of the
decays between the two positions, added up from the masked decays (one
product with a constant of zeros and ones per head, a cumulative sum per
key channel; never a difference of two cumulative sums, which loses the
small terms beside a very negative one and overflows `exp` where the
mask would drop it); the exponent is masked before `exp`, so no masked
entry is ever `exp` of a large positive number.

With a decay per key channel (Kimi Delta Attention, KDA: `g (…, Dk)`),
`D`, `e` and `f` get a channel axis and scale the key channels one by
one: `k_i·k_j D_ij` becomes `Σ_d k_id k_jd D_ij(d)`, `exp(G_C) S₀` scales
each row of `S₀`. `D` is then `(C, C, Dk)` per chunk, `Dk` times the
memory of the per-head `D`, the price of the same exactness.
"""

import keras
from keras import ops

from keras_attention.ops._gated_delta_scan import final_state
from keras_attention.ops._gated_delta_scan import step_scan


def _chunks(x, chunk_size):
    """`(batch, T, ...)`, `T` a multiple of `chunk_size`, to `(chunks ·
    batch, ..., chunk_size[, depth])`: the chunks first, for the scan,
    in one axis with the batch. With the two apart, XLA's CPU backend
    kept each of the query, key and value twice in this layout (a copy
    for the products, whose batch axes it merges, and one for the
    element-wise work): 6 MiB more at T = 2048, 4 heads of 64
    (BENCHMARKS.md, "Gated DeltaNet"). `_unmerge` splits them for the
    scan."""
    shape = ops.shape(x)
    x = ops.reshape(x, (shape[0], -1, chunk_size) + tuple(shape[2:]))
    # (batch, chunks, C, heads[, depth]) -> (chunks, batch, heads, C[, depth])
    order = (1, 0, 3, 2, 4) if len(shape) == 4 else (1, 0, 3, 2)
    x = ops.transpose(x, order)
    return ops.reshape(x, (-1,) + tuple(ops.shape(x)[2:]))


def _unmerge(x, batch):
    """`(chunks · batch, ...)` to `(chunks, batch, ...)`."""
    return ops.reshape(x, (-1, batch) + tuple(ops.shape(x)[1:]))


def _decays(g, reset, channels):
    """`D`, `e` (from the chunk's start), `f` (to its end) and the decay
    of the state over the whole chunk, of `g (…, C)`: `(…, C, C)`, `(…,
    C)`, `(…, C)`, `(…)`; or, with `channels`, of `g (…, C, Dk)`: `(…, C,
    C, Dk)`, `(…, C, Dk)`, `(…, C, Dk)`, `(…, Dk)`, one decay per key
    channel."""
    size = ops.shape(g)[-2 if channels else -1]
    rows = ops.arange(size)[:, None]
    cols = ops.arange(size)[None, :]
    strict = rows > cols
    connected = lower = rows >= cols
    first = None
    if reset is not None:
        document = ops.cumsum(reset, axis=-1)
        connected = connected & (
            document[..., :, None] == document[..., None, :]
        )
        first = document == 0
    # exponent_ij = g_{j+1} + ... + g_i: a sum down the rows of the decays
    # below the diagonal; per head one product, per key channel (a
    # channel axis after the pair's) a cumulative sum.
    rows_axis = -3 if channels else -2
    if channels:
        strict, connected = strict[..., None], connected[..., None]
        first = _lift(first)
        lifted = ops.where(strict, g[..., :, None, :], 0.0)
        exponent = ops.cumsum(lifted, axis=rows_axis)
    else:
        exponent = _running_sum(g, lower, strict)
    decay = ops.where(
        connected, ops.exp(ops.where(connected, exponent, 0.0)), 0.0
    )
    start = ops.exp(ops.cumsum(g, axis=rows_axis + 1))
    if first is not None:
        start = ops.where(first, start, 0.0)
    if channels:
        return decay, start, decay[..., -1, :, :], start[..., -1, :]
    return decay, start, decay[..., -1, :], start[..., -1]


def _running_sum(g, lower, strict):
    """`exponent_ij = g_{j+1} + ... + g_i` (0 for `i ≤ j`) of `g (…, C)`:
    `Σ_r [r ≤ i] g_r [r > j]`, one product with a constant of zeros and
    ones. XLA's CPU backend lowers a cumulative sum over `(…, C, C)` to a
    reduce-window, quadratic in `C`, and its gradient to another
    (BENCHMARKS.md, "Gated DeltaNet"). The same terms summed in another
    order: equal up to float rounding. A decay below `-1e30` (`-inf`:
    forget everything) counts as `-1e30`, as `0 · -inf` is not a number;
    `exp` of either is 0."""
    terms = ops.where(lower, ops.maximum(g, -1e30)[..., None, :], 0.0)
    return ops.matmul(terms, ops.cast(strict, g.dtype))


def _lift(x):
    """`x (…)` with an axis of one after: a decay per head beside
    the key channels."""
    return None if x is None else x[..., None]


def _pairs(rows, cols, decay, channels):
    """`Σ_d rows_id cols_jd D_ij(d)` `(…, C, C)`: the decayed products of
    two chunks of vectors."""
    if channels:
        return ops.einsum(
            "...ijd,...jd->...ij", rows[..., :, None, :] * decay, cols
        )
    return ops.einsum("...id,...jd->...ij", rows, cols) * decay


def _transpose(x):
    return ops.swapaxes(x, -1, -2)


def _inverse(lower):
    """`(I + lower)⁻¹`, `lower (…, C, C)` strictly lower triangular.

    On JAX by `_doubling_inverse`, matrix products: XLA's CPU backend
    calls LAPACK's `trsm` for a triangular solve, whose OpenBLAS threads
    compete with XLA's own for the cores (forward and backward at T =
    2048 on two shared cores: the median call 1106 ms with the solve, 110
    with the products; BENCHMARKS.md, "Gated DeltaNet"). TensorFlow's
    solve (Eigen) and PyTorch's were as fast as the products or faster:
    they keep it."""
    if keras.backend.backend() == "jax":
        return _doubling_inverse(lower)
    eye = ops.eye(lower.shape[-1], dtype=lower.dtype)
    return ops.solve_triangular(lower + eye, eye, lower=True)


def _doubling_inverse(lower):
    """`(I + lower)⁻¹` by blocks of doubling size, as LAPACK's recursive
    `trtri`: the inverses of the diagonal blocks of size `b` give those
    of size `2b`,

        [[A, 0], [C, B]]⁻¹ = [[A⁻¹, 0], [−B⁻¹ C A⁻¹, B⁻¹]],

    from blocks of one (1: the diagonal is the identity's) to the whole
    matrix, all blocks of a size at once: `log2 C` rounds of two batched
    products. A size that is not a power of two is padded with the
    identity's rows and columns, which leave the inverse's block as
    it is."""
    size = lower.shape[-1]
    n = 1
    while n < size:
        n *= 2
    if n != size:
        widths = [[0, 0]] * (len(lower.shape) - 2) + [[0, n - size]] * 2
        lower = ops.pad(lower, widths)
    batch = tuple(ops.shape(lower)[:-2])
    # (…, n / b, b, b): the inverses of the diagonal blocks of size b.
    blocks = ops.ones(batch + (n, 1, 1), lower.dtype)
    b = 1
    while b < n:
        m = n // (2 * b)
        grid = ops.reshape(lower, batch + (m, 2 * b, m, 2 * b))
        # The diagonal blocks of size 2b, `(…, m, 2b, 2b)`, and their
        # lower left quarter `C`.
        diagonal = ops.moveaxis(ops.diagonal(grid, axis1=-4, axis2=-2), -1, -3)
        corner = diagonal[..., b:, :b]
        pairs = ops.reshape(blocks, batch + (m, 2, b, b))
        first, second = pairs[..., 0, :, :], pairs[..., 1, :, :]
        below = -ops.matmul(ops.matmul(second, corner), first)
        top = ops.concatenate([first, ops.zeros_like(first)], axis=-1)
        bottom = ops.concatenate([below, second], axis=-1)
        blocks = ops.concatenate([top, bottom], axis=-2)
        b *= 2
    inverse = ops.reshape(blocks, batch + (n, n))
    return inverse[..., :size, :size]


@ops.custom_gradient
def _solve(lower, right):
    """`(I + lower)⁻¹ right`, `lower` strictly lower triangular: the
    inverse (`_inverse`), then one product (faster on the three backends
    than solving for `right`, twice as many columns; BENCHMARKS.md,
    "Gated DeltaNet").

    The gradient is written out: with `X = (I + L)⁻¹ R` and `Ḡ` its
    upstream gradient, `R̄ = (I + L)⁻ᵀ Ḡ` and `L̄ = −R̄ Xᵀ` (the gradient
    for a dense `L`; the caller keeps the strict lower part), two
    products where the backends' own gradient of the solve takes a
    second solve and more products."""
    inverse = _inverse(lower)
    solved = ops.matmul(inverse, right)

    def grad(*args, upstream=None):
        # TensorFlow and JAX pass the upstream gradient alone, PyTorch the
        # inputs and `upstream=`.
        if upstream is None:
            (upstream,) = args
        d_right = ops.matmul(_transpose(inverse), upstream)
        return -ops.matmul(d_right, _transpose(solved)), d_right

    return solved, grad


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
    channels = len(g.shape) == 4
    pad = -length % chunk_size
    query, key, value, g, beta = (
        _chunks(_pad(x, pad), chunk_size) for x in (query, key, value, g, beta)
    )
    if reset is not None:
        reset = _chunks(_pad(reset[..., None], pad), chunk_size)
    decay, start, end, across = _decays(g, reset, channels)
    # Per head, each decay multiplies whole vectors (an axis of one after
    # it); per key channel, their entries.
    lift = (lambda x: x) if channels else _lift
    size = ops.shape(query)[-2]
    strict = ops.arange(size)[:, None] > ops.arange(size)[None, :]
    keys = _pairs(key, key, decay, channels)
    lower = ops.where(strict, keys * beta[..., :, None], 0.0)
    # `[u, w] = (I + L)⁻¹ β ∘ [V, e ∘ K]`, one product.
    b = beta[..., None]
    solved = _solve(
        lower, ops.concatenate([value * b, key * lift(start) * b], axis=-1)
    )
    to_end = key * lift(end)
    # The state's rows (the key axis) decay: `(…, 1, 1)` or `(…, Dk, 1)`.
    across = lift(across)[..., None]

    # `[S₀; v']` per chunk: the output `(Q ∘ e) S₀ + (Q Kᵀ ∘ D) v'` is
    # one product with `[Q ∘ e, Q Kᵀ ∘ D]`. The scan takes `[u, w]`
    # whole and each step its chunk's halves: no copy of each half.
    batch = ops.shape(state)[0]
    to_end, across = _unmerge(to_end, batch), _unmerge(across, batch)
    stacked = step_scan(state, _unmerge(solved, batch), to_end, across)
    scores = _pairs(query, key, decay, channels)
    reads = ops.concatenate([query * lift(start), scores], axis=-1)
    merged = ops.reshape(stacked, (-1,) + tuple(ops.shape(stacked)[2:]))
    output = _unmerge(ops.matmul(reads, merged), batch)
    # (chunks, batch, heads, C, Dv) -> (batch, T, heads, Dv)
    output = ops.transpose(output, (1, 0, 3, 2, 4))
    shape = ops.shape(output)
    output = ops.reshape(output, (shape[0], -1, shape[3], shape[4]))
    return output[:, :length], final_state(stacked, to_end, across)
