"""The planner's thresholds, each with the measurement behind it
(private module): the numbers `ops/plan.py` decides by, kept apart from
the decisions so that each can be read with its evidence
(BENCHMARKS.md)."""

# With `chunk_size=None`, on a CPU, the blocks are taken when one step of
# the dense path would hold more than this many bytes of `(Tq, Tk)`
# tensors (`step_bytes`: the logits and weights, a mod's temporaries, and
# the backward pass's two): 1 GiB, N = 4096 for one example with 4 heads
# in training. The default then stays within 1.5x the peak memory of the
# blocks (BENCHMARKS.md, "Dense or blocks").
AUTO_CHUNK_MIN_BYTES = 2**30
# On a GPU or TPU the dense step is faster than the blocks wherever it
# fits: on an H200 the blocks took 1.2-2.4x the time of Keras's dense
# layer on JAX and 1.7-45x on PyTorch at 2-16 GiB of logits
# (BENCHMARKS.md). There the blocks are taken only where the dense step
# would pass this share of the device's memory (a quarter: 35 GiB on an
# H200), or of `ACCELERATOR_MEMORY_BYTES` where the backend does not say.
ACCELERATOR_MEMORY_SHARE = 0.25
ACCELERATOR_MEMORY_BYTES = 16 * 2**30
# Queries and keys per block of the automatic choice: 512 × 512 measured
# fastest on an idle CPU at N = 4096 (1.22x dense, against 1.32x for
# 512 × 256 and 1.59x for 1024 × 1024; BENCHMARKS.md).
AUTO_CHUNK_SIZE = 512
# Backends whose automatic blocks are smaller where the blocks skip pairs
# (a band or a mask: the finer the blocks, the more they skip) of a
# sequence shorter than `FINE_BLOCKS_BELOW`. On JAX (XLA fuses a block's
# maximum, `exp` and sum into one pass, `_blocks.Running`) 256 × 256
# there: causal at N = 1024 and 2048, 512's took 0.80-1.27x the wall time
# of 256's (more in 5 of 8 cases) and 1.22-1.69x the CPU time (two runs on
# an idle AVX-512 EPYC). Elsewhere JAX's blocks are 512, as on the other
# backends: without a mask 512's took 0.56-0.78x the wall time of 256's
# at N = 1024-8192, for 0.84-1.18x the CPU time; causal from N = 4096,
# 0.61-0.80x the wall time for 0.98-1.22x the CPU time. XLA splits a 512
# block's products over the cores, a 256 block's not (BENCHMARKS.md, "How
# close to the machine"). TensorFlow runs a block op by op, whose cost
# per op the larger blocks share (its forward at 256 took 2.0x the time
# of 512's).
AUTO_CHUNK_SIZES = {"jax": 256}
FINE_BLOCKS_BELOW = 4096
# A band at most this many keys wide (a sliding window) runs in blocks of
# this size, on every backend and at every length: the blocks of 512 of a
# causal window of 256 keys compute 3-4 keys for each one kept, those of
# 256 two. At N = 4096, 8 heads of 64, forward and backward on a 2-core
# AVX-512 EPYC, two runs: TensorFlow 298-301 -> 164-202 ms, PyTorch
# 721-803 -> 377-442 ms (one thread 1318-1330 -> 568-582), JAX 289-307 ->
# 262-292 ms for 0.62-0.73x the CPU time. A window of 512 keys took the
# same time in blocks of 256 and 512 on TensorFlow, one of 1024 more in
# 256's; one of 128 was faster in blocks of 128 on TensorFlow and JAX
# but slower on PyTorch, whose every op costs more (BENCHMARKS.md,
# "Blocks as wide as a window").
NARROW_BAND = 256
# `(Tq, Tk)` tensors per step of the dense path, in units of the logits:
# the logits and the weights; each score mod's temporaries (a bias, a
# distance); the backward pass's gradients of the weights and the logits.
FORWARD_COPIES = 2
MOD_COPIES = 1
BACKWARD_COPIES = 2
# Where a band or a block mask leaves at most this share of the pairs of
# blocks, the blocks skip the rest and are faster than the dense path,
# which forms every logit (TensorFlow `tf.function`, N = 2048, one
# training step: causal, which keeps 10 of 16 pairs, 0.65x the fused
# kernel's time; a window of 256 with ALiBi 0.66x the dense kernel's; 8
# documents 0.29x; BENCHMARKS.md, "Dense or blocks") ...
SPARSE_MAX_SHARE = 0.65
# ... once there are enough pairs of blocks for the skipping to pay:
# at least this many queries and keys.
SPARSE_MIN_LENGTH = 2048
# On JAX's CPU each buffer of a dense step past glibc's largest mmap
# threshold (32 MiB) is mapped afresh on every call and faulted in page by
# page (29k-393k page faults a call at N = 1024-4096, 8 heads of 64): the
# blocks took 0.36-0.69x the fused kernel's CPU time there, forward and
# training (BENCHMARKS.md, "How close to the machine"). So there the
# blocks are taken from this many queries and keys once the dense step
# passes `JAX_CPU_MIN_BYTES`; shorter sequences in large batches ran as
# fast either way (batch 32, N = 256, training: 494 against 493 ms).
JAX_CPU_MIN_LENGTH = 1024
JAX_CPU_MIN_BYTES = 32 * 2**20
# A mask mod whose blocks cannot be read when the call is planned (it is
# traced, or holds traced tensors): assumed to keep this share.
UNKNOWN_SHARE = 0.5
