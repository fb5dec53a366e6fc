"""ops/plan.py: the one path planner, its threshold and its refusals.

The layers' choices follow from it: tests/layers/test_chunking.py,
test_grouped_query.py and test_cache.py check the paths it picks give the
dense results, with spies on the kernels.
"""

import pytest

from keras_attention import ops as ka_ops
from keras_attention.ops import plan as plan_lib

plan_attention = ka_ops.plan_attention
SMALL = (2, 4, 16, 16)
# 4 · 1 · 8 · 8192 · 8192 bytes: exactly the threshold.
AT_THRESHOLD = (1, 8, 8192, 8192)


def test_dense_bytes_is_the_one_estimate():
    assert plan_lib.dense_bytes((2, 4, 16, 8)) == 4 * 2 * 4 * 16 * 8
    assert plan_lib.dense_bytes((None, 4, 16, 8), 12) == 12 * 4 * 16 * 8
    assert plan_lib.dense_bytes((2, 4, None, 8)) is None
    assert plan_lib.dense_bytes(AT_THRESHOLD) == plan_lib.AUTO_CHUNK_MIN_BYTES


@pytest.mark.parametrize(
    "flags, path",
    [
        ({}, "fused"),
        ({"weights": True}, "dense"),
        ({"dropout": True}, "dense"),
        ({"logits_hook": "attention_activation"}, "dense"),
        ({"flash": True}, "flash"),
    ],
)
def test_dense_paths_of_a_dot_product(flags, path):
    assert plan_attention("dot", SMALL, None, **flags).path == path
    assert plan_attention("dot", SMALL, 0, **flags).path == path


def test_other_forms_are_dense_below_the_threshold():
    assert plan_attention("additive", SMALL).path == "dense"
    assert plan_attention(None, AT_THRESHOLD).path == "dense"


def test_the_threshold_and_the_bytes_per_logit():
    below = (1, 8, 8192, 8191)
    assert plan_attention("dot", below).path == "fused"
    chosen = plan_attention("dot", AT_THRESHOLD)
    assert chosen == ka_ops.Plan("blocks", (512, 512), False)
    # An additive score's units multiply the bytes: 16 units · 4 bytes.
    shapes = (1, 8, 2048, 2048)
    assert plan_attention("additive", shapes, bytes_per_logit=4).path == (
        "dense"
    )
    assert plan_attention("additive", shapes, bytes_per_logit=64).path == (
        "blocks"
    )
    # Unknown lengths stay dense.
    assert plan_attention("dot", (1, 8, None, 8192)).path == "fused"
    # Weights or dropout keep the dense path however large.
    assert plan_attention("dot", AT_THRESHOLD, weights=True).path == "dense"
    assert plan_attention("dot", AT_THRESHOLD, dropout=True).path == "dense"


@pytest.mark.parametrize(
    "flags, flex",
    [
        ({}, False),
        ({"mods": True}, True),
        ({"tensor_mask": True}, True),
        ({"cached": True}, True),
        ({"grouped": True}, True),
    ],
)
def test_blocks_go_through_flex_where_only_a_mask_mod_reads_the_masks(
    flags, flex
):
    chosen = plan_attention("dot", SMALL, 4, **flags)
    assert (chosen.path, chosen.block_size, chosen.flex) == (
        "blocks",
        (4, 4),
        flex,
    )
    assert plan_attention("additive", SMALL, 4).flex is False


def test_mods_run_dense_in_flex_unless_blocked():
    assert plan_attention("dot", SMALL, mods=True) == ka_ops.Plan(
        "dense", None, True
    )
    assert plan_attention("dot", SMALL, 0, mods=True, weights=True).flex


def test_an_automatic_cache_of_an_additive_score_stays_dense():
    chosen = plan_attention("additive", AT_THRESHOLD, cached=True)
    assert chosen.path == "dense"


@pytest.mark.parametrize(
    "args, flags, match",
    [
        (("additive", SMALL), {"mods": True}, "need a dot-product score"),
        (("dot", SMALL), {"mods": True, "flash": True}, "need a dot-product"),
        (("dot", SMALL), {"flash": True, "weights": True}, "flash attention"),
        (("dot", SMALL, 4), {"flash": True}, "bypasses flash attention"),
        (
            ("dot", SMALL, 4),
            {"logits_hook": "overridden _compute_attention"},
            "bypasses flash attention",
        ),
        (
            ("dot", SMALL, 4),
            {"logits_hook": "penalty_coefficient"},
            "does not support `penalty_coefficient`",
        ),
        (("dot", SMALL, 4), {"weights": True}, "not `return_attention"),
        (
            ("additive", SMALL, 4),
            {"cached": True, "score": "additive_score"},
            "cached call.*score='additive_score'",
        ),
        (
            ("additive", SMALL, 4),
            {"tensor_mask": True},
            "not `attention_mask`.*chunk_size=4",
        ),
    ],
)
def test_every_refusal_names_what_it_received(args, flags, match):
    with pytest.raises(ValueError, match=match):
        plan_attention(*args, **flags)


def test_a_symbolic_dimension_counts_as_unknown():
    """JAX's shape inference hands the batch as a `dynamic_dimension`."""

    class Symbolic:
        pass

    assert plan_attention("dot", (Symbolic(), 4, 8, 8)).path == "fused"
    assert plan_lib.dense_bytes((Symbolic(), 4, 8, 8)) == 4 * 4 * 8 * 8


def test_a_dot_product_reads_a_tensor_mask_in_blocks():
    assert plan_attention("dot", SMALL, 4, tensor_mask=True).flex


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
        # An H200 (139 GiB): 8 GiB of logits at N = 16384 stay dense (the
        # blocks measured 1.2-45x slower there); 128 GiB at 65536 do not.
        (139 * 2**30, 16384, "fused"),
        (139 * 2**30, 65536, "blocks"),
        # A 16 GiB card: a quarter is 4 GiB, so 8 GiB take the blocks.
        (16 * 2**30, 16384, "blocks"),
        # A small card never lowers the CPU's threshold.
        (2 * 2**30, 4096, "fused"),
    ],
)
def test_on_an_accelerator_the_blocks_wait_for_a_share_of_its_memory(
    monkeypatch, memory, length, path
):
    monkeypatch.setattr(plan_lib, "accelerator_memory", lambda: memory)
    shapes = (1, 8, length, length)
    assert plan_attention("dot", shapes, None).path == path
