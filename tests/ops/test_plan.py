"""ops/plan.py: the one path planner, its estimate and its refusals.

The layers' and `flex_attention`'s choices follow from it: one plan per
call (tests/ops/test_engine.py counts them on every path), and the paths
it picks give the dense results (tests/layers/test_chunking.py,
test_grouped_query.py, test_cache.py).
"""

import pytest

from keras_attention import ops as ka_ops
from keras_attention.ops import plan as plan_lib
from keras_attention.ops.plan import fused_path

# The fused kernel the planner takes on this backend (Keras's on PyTorch).
FUSED = fused_path()

plan_attention = ka_ops.plan_attention
SMALL = (2, 4, 16, 16)
# 4 heads of 8192 × 8192 logits: 1 GiB; a training step holds four times
# that, an inference step twice.
LONG = (1, 4, 8192, 8192)


def test_dense_bytes_and_the_step_estimate():
    assert plan_lib.dense_bytes((2, 4, 16, 8)) == 4 * 2 * 4 * 16 * 8
    assert plan_lib.dense_bytes((None, 4, 16, 8), 12) == 12 * 4 * 16 * 8
    assert plan_lib.dense_bytes((2, 4, None, 8)) is None
    logits = plan_lib.dense_bytes(LONG)
    assert logits == 2**30
    # Forward: the logits and the weights; a mod's temporaries; backward:
    # the gradients of the weights and of the logits.
    assert plan_lib.step_bytes(LONG, backward=False) == 2 * logits
    assert plan_lib.step_bytes(LONG) == 4 * logits
    assert plan_lib.step_bytes(LONG, mods=True) == 5 * logits
    assert plan_lib.step_bytes((1, 4, None, 8)) is None


@pytest.mark.parametrize(
    "limits, lengths, size, offset, share",
    [
        ((None, None), (2048, 2048), (512, 512), 0, 1.0),
        # Causal: 10 of the 16 pairs of blocks.
        ((None, 0), (2048, 2048), (512, 512), 0, 10 / 16),
        # A window of 256 either side: the diagonal and its neighbours.
        ((255, 255), (2048, 2048), (512, 512), 0, 10 / 16),
        ((255, 0), (4096, 4096), (512, 512), 0, 15 / 64),
        # One query at position 9 of a cache of 16, causal, blocks of 4:
        # the first three key blocks.
        ((None, 0), (1, 16), (4, 4), 9, 3 / 4),
    ],
)
def test_band_share_counts_the_pairs_of_blocks_a_band_keeps(
    limits, lengths, size, offset, share
):
    assert plan_lib.band_share(limits, lengths, size, offset) == share


@pytest.mark.parametrize(
    "flags, path",
    [
        ({}, FUSED),
        ({"weights": True}, "dense"),
        ({"dropout": True}, "dense"),
        ({"mods": True}, "dense"),
        ({"logits_hook": "attention_activation"}, "dense"),
        ({"flash": True}, "flash"),
        ({"flash": True, "native_flash": False}, FUSED),
        ({"lse": True}, "fused"),
        ({"hook": "_compute_attention"}, FUSED),
        ({"hook": "_compute_attention", "weights": True}, "dense"),
    ],
)
def test_dense_kernels_of_a_dot_product(flags, path):
    assert plan_attention("dot", SMALL, None, **flags).path == path
    assert plan_attention("dot", SMALL, 0, **flags).path == path


def test_other_forms_are_dense_below_the_threshold():
    assert plan_attention("additive", SMALL).path == "dense"
    assert plan_attention(None, LONG).path == "dense"


