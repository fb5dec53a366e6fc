"""Backend-agnostic attention math written with `keras.ops`.

Every layer and seq2seq mechanism of the package computes its attention
through these functions; they hold no state and create no variables, so
they can be used on their own, inside a custom layer or in a `keras.ops`
graph on any backend (TensorFlow, JAX, PyTorch).

- `masks`: the one mask vocabulary. `masks.attention_masks` turns Keras
  padding masks, query/value/key masks, explicit attention masks, causal
  masking, windows and bands into one `AttentionMasks` (a tensor for the
  dense paths, block masks and band limits for the chunked path, a mask
  mod for `flex_attention`), and defines the bands (`mods.causal`,
  `mods.sliding_window`, `mods.band`).
- `grids`: masks as tensors for attention written by hand:
  `combine_masks` (a layer's flags), and `causal_mask`,
  `sliding_window_mask`, `band_mask` (the bands on a grid).
- `attend`: the attend step (logits → mask → float32 softmax → dropout →
  weighted sum) as `attend` and `attention`, the fused multi-head kernel
  `dot_product_attention` and Lin et al.'s `frobenius_penalty`.
- `chunked`: `chunked_attention`, the same attention in blocks with memory
  linear in the sequence length.
- `explain`: `explain_attention`, which kernel a `flex_attention` call
  runs and why (an `Explanation`; the layers' `explain` gives the same).
- `plan`: `plan_attention`, the one path planner (flash, fused, dense or
  blocks, and their block sizes; every "X needs Y" refusal), with the one
  threshold and byte estimate; given a call's `NativeCall`, the backend's
  own fused kernel where the call fits it (PyTorch's FlexAttention and
  SDPA, cuDNN and Pallas on JAX).
- `ring`: `ring_attention`, context parallelism: the sequence sharded
  over the devices of a `ContextParallel` (JAX), the key/value blocks
  passed round a ring with the online softmax across devices.
- `logits`: the fill of masked logits (`MASKED_LOGIT`, `mask_logits`),
  their `masked_softmax` (float32 for half precision), `one_hot_argmax`
  and `inverse_cdf_sample`, written once for the layers, mechanisms and
  decoders.
- `flex`: `flex_attention`, attention with a programmable `score_mod` and
  `mask_mod` (dense or in blocks, grouped heads), `create_block_mask`
  (`BlockMask`: the blocks a mask empties are skipped), `and_masks`,
  `or_masks`; `mods` holds the usual mods (causal, sliding window, prefix
  LM, document, padding, ALiBi, soft-capping, T5 relative-position bias,
  an additive bias).

Masks are boolean with `True` meaning "attend". A row of logits whose keys
are all masked gets all-zero weights (never NaN, never uniform).
"""

from keras_attention.ops import mods as mods  # noqa: E402
from keras_attention.ops._native_plan import NativeCall as NativeCall
from keras_attention.ops.attend import attend as attend
from keras_attention.ops.attend import attention as attention
from keras_attention.ops.attend import dot_product as dot_product
from keras_attention.ops.attend import (
    dot_product_attention as dot_product_attention,
)
from keras_attention.ops.attend import frobenius_penalty as frobenius_penalty
from keras_attention.ops.attend import scaled_dot_product as scaled_dot_product
from keras_attention.ops.checks import logits_dtype as logits_dtype
from keras_attention.ops.chunked import chunked_attention as chunked_attention
from keras_attention.ops.explain import Explanation as Explanation
from keras_attention.ops.flex import apply_mods as apply_mods
from keras_attention.ops.flex import explain_attention as explain_attention
from keras_attention.ops.flex import flex_attention as flex_attention
from keras_attention.ops.gated_delta import gated_delta_rule as gated_delta_rule
from keras_attention.ops.grids import band_mask as band_mask
from keras_attention.ops.grids import causal_mask as causal_mask
from keras_attention.ops.grids import combine_masks as combine_masks
from keras_attention.ops.grids import sliding_window_mask as sliding_window_mask
from keras_attention.ops.logits import MASKED_LOGIT as MASKED_LOGIT
from keras_attention.ops.logits import inverse_cdf_sample as inverse_cdf_sample
from keras_attention.ops.logits import mask_logits as mask_logits
from keras_attention.ops.logits import masked_softmax as masked_softmax
from keras_attention.ops.logits import one_hot_argmax as one_hot_argmax
from keras_attention.ops.mask_mods import BlockMask as BlockMask
from keras_attention.ops.mask_mods import and_masks as and_masks
from keras_attention.ops.mask_mods import create_block_mask as create_block_mask
from keras_attention.ops.mask_mods import or_masks as or_masks
from keras_attention.ops.plan import Plan as Plan
from keras_attention.ops.plan import plan_attention as plan_attention
from keras_attention.ops.ring import ring_attention as ring_attention
from keras_attention.ops.rotary import apply_rotary as apply_rotary
from keras_attention.ops.rotary import rotary_angles as rotary_angles
from keras_attention.ops.rotary import rotary_frequencies as rotary_frequencies
from keras_attention.ops.rotary import (
    yarn_attention_factor as yarn_attention_factor,
)
