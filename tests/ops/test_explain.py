"""ops/explain.py: the explained path is the one that runs, every lane:
`explain_attention` against `flex_attention`, and each multi-head
layer's `explain` against its call, on every kernel this backend has.
"""

import keras_attention
from keras_attention.ops import _native_plan
from keras_attention.ops import mods
from keras_attention.ops.plan import fused_path
from tests.layers.test_keras_hooks import _Identity
from tests.layers.test_options import MLA

CAUSAL = mods.causal()


def _ops_cases(rand):
    """`(path, (q, k, v, kwargs))`: on PyTorch's CPU SDPA takes the
    first three."""
    q, kv = rand(1, 8, 4, 4), rand(1, 8, 2, 4)
    sdpa = _native_plan.platform() == ("torch", "cpu")
    return [
        ("sdpa" if sdpa else fused_path(), (q, kv, kv, {})),
        ("sdpa" if sdpa else "fused", (q, kv, kv, {"return_lse": True})),
        ("sdpa" if sdpa else "dense", (q, kv, kv, {"mask_mod": CAUSAL})),
        (fused_path(), (q, kv, kv, {"chunk_size": 0})),
        ("fused", (q, kv, kv, {"chunk_size": 0, "return_lse": True})),
        ("dense", (q, kv, kv, {"score_mod": mods.soft_cap(5.0)})),
        ("blocks", (q, kv, kv, {"chunk_size": 4})),
    ]


def test_explain_attention_names_the_kernel_that_runs(rand, plans):
    for path, (q, k, v, kwargs) in _ops_cases(rand):
        explained = keras_attention.ops.explain_attention(q, k, v, **kwargs)
        plans.clear()
        keras_attention.ops.flex_attention(q, k, v, **kwargs)
        assert explained.path == plans[0].path == path, (path, kwargs)
        assert explained.reason == plans[0].reason
        assert isinstance(explained.step_bytes, int)
        assert set(explained.alternatives) | {kwargs.get("chunk_size")} == {
            None,
            0,
            512,
            kwargs.get("chunk_size"),
        }


def _layer_cases():
    ka = keras_attention
    return {
        "fused": (ka.MultiHeadAttention(2, 4), {}),
        "dense": (
            ka.MultiHeadAttention(2, 4),
            {"return_attention_scores": True},
        ),
        "blocks": (ka.MultiHeadAttention(2, 4, chunk_size=4), {}),
        "self": (ka.SelfAttention(2, attention_width=3), {}),
        "gqa": (ka.GroupedQueryAttention(4, 4, 2, chunk_size=4), {}),
        "mla": (ka.MultiHeadLatentAttention(2, **MLA), {}),
        "hooked": (_Identity(2, 4), {"use_causal_mask": True}),
    }


def test_layer_explain_names_the_kernel_that_runs(rand, plans):
    x = rand(2, 8, 8)
    for name, (layer, kwargs) in _layer_cases().items():
        args = (x,) if name in ("self", "mla") else (x, x)
        explained = layer.explain(*args, **kwargs)
        plans.clear()
        layer(*args, **kwargs)
        assert len(plans) == 1, name
        assert explained.path == plans[0].path, name
        assert explained.block_size == plans[0].block_size, name
    assert "blocks" in str(_layer_cases()["blocks"][0].explain(x, x))