def test_the_automatic_blocks_are_512_and_256_on_jax_where_they_skip():
    import keras

    skipping = 256 if keras.backend.backend() == "jax" else 512
    assert plan_lib.auto_chunk_size() == skipping
    assert plan_lib.auto_chunk_size(skips=False) == 512
    # Every pair visited: 512 on every backend.
    assert plan_attention("dot", LONG).block_size == (512, 512)
    assert plan_attention("dot", LONG, kept=1.0).block_size == (512, 512)
    # A band or a mask that keeps a share of the pairs of a sequence
    # shorter than 4096: JAX's are finer ...
    middle = (1, 4, 2048, 2048)
    causal = plan_attention("dot", middle, kept=0.56)
    assert causal.path == "blocks"
    assert causal.block_size == (skipping, skipping)
    # ... and from 4096 on, 512 again.
    assert plan_lib.FINE_BLOCKS_BELOW == 4096
    assert plan_attention("dot", LONG, kept=0.53).block_size == (512, 512)
    edge = plan_attention("dot", (1, 4, 4096, 4096), kept=0.53)
    assert edge.block_size == (512, 512)
    # An explicit chunk size or a block mask's size is kept.
    assert plan_attention("dot", LONG, 128).block_size == (128, 128)
    assert plan_attention("dot", LONG, 128, kept=0.5).block_size == (128, 128)


def test_a_band_as_narrow_as_256_keys_runs_in_blocks_of_256():
    assert plan_lib.NARROW_BAND == 256
    # A causal window of 256 keys (`(255, 0)`), 23% of the pairs of 512's.
    window = plan_attention("dot", LONG, kept=0.23, limits=(255, 0))
    assert window.path == "blocks"
    assert window.block_size == (256, 256)
    # Both sides count: 128 keys back and 127 ahead are 256 keys, one
    # more is not.
    assert plan_attention(
        "dot", LONG, kept=0.1, limits=(128, 127)
    ).block_size == (256, 256)
    assert plan_attention(
        "dot", LONG, kept=0.1, limits=(128, 128)
    ).block_size == (512, 512)
    # A causal band (no left limit) or a wider window keeps 512's.
    for limits in [(None, 0), (511, 0), (None, None)]:
        plan = plan_attention("dot", LONG, kept=0.5, limits=limits)
        assert plan.block_size == (512, 512), limits
    # An explicit chunk size is kept.
    kept = plan_attention("dot", LONG, 512, kept=0.23, limits=(255, 0))
    assert kept.block_size == (512, 512)


@pytest.mark.parametrize("limits", [(1,), (None, 0.5), (True, 0), 3])
def test_limits_not_a_band_are_refused(limits):
    with pytest.raises(ValueError, match="Received: limits="):
        plan_attention("dot", LONG, limits=limits)


@pytest.fixture
def bytes_rule_alone(monkeypatch):
    """The byte and sparsity rules without JAX's CPU rule (tested below)."""
    monkeypatch.setattr(plan_lib, "JAX_CPU_MIN_LENGTH", 2**40)


def test_the_step_estimate_decides_the_automatic_choice(bytes_rule_alone):
    # Training at N = 8192: 4 GiB of `(Tq, Tk)` tensors, past 1 GiB.
    chosen = plan_attention("dot", LONG)
    assert chosen.path == "blocks"
    assert chosen.block_size == (plan_lib.auto_chunk_size(skips=False),) * 2
    assert "4.0 GiB" in chosen.reason
    # Inference at N = 4096 holds 512 MiB: dense.
    half = (1, 4, 4096, 4096)
    assert plan_attention("dot", half, backward=False).path == FUSED
    # The same step differentiated holds 1 GiB, not more: dense; with a
    # mod's temporaries, 1.25 GiB: the blocks.
    assert plan_attention("dot", half).path == FUSED
    assert plan_attention("dot", half, mods=True).path == "blocks"
    # An additive score's units multiply the bytes: 16 units · 4 bytes.
    shapes = (1, 8, 1024, 1024)
    assert plan_attention("additive", shapes, bytes_per_logit=4).path == (
        "dense"
    )
    assert plan_attention("additive", shapes, bytes_per_logit=64).path == (
        "blocks"
    )
    # Unknown lengths stay dense.
    assert plan_attention("dot", (1, 8, None, 8192)).path == FUSED
    # An overridden hook is called however large; so are the weights
    # and the dropout.
    assert plan_attention("dot", LONG, hook="_compute_attention").path == (
        FUSED
    )
    assert plan_attention("dot", LONG, weights=True).path == "dense"
    assert plan_attention("dot", LONG, dropout=True).path == "dense"


