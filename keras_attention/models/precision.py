"""The Keras dtype policy that this machine's hardware runs fast.

`mixed_bfloat16` computes in bfloat16 with float32 weights. It pays only
where bfloat16 matrix products run natively: TensorFlow's oneDNN kernels
on an x86 CPU with AVX512_BF16 or AMX, or an accelerator with bfloat16
units (NVIDIA compute capability 8.0 and up, TPUs). Elsewhere bfloat16 is
emulated: on a 2-core AVX2 EPYC (and with oneDNN off) a training step of
the `multi30k-transformer` preset took 4.5 s under `mixed_bfloat16`
against 0.86 s in `float32` (BENCHMARKS.md, "dtype policy by hardware"),
which held that preset's 30-minute runs to a few hundred steps.
`auto_dtype_policy` picks the policy, and says why.
"""

import os

import keras

#: CPU flags (Linux `/proc/cpuinfo`) of native bfloat16 matrix products.
NATIVE_BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(path="/proc/cpuinfo") -> frozenset:
    """The CPU's feature flags, empty where `path` is not readable."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def accelerator_bfloat16():
    """Whether the backend's first accelerator has bfloat16 units.

    Returns:
        `None` without an accelerator, else `True` or `False`.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            return None
        details = tf.config.experimental.get_device_details(gpus[0])
        return tuple(details.get("compute_capability", (0, 0))) >= (8, 0)
    if backend == "torch":
        import torch

        if not torch.cuda.is_available():
            return None
        return torch.cuda.get_device_capability(0) >= (8, 0)
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform == "tpu":
            return True
        if device.platform != "gpu":
            return None
        capability = getattr(device, "compute_capability", "0.0")
        return tuple(int(p) for p in str(capability).split(".")) >= (8, 0)
    return None


def auto_dtype_policy(backend=None, flags=None, accelerator="detect"):
    """`"mixed_bfloat16"` where bfloat16 runs natively, else `"float32"`.

    Args:
        backend: Keras backend name; defaults to the running one.
        flags: CPU flags; defaults to `cpu_flags()`.
        accelerator: `accelerator_bfloat16()`'s answer (`None`, `True`,
            `False`); detected by default.

    Returns:
        `(policy, reason)`: the policy name and a sentence saying why.

    Example:

    >>> from keras_attention.models import auto_dtype_policy
    >>> auto_dtype_policy("tensorflow", {"avx2", "fma"}, accelerator=None)
    ('float32', 'the CPU has no bfloat16 instructions (emulated)')
    >>> policy, reason = auto_dtype_policy()  # this machine
    >>> keras.config.set_dtype_policy(policy)
    >>> keras.config.set_dtype_policy("float32")
    """
    backend = backend or keras.backend.backend()
    if accelerator == "detect":
        accelerator = accelerator_bfloat16()
    if accelerator is not None:
        if accelerator:
            return "mixed_bfloat16", "the accelerator has bfloat16 units"
        return "float32", "the accelerator has no bfloat16 units"
    native = sorted(
        set(cpu_flags() if flags is None else flags)
        & set(NATIVE_BFLOAT16_CPU_FLAGS)
    )
    if not native:
        return "float32", "the CPU has no bfloat16 instructions (emulated)"
    if backend != "tensorflow":
        return "float32", (
            f"the CPU has {', '.join(native)}, but {backend}'s CPU "
            "bfloat16 kernels are not measured fast here"
        )
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if isa != "ALL" and "BF16" not in isa and "AMX" not in isa:
        return "float32", (
            f"ONEDNN_MAX_CPU_ISA={isa} keeps oneDNN off the CPU's "
            "bfloat16 instructions"
        )
    if os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0":
        return "float32", (
            "TF_ENABLE_ONEDNN_OPTS=0: TensorFlow emulates bfloat16 "
            "without oneDNN"
        )
    return "mixed_bfloat16", (
        f"the CPU has {', '.join(native)} (TensorFlow's oneDNN kernels)"
    )
