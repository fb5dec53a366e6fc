"""The dtype policy chosen by what the hardware runs fast."""

import pytest

from keras_attention.models import precision

pytestmark = pytest.mark.backend_independent

# The flags of the two CPUs that the multi30k-transformer preset met: an
# AVX2-only EPYC (bfloat16 emulated, 4.5 s a step) and one with AVX512_BF16.
AVX2 = frozenset({"fma", "avx", "avx2"})
AVX512_BF16 = AVX2 | {"avx512f", "avx512_bf16"}


def test_cpu_flags_reads_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n")
    assert precision.cpu_flags(info) == {"fpu", "avx2", "avx512_bf16"}
    assert precision.cpu_flags(tmp_path / "absent") == frozenset()


@pytest.mark.parametrize(
    "backend, flags, accelerator, expected",
    [
        ("tensorflow", AVX2, None, "float32"),
        ("tensorflow", AVX512_BF16, None, "mixed_bfloat16"),
        ("tensorflow", AVX2 | {"amx_bf16"}, None, "mixed_bfloat16"),
        ("jax", AVX512_BF16, None, "float32"),
        ("torch", AVX512_BF16, None, "float32"),
        ("jax", AVX2, True, "mixed_bfloat16"),
        ("tensorflow", AVX512_BF16, False, "float32"),
        ("tensorflow", frozenset(), None, "float32"),
    ],
)
def test_auto_dtype_policy(monkeypatch, backend, flags, accelerator, expected):
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    policy, reason = precision.auto_dtype_policy(backend, flags, accelerator)
    assert policy == expected
    assert reason


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("TF_ENABLE_ONEDNN_OPTS", "0", "without oneDNN"),
        ("ONEDNN_MAX_CPU_ISA", "AVX2", "ONEDNN_MAX_CPU_ISA=AVX2"),
    ],
)
def test_onednn_kept_off_bfloat16_is_float32(monkeypatch, name, value, words):
    # Measured: oneDNN off, a preset step took 4.5 s in mixed_bfloat16;
    # capped at AVX2, oneDNN failed to build its bfloat16 matmul.
    monkeypatch.setenv(name, value)
    policy, reason = precision.auto_dtype_policy(
        "tensorflow", AVX512_BF16, None
    )
    assert policy == "float32"
    assert words in reason
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    assert precision.auto_dtype_policy("tensorflow", AVX512_BF16, None)[0] == (
        "mixed_bfloat16"
    )


def test_this_machine_gets_a_policy_keras_knows():
    import keras

    policy, _ = precision.auto_dtype_policy()
    assert keras.DTypePolicy(policy).name == policy