def test_a_band_or_block_mask_that_leaves_few_blocks_takes_them(
    bytes_rule_alone,
):
    n = plan_lib.SPARSE_MIN_LENGTH
    shapes = (1, 4, n, n)
    sparse = plan_lib.SPARSE_MAX_SHARE
    assert plan_attention("dot", shapes, kept=sparse).path == "blocks"
    assert "skip" in plan_attention("dot", shapes, kept=sparse).reason
    assert plan_attention("dot", shapes, kept=sparse + 0.01).path == FUSED
    # Shorter sequences have too few blocks for the skipping to pay.
    short = (1, 4, n // 2, n // 2)
    assert plan_attention("dot", short, kept=0.1).path == FUSED
    # A block mask given to `flex_attention` is always read in blocks.
    chosen = plan_attention("dot", SMALL, block_size=(4, 8))
    assert (chosen.path, chosen.block_size) == ("blocks", (4, 8))


def test_jax_on_a_cpu_takes_the_blocks_for_long_steps_it_maps_afresh():
    """JAX's CPU: from 1024 queries and keys, a dense step past 32 MiB runs
    in blocks (its buffers are mapped and faulted in on every call); other
    backends keep the byte rule."""
    import keras

    jax = keras.backend.backend() == "jax"
    wide = (1, 8, 1024, 1024)  # 64 MiB of logits and weights
    chosen = plan_attention("dot", wide, backward=False)
    assert chosen.path == ("blocks" if jax else FUSED), chosen.reason
    if jax:
        assert "64.0 MiB would be mapped afresh" in chosen.reason
        assert chosen.block_size == (512, 512)
    # 32 MiB is not past it; nor is a short sequence in a large batch.
    narrow = (1, 4, 1024, 1024)
    assert plan_attention("dot", narrow, backward=False).path == FUSED
    assert plan_attention("dot", (32, 8, 512, 512)).path == FUSED
    assert plan_attention("dot", wide, chunk_size=0).path == FUSED


def test_a_positive_chunk_size_is_the_block_size():
    chosen = plan_attention("dot", SMALL, 4, mods=True, tensor_mask=True)
    assert (chosen.path, chosen.block_size) == ("blocks", (4, 4))
    # Additive scores read masks, mods and caches in the blocks too.
    assert plan_attention("additive", SMALL, 4, cached=True).path == "blocks"
    assert plan_attention("additive", SMALL, 4, mods=True).path == "blocks"


@pytest.mark.parametrize(
    "args, flags, match",
    [
        (("dot", SMALL), {"mods": True, "flash": True}, "need the logits"),
        (
            ("dot", SMALL),
            {"mods": True, "logits_hook": "attention_activation"},
            "need the logits",
        ),
        (("dot", SMALL), {"flash": True, "weights": True}, "flash attention"),
        (("dot", SMALL), {"flash": True, "dropout": True}, "Dropout is not"),
        (("additive", SMALL), {"flash": True}, "score='additive'"),
        (
            ("dot", SMALL),
            {"flash": True, "logits_hook": "penalty_coefficient"},
            "never forms the logits",
        ),
        (("dot", SMALL), {"flash": True, "lse": True}, "log-sum-exp"),
        (
            ("dot", SMALL),
            {"lse": True, "hook": "_masked_softmax"},
            "sinks need the log-sum-exp",
        ),
        (("dot", SMALL, 4), {"flash": True}, "bypasses flash attention"),
        (
            ("dot", SMALL, 4),
            {"hook": "_compute_attention"},
            "bypasses flash attention",
        ),
        (
            ("dot", SMALL, 4),
            {"logits_hook": "penalty_coefficient"},
            "does not support `penalty_coefficient`",
        ),
        (("dot", SMALL, 4), {"weights": True}, "not `return_attention"),
        (("dot", SMALL, 4), {"dropout": True}, "cannot apply dropout"),
        ((None, SMALL, 4), {"score": "location"}, "score='location'"),
        (
            ("dot", SMALL, 4),
            {"block_size": (8, 8)},
            "must match the block size",
        ),
        (("additive", SMALL), {"ring": True}, "a dot-product score"),
        (("dot", SMALL), {"ring": True, "cached": True}, "no cache"),
    ],
)
def test_every_refusal_names_what_it_received(args, flags, match):
    with pytest.raises(ValueError, match=match):
        plan_attention(*args, **flags)


def test_the_ring_names_its_blocks():
    chosen = plan_attention("dot", SMALL, ring=True)
    assert (chosen.path, chosen.block_size) == ("ring", (512, 512))
    assert plan_attention("dot", SMALL, 64, ring=True).block_size == (64, 64)


def test_a_symbolic_dimension_counts_as_unknown():
    """JAX's shape inference hands the batch as a `dynamic_dimension`."""

    class Symbolic:
        pass

    assert plan_attention("dot", (Symbolic(), 4, 8, 8)).path == FUSED
    assert plan_lib.dense_bytes((Symbolic(), 4, 8, 8)) == 4 * 4 * 8 * 8


@pytest.mark.parametrize(
    "args, flags, error, match",
    [
        (("cosine", SMALL), {}, ValueError, "Received: form='cosine'"),
        (("dot", (2, 4, 8)), {}, ValueError, "Received: shapes="),
        (("dot", (2, 4, 0, 8)), {}, ValueError, "Received: shapes="),
        (("dot", (2, 4, "8", 8)), {}, ValueError, "Received: shapes="),
        (("dot", SMALL, -1), {}, ValueError, "Received: chunk_size=-1"),
        (("dot", SMALL, True), {}, ValueError, "Received: chunk_size=True"),
        (("dot", SMALL), {"bytes_per_logit": 0}, ValueError, "=0"),
        (("dot", SMALL), {"logits_hook": 3}, TypeError, "logits_hook=3"),
        (("dot", SMALL), {"kept": 1.5}, ValueError, "Received: kept=1.5"),
    ],
)
def test_bad_arguments_are_named(args, flags, error, match):
    with pytest.raises(error, match=match):
        plan_attention(*args, **flags)


def test_this_machine_has_no_accelerator_so_the_cpu_threshold_holds():
    # The lanes run on CPUs: the byte rule above is the one they test.
    assert plan_lib.accelerator_memory() is None
    assert plan_lib.chunk_threshold() == plan_lib.AUTO_CHUNK_MIN_BYTES


@pytest.mark.parametrize(
    "memory, length, path",
    [
        # An H200 (139 GiB): a training step of 8 GiB of logits at
        # N = 16384 (32 GiB) stays dense (the blocks measured 1.2-45x
        # slower there); 128 GiB at 65536 do not.
        (139 * 2**30, 16384, FUSED),
        (139 * 2**30, 65536, "blocks"),
        # 128 GiB at 32768: more than a quarter, less than the whole card.
        (139 * 2**30, 32768, "blocks"),
        # A 16 GiB card: a quarter is 4 GiB, so 8 GiB (N = 8192) and 32 GiB
        # take the blocks.
        (16 * 2**30, 8192, "blocks"),
        (16 * 2**30, 16384, "blocks"),
        # A small card never lowers the CPU's threshold.
        (2 * 2**30, 2048, FUSED),
    ],
)
def test_on_an_accelerator_the_blocks_wait_for_a_share_of_its_memory(
    monkeypatch, memory, length, path
):
    monkeypatch.setattr(plan_lib, "accelerator_memory", lambda: memory)
    shapes = (1, 8, length, length)
    assert plan_attention("dot", shapes, None).path == path
    # There the band's skipping does not pay for the blocks either.
    assert plan_attention("dot", (1, 4, 2048, 2048), kept=0.2).path == FUSED
