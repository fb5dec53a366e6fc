"""ops/_native_plan.py: which kernel for which call on which device.

The device is faked (`_native_plan.platform` replaced), so the whole table
runs in every lane on this CPU: PyTorch with CUDA (SDPA, then compiled
FlexAttention), PyTorch on the CPU (SDPA where it serves the call, training
too; compiled FlexAttention for inference where it does not and this
package's kernel would take the blocks), JAX with a GPU (cuDNN,
then Pallas with segment ids), and the platforms with no native kernel.
Every refusal keeps this package's kernel and says why in the reason.
"""

import keras
import numpy as np
import pytest

from keras_attention.ops import _native_plan
from keras_attention.ops import plan_attention
from keras_attention.ops._native_plan import NativeCall
from keras_attention.ops.plan import fused_path

# The fused kernel the planner takes on this backend (Keras's on PyTorch).
FUSED = fused_path()

TORCH_GPU, TORCH_CPU = ("torch", "gpu"), ("torch", "cpu")
JAX_GPU, JAX_TPU = ("jax", "gpu"), ("jax", "tpu")
BF16 = dict(dtype="bfloat16", head_dim=64, value_dim=64)
LONG = (1, 4, 8192, 8192)
SHORT = (2, 4, 256, 256)


@pytest.fixture
def on(monkeypatch):
    """`on(platform)`: the planner believes it runs there."""

    def fake(platform):
        monkeypatch.setattr(_native_plan, "platform", lambda: platform)

    return fake


def _native(**fields):
    base = dict(lowers=True, backward=True, head_dim=64, value_dim=64)
    return NativeCall(**{**base, **fields})


# (platform, shapes, NativeCall fields, plan_attention flags, path)
TABLE = [
    # PyTorch, CUDA: SDPA for no mask or causal, FlexAttention otherwise.
    (TORCH_GPU, SHORT, {}, {}, "sdpa"),
    (TORCH_GPU, SHORT, {"masks": ("causal",)}, {}, "sdpa"),
    (TORCH_GPU, SHORT, {"masks": ("causal_window",)}, {}, "torch_flex"),
    (TORCH_GPU, SHORT, {"masks": ("document",)}, {}, "torch_flex"),
    (TORCH_GPU, SHORT, {"score_mod": True}, {}, "torch_flex"),
    (TORCH_GPU, SHORT, {"masks": ("key_padding",)}, {}, "torch_flex"),
    (
        TORCH_GPU,
        SHORT,
        {"masks": ("causal",), "offset": True},
        {},
        "torch_flex",
    ),
    (TORCH_GPU, SHORT, {"masks": ("causal",)}, {"lse": True}, "torch_flex"),
    (TORCH_GPU, LONG, {"masks": ("document",)}, {}, "torch_flex"),
    (TORCH_GPU, SHORT, {"masks": ("mask_mod",), "lowers": False}, {}, "dense"),
    (TORCH_GPU, SHORT, {"dtype": "float64", "score_mod": True}, {}, "dense"),
    # Keras's flash kernel, the weights, dropout and the hooks stay ours.
    (TORCH_GPU, SHORT, {}, {"flash": True}, "flash"),
    (TORCH_GPU, SHORT, {}, {"weights": True}, "dense"),
    (TORCH_GPU, SHORT, {}, {"dropout": True}, "dense"),
    (TORCH_GPU, SHORT, {}, {"logits_hook": "attention_activation"}, "dense"),
    (TORCH_GPU, SHORT, {}, {"hook": "_compute_attention"}, FUSED),
    (TORCH_GPU, SHORT, {}, {"chunk_size": 64}, "blocks"),
    (TORCH_GPU, SHORT, {}, {"chunk_size": 0}, FUSED),
    (TORCH_GPU, SHORT, {}, {"form": "additive"}, "dense"),
    # PyTorch on the CPU: inference where the blocks would run, from 2048.
    (
        TORCH_CPU,
        LONG,
        {"masks": ("document",), "backward": False},
        {},
        "torch_flex",
    ),
    (TORCH_CPU, LONG, {"masks": ("document",)}, {}, "blocks"),
    (
        TORCH_CPU,
        LONG,
        {"masks": ("document",), "backward": False},
        {"lse": True},
        "blocks",
    ),
    (
        TORCH_CPU,
        SHORT,
        {"masks": ("document",), "backward": False},
        {},
        "sdpa",
    ),
    (
        TORCH_CPU,
        (1, 4, 1024, 1024),
        {"backward": False},
        {"block_size": (128, 128)},
        "blocks",
    ),
    (TORCH_CPU, (1, 4, 2048, 2048), {"backward": False}, {}, "sdpa"),
    # PyTorch on the CPU: SDPA, training too, where it serves the call.
    (TORCH_CPU, SHORT, {}, {}, "sdpa"),
    (TORCH_CPU, LONG, {"masks": ("causal",)}, {}, "sdpa"),
    (TORCH_CPU, LONG, {"masks": ("causal",)}, {"lse": True}, "sdpa"),
    (TORCH_CPU, SHORT, {"masks": ("document",)}, {}, "sdpa"),
    (TORCH_CPU, LONG, {"masks": ("key_padding",)}, {}, "sdpa"),
    (TORCH_CPU, SHORT, {"masks": ("causal",), "offset": True}, {}, "sdpa"),
    (TORCH_CPU, SHORT, {"bias": True, "backward": False}, {}, "sdpa"),
    (TORCH_CPU, SHORT, {"bias": True}, {}, "dense"),
    (TORCH_CPU, SHORT, {"score_mod": True}, {}, "dense"),
    (TORCH_CPU, SHORT, {"value_dim": 32}, {}, FUSED),
    (TORCH_CPU, SHORT, {"cpu_lse": False}, {"lse": True}, "fused"),
    # JAX with a GPU: cuDNN in half precision, Pallas for documents.
    (JAX_GPU, SHORT, BF16, {}, "cudnn"),
    (JAX_GPU, SHORT, {**BF16, "masks": ("causal",)}, {}, "cudnn"),
    (
        JAX_GPU,
        SHORT,
        {**BF16, "masks": ("causal_window", "lengths")},
        {},
        "cudnn",
    ),
    (JAX_GPU, SHORT, {**BF16, "bias": True}, {}, "cudnn"),
    (JAX_GPU, (2, 4, 255, 255), {**BF16, "bias": True}, {}, "dense"),
    (JAX_GPU, SHORT, {"masks": ("causal",)}, {}, FUSED),
    (JAX_GPU, SHORT, {**BF16, "head_dim": 12, "value_dim": 12}, {}, FUSED),
    (JAX_GPU, SHORT, {**BF16, "masks": ("causal",)}, {"lse": True}, "fused"),
    (JAX_GPU, SHORT, {**BF16, "masks": ("band",)}, {}, FUSED),
    (JAX_GPU, SHORT, {"masks": ("causal", "document")}, {}, "pallas"),
    (JAX_GPU, SHORT, {"masks": ("document",), "grouped": True}, {}, "dense"),
    (JAX_GPU, (2, 4, 200, 200), {"masks": ("document",)}, {}, "dense"),
    (JAX_GPU, SHORT, {**BF16, "score_mod": True}, {}, "dense"),
    # No native kernel: JAX on a TPU or the CPU, TensorFlow.
    (JAX_TPU, SHORT, BF16, {}, FUSED),
    (("jax", "cpu"), SHORT, BF16, {}, FUSED),
    (("tensorflow", "cpu"), SHORT, BF16, {}, FUSED),
]


