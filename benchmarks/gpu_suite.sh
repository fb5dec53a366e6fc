#!/usr/bin/env bash
# The benchmarks on a GPU, JAX and PyTorch backends, one after another,
# each inside what is left of a time budget. Prints the versions and the
# GPU first, then each benchmark's table; run it from anywhere.
#
#   benchmarks/gpu_suite.sh            # the GPU sizes (BUDGET=500 s)
#   SIZE=quick benchmarks/gpu_suite.sh # tiny sizes: a smoke run on a CPU
#   SUITE=native BUDGET=480 benchmarks/gpu_suite.sh  # issue 53 only
#
# SUITE=native runs only benchmarks/native_kernels.py (the backends' fused
# kernels behind our API against the kernels themselves: flex_attention
# with no mask, causal, 8 documents and a window with ALiBi at N = 8192 and
# 32768, forward and backward, and MultiHeadAttention causal at N = 16384
# against Keras's flash attention); SUITE=all (the default) runs it last.
#
# Each table comes from one process with our layer and Keras's alternating
# (mha_speed, gqa_speed), except long_sequences, one process per cell.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=3
# JAX takes GPU memory as it needs it, so its peak figures are the step's.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=${PYTHON:-python3}
SIZE=${SIZE:-gpu}
SUITE=${SUITE:-all}
deadline=$(( $(date +%s) + ${BUDGET:-500} ))

step() {  # step SECONDS BACKEND ARGS...: one benchmark, within the budget
    local limit=$1 backend=$2 left start
    shift 2
    left=$(( deadline - $(date +%s) - 5 ))
    (( limit > left )) && limit=$left
    echo
    echo "=== KERAS_BACKEND=$backend $* (limit ${limit} s)"
    if (( limit < 15 )); then
        echo "=== skipped: the budget is spent"
        return
    fi
    start=$(date +%s)
    KERAS_BACKEND=$backend timeout "$limit" "$PY" "$@" 2>&1 \
        | grep -v -e '^WARNING: All log' -e '^I0000' -e '^W0000' -e 'cudart_stub'
    echo "=== rc ${PIPESTATUS[0]} in $(( $(date +%s) - start )) s"
}

echo "=== commit $(cat COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null)"
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm \
    --format=csv 2>/dev/null || echo "no nvidia-smi"
# Keras's default backend, TensorFlow, need not be installed.
KERAS_BACKEND=jax "$PY" - <<'PY' 2>&1 | grep -v -e '^WARNING: All log' -e '^I0000' -e '^W0000'
import platform
import jax, keras, numpy, torch
print("python", platform.python_version(), "numpy", numpy.__version__,
      "keras", keras.__version__)
print("jax", jax.__version__, "devices", jax.devices())
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn",
      torch.backends.cudnn.version(), "device",
      torch.cuda.get_device_name() if torch.cuda.is_available() else None)
print("torch allow_tf32 (matmul)", torch.backends.cuda.matmul.allow_tf32,
      "jax_default_matmul_precision", jax.config.jax_default_matmul_precision)
PY

if [[ $SIZE == quick ]]; then
    NATIVE=(--cpu-smoke)
    MHA=(--quick); GQA=(--quick); FLEX=(--quick)
    LONG=(--quick --repeats 1 --keras-max 512 --dense-max 512)
    LONG_JAX=("${LONG[@]}")
else
    NATIVE=(--repeats 5)
    MHA=(--shapes 8,512,256,8 8,1024,1024,16 4,4096,1024,16 1,8192,1024,16
         --repeats 20)
    GQA=(--shape 8,2048,1024,64,16,4 --repeats 20 --tokens 256)
    FLEX=(--repeats 5)
    LONG=(--sizes 4096 16384 --keras-max 16384 --dense-max 16384 --repeats 3)
    LONG_JAX=(--sizes 4096 16384 65536 --keras-max 16384 --dense-max 16384
              --repeats 3)
    # About 500 s on one H200 with every step run to its end (BENCHMARKS.md's
    # run took two calls, 380 s and 205 s; each long_sequences cell is a
    # process of 15-20 s there, mostly imports and compiling).
fi

if [[ $SUITE != native ]]; then
    for backend in jax torch; do
        step 100 $backend benchmarks/mha_speed.py "${MHA[@]}"
        step 60 $backend benchmarks/gqa_speed.py "${GQA[@]}"
    done
    for backend in jax torch; do
        step 60 $backend benchmarks/flex_attention.py "${FLEX[@]}"
    done
    step 130 jax benchmarks/long_sequences.py --modes jax_jit "${LONG_JAX[@]}"
    step 100 torch benchmarks/long_sequences.py --modes torch_eager "${LONG[@]}"
fi
# Each row is printed when measured: a step cut by its limit keeps its rows.
# PyTorch compiles FlexAttention for every mod and pass (its own and ours).
step 270 torch benchmarks/native_kernels.py "${NATIVE[@]}"
step 190 jax benchmarks/native_kernels.py "${NATIVE[@]}"
echo
echo "=== done in $(( $(date +%s) - deadline + ${BUDGET:-500} )) s"