def _plan(shapes, fields, flags):
    """The plan of a call of `fields`, its flags set as the engine sets
    them: mods for mask mods, a score mod or a bias; a document mask
    keeping 1/8 of the blocks."""
    flags = dict(flags)
    form = flags.pop("form", "dot")
    chunk_size = flags.pop("chunk_size", None)
    masks = set(fields.get("masks", ()))
    mods = masks & {"document", "lengths", "mask_mod"}
    flags.setdefault(
        "mods", bool(mods or fields.get("score_mod") or fields.get("bias"))
    )
    if "document" in masks:
        flags.setdefault("kept", 0.125)
    return plan_attention(
        form, shapes, chunk_size, native=_native(**fields), **flags
    )


@pytest.mark.parametrize(
    "platform, shapes, fields, flags, path",
    TABLE,
    ids=[f"{p[0]}-{p[1]}-{i}" for i, (p, *_) in enumerate(TABLE)],
)
def test_the_dispatch_table(on, platform, shapes, fields, flags, path):
    on(platform)
    plan = _plan(shapes, fields, flags)
    assert plan.path == path, plan.reason
    if path in _native_plan.NATIVE_PATHS:
        assert plan.block_size is None
    else:
        assert "; ours: " in plan.reason


@pytest.mark.parametrize(
    "platform, fields, flags, why",
    [
        (TORCH_GPU, {}, {"weights": True}, "returned or dropped out"),
        (TORCH_GPU, {}, {"chunk_size": 0}, "chunk_size=0 asks for"),
        (TORCH_GPU, {"lowers": False, "score_mod": True}, {}, "cannot lower"),
        (TORCH_CPU, {"masks": ("document",)}, {}, "no backward pass"),
        (TORCH_CPU, {"masks": ("document",)}, {}, "the blocks skip 88%"),
        (TORCH_CPU, {"score_mod": True}, {}, "sdpa: a score mod"),
        (TORCH_CPU, {"bias": True}, {}, "a bias in training"),
        (TORCH_CPU, {"value_dim": 32}, {}, "value heads of another size"),
        (TORCH_CPU, {"cpu_lse": False}, {"lse": True}, "no log-sum-exp"),
        (TORCH_CPU, {}, {"block_size": (128, 128)}, "sdpa: a block mask"),
        (JAX_GPU, {"masks": ("causal",)}, {}, "not float32"),
        (JAX_GPU, {**BF16, "masks": ("causal",)}, {"lse": True}, "sinks"),
        (JAX_TPU, {}, {}, "no native kernel on jax (tpu)"),
    ],
)
def test_where_ours_runs_the_reason_says_why(on, platform, fields, flags, why):
    on(platform)
    assert why in _plan(LONG, fields, flags).reason


def test_without_a_native_call_the_planner_plans_ours_only(on):
    on(TORCH_GPU)
    plan = plan_attention("dot", SHORT)
    assert plan.path == FUSED and "ours" not in plan.reason


def test_native_must_be_a_native_call():
    with pytest.raises(TypeError, match="Received: native='gpu'"):
        plan_attention("dot", SHORT, native="gpu")


def test_the_probe_names_the_backend_and_its_device():
    backend, device = _native_plan.platform()
    assert backend == keras.backend.backend()
    assert device in ("cpu", "gpu", "tpu")


def test_a_symbolic_pass_does_not_fix_the_device(monkeypatch):
    # Keras's symbolic passes on PyTorch (a functional model built) put
    # tensors on "meta": a device read there and kept left every later
    # call of the process planned without the native kernels.
    monkeypatch.setattr(_native_plan, "_TORCH_DEVICE", [])
    seen = []

    class Probe(keras.layers.Layer):
        def call(self, x):
            seen.append(_native_plan.platform()[1])
            return x

    Probe()(keras.Input((4,)))
    Probe()(np.zeros((1, 4), "float32"))
    assert seen[-1] == "cpu"
