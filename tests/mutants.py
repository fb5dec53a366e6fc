"""Proof that the suite has teeth: plants known bugs, one at a time.

Each mutant replaces one exact piece of the package's source in a copy of
the repository (the working tree is never touched), runs the test command of
a lane in that copy and lists the tests that fail. A mutant that no test
catches is a hole in the suite.

    python -m tests.mutants                   # every mutant, TF lane
    python -m tests.mutants NAME -- ARGS...   # one mutant, pytest ARGS
    python -m tests.mutants --reach           # each on the modules it reaches

With `--reach`, a first run of the lane in a copy with a probe before each
mutant's statement records which test modules execute it (in the test's
process or in a subprocess it starts); each mutant then runs those modules
only, whole. A test elsewhere never runs the mutated code, so it cannot
fail from it. A mutated statement outside any function, or reached where
no test is known (at import, say), runs the whole lane.

Not collected by pytest (the file name has no `test_` prefix).
"""

import argparse
import ast
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    path: str
    old: str
    new: str
    # For --reach, when `old` is not inside a function: the statements of
    # the code that reads it, where the probes go instead.
    reach: tuple = ()


MUTANTS = (
    Mutant(
        "layout_output_axis",
        "layout_map splits the output kernel over its output dim, not its "
        "input heads (a column split where Megatron's is a row split)",
        "keras_attention/distribution.py",
        '(_ANY + r"attention_output/kernel", (_MODEL,), "heads", True),',
        '(_ANY + r"attention_output/kernel", (None, None, _MODEL), "heads", '
        "True),",
        reach=(
            "    for rule in _RULES:\n",
            "    for pattern, axes, _, _ in _RULES:\n",
        ),
    ),
    Mutant(
        "masked_softmax",
        "masked_softmax ignores its mask",
        "keras_attention/ops/logits.py",
        '    checks.broadcasts_to("masked_softmax", mask, logits)\n',
        '    checks.broadcasts_to("masked_softmax", mask, logits)\n'
        "    mask = None\n",
    ),
    Mutant(
        "frobenius_identity",
        "the Frobenius penalty drops the identity: ‖AAᵀ‖² for ‖AAᵀ − I‖²",
        "keras_attention/ops/attend.py",
        "ops.square(gram - identity)",
        "ops.square(gram)",
    ),
    Mutant(
        "mha_key_projection",
        "MultiHeadAttention projects `value` where it should project `key`",
        "keras_attention/layers/_multi_head_base.py",
        "self._key_dense(key)",
        "self._key_dense(value)",
    ),
    Mutant(
        "plan_threshold",
        "the planner's threshold is twice the bytes it says",
        "keras_attention/ops/plan.py",
        "    if size > chunk_threshold():",
        "    if size > 2 * chunk_threshold():",
    ),
    Mutant(
        "plan_sparse_share",
        "the planner takes the blocks for long calls whatever share of "
        "the blocks a band or a block mask keeps",
        "keras_attention/ops/plan.py",
        "kept <= SPARSE_MAX_SHARE and accelerator_memory()",
        "accelerator_memory()",
    ),
    Mutant(
        "plan_twice",
        "a layer call is planned twice (the planner asked again below "
        "the engine)",
        "keras_attention/layers/_multi_head_base.py",
        "        plan = engine.plan_call(record, self.chunk_size, **flags)\n",
        "        plan = engine.plan_call(record, self.chunk_size, **flags)\n"
        "        plan = engine.plan_call(record, self.chunk_size, **flags)\n",
    ),
    Mutant(
        "weights_replanned",
        "an overridden `_compute_attention` that asks for the scores its "
        "call did not gets a second plan (the weights route plans again)",
        "keras_attention/layers/_keras_hooks.py",
        "            raise _weights_not_planned(type(self).__name__, plan)\n",
        "            record = dataclasses.replace(record, weights=True)\n"
        "            plan = engine.plan_call(\n"
        "                record, 0, **self._layer_flags.value\n"
        "            )\n",
    ),
    Mutant(
        "hook_drops_score_mod",
        "`_compute_attention` called on its own (keras-hub's way) drops "
        "the layer's `score_mod`",
        "keras_attention/layers/_keras_hooks.py",
        "score_mod=_mods.chained(own_score),",
        "score_mod=None,",
    ),
    Mutant(
        "explain_other_path",
        "`explain_attention` explains the dense plan, not the call's",
        "keras_attention/ops/flex.py",
        "return explain_call(call, plan, chunk_size, backward, **flags)",
        "return explain_call(call, engine.plan_call(call, 0, backward, "
        "**flags), chunk_size, backward, **flags)",
    ),
    Mutant(
        "mla_takes_all",
        "MultiHeadLatentAttention accepts an engine option it does not "
        "implement",
        "keras_attention/layers/latent.py",
        "        self._refuse_untaken(kwargs)\n",
        "",
    ),
    Mutant(
        "grouped_mask_heads",
        "the grouped layout puts a per-head mask on the wrong query heads",
        "keras_attention/ops/_layout.py",
        "x, (batch, kv_heads, heads_axis // kv_heads, q_len, k_len)",
        "x, (batch, heads_axis // kv_heads, kv_heads, q_len, k_len)",
    ),
    Mutant(
        "lse_gradient_blocks",
        "the block kernel's backward pass drops the gradient of the "
        "log-sum-exp",
        "keras_attention/ops/_kernel.py",
        "keepdims=True) - d_lse",
        "keepdims=True)",
    ),
    Mutant(
        "band_diagonal_whole",
        "a causal call's diagonal block counts as whole: the block kernel "
        "leaves its future keys unmasked",
        "keras_attention/ops/_blocks.py",
        "conditions.append(lambda n: (n + 1) * other - 1 <= high)",
        "conditions.append(lambda n: n * other <= high)",
    ),
    Mutant(
        "band_block_skipped",
        "the block kernel skips the last key block a band reaches (a "
        "causal call's diagonal block)",
        "keras_attention/ops/_blocks.py",
        "top = ((i + 1) * self.qc - 1 + self.right) // self.kc + 1",
        "top = ((i + 1) * self.qc - 1 + self.right) // self.kc",
    ),
    Mutant(
        "running_no_rescale",
        "the forward's running step (JAX's) does not rescale the "
        "output when the running maximum grows",
        "keras_attention/ops/_blocks.py",
        "out = out * rescale + ops.matmul(weights, values)",
        "out = out + ops.matmul(weights, values)",
    ),
    Mutant(
        "lse_gradient_fused",
        "the fused kernel's backward pass drops the gradient of the "
        "log-sum-exp",
        "keras_attention/ops/_fused.py",
        "row = row - ops.cast(d_lse, dtype)",
        "row = row",
    ),
    Mutant(
        "sinks_correction",
        "the sinks correct the output by the sink's weight, not the real "
        "keys' (σ(lse + sink) for σ(lse - sink))",
        "keras_attention/ops/engine.py",
        "kept = ops.sigmoid(result.lse - sinks)",
        "kept = ops.sigmoid(result.lse + sinks)",
    ),
    Mutant(
        "chunked_row_term",
        "the block kernel's backward pass drops the row term of the "
        "softmax gradient",
        "keras_attention/ops/_kernel.py",
        "ops.concatenate([d_out, -delta], axis=-1)",
        "ops.concatenate([d_out, 0 * delta], axis=-1)",
    ),
    Mutant(
        "plan_accelerator_share",
        "on an accelerator the blocks wait for all of its memory, not a "
        "quarter (the dense logits would not fit beside the model)",
        "keras_attention/ops/plan.py",
        "int(memory * ACCELERATOR_MEMORY_SHARE)",
        "int(memory)",
    ),
    Mutant(
        "ring_gradients_home",
        "the ring's backward pass stops one step short: the key/value "
        "gradients never reach the device that owns them",
        "keras_attention/ops/_ring.py",
        "jax.lax.fori_loop(0, config.size, body, carry)",
        "jax.lax.fori_loop(0, config.size - 1, body, carry)",
    ),
    Mutant(
        "ring_documents_touching",
        "the ring skips a pair of device blocks that share one document id",
        "keras_attention/ops/_ring.py",
        "return ops.any(low <= high)",
        "return ops.any(low < high)",
    ),
    Mutant(
        "ring_band_ignored",
        "the ring never skips the device blocks a band empties",
        "keras_attention/ops/_ring.py",
        "        if config.band is not None:\n            nq, nk",
        "        if False:\n            nq, nk",
    ),
    Mutant(
        "attention_config_score",
        "`Attention.get_config` forgets `score`",
        "keras_attention/layers/attention.py",
        '            "score": scores_lib.serialize(self.score),\n',
        "",
    ),
    Mutant(
        "beam_lowest",
        "beam search keeps its lowest-ranked candidates at every step",
        "keras_attention/seq2seq/beam_search.py",
        "ops.top_k(ops.reshape(ranking, (batch, k * vocab)), k)",
        "ops.top_k(-ops.reshape(ranking, (batch, k * vocab)), k)",
    ),
    Mutant(
        "tsv_last_line",
        "the TSV reader drops the last line of a file",
        "keras_attention/data/sentiment.py",
        "enumerate(lines[1:], start=2)",
        "enumerate(lines[1:-1], start=2)",
    ),
    Mutant(
        "window_off_by_one",
        "the sliding window's band limits are one key too wide",
        "keras_attention/ops/masks.py",
        "return (self.window - 1, self.window - 1)",
        "return (self.window, self.window)",
    ),
    Mutant(
        "structured_padding",
        "StructuredSelfAttention ignores the padding mask",
        "keras_attention/layers/structured.py",
        "self.num_hops, ops.shape(inputs)[1], value_mask=mask",
        "self.num_hops, ops.shape(inputs)[1], value_mask=None",
    ),
    Mutant(
        "cache_heads_unchecked",
        "keras-hub's cache tensor is checked for its head size only, not "
        "its number of key/value heads (issue 52's silent wrong outputs)",
        "keras_attention/layers/_cache.py",
        "        if shape[3:] != (spec.kv_heads, spec.key_dim):\n",
        "        if shape[4:] != (spec.key_dim,):\n",
    ),
    Mutant(
        "rolling_slot_shifted",
        "the rolling cache's slots hold the position one later than written",
        "keras_attention/layers/_rolling_cache.py",
        "recent = last - ops.mod(last - sinks - slot, size)",
        "recent = last - ops.mod(last - sinks - slot + 1, size)",
    ),
    Mutant(
        "quantize_half_range",
        "the quantized cache's scale uses half the range: large entries "
        "saturate",
        "keras_attention/layers/_quantized_cache.py",
        "    scale = peak / _RANGES[dtype]\n",
        "    scale = peak / (2 * _RANGES[dtype])\n",
    ),
    Mutant(
        "generation_index_off_by_one",
        "the compiled generation loop writes each step's keys and values "
        "one slot late (and rotates them one position on)",
        "keras_attention/models/generation.py",
        "                current, _unflatten(caches, sizes, flat), index\n",
        "                current, _unflatten(caches, sizes, flat), index + 1\n",
    ),
    Mutant(
        "native_cpu_backward",
        "PyTorch's compiled FlexAttention is chosen for training on the "
        "CPU, where it has no backward pass",
        "keras_attention/ops/_native_plan.py",
        "    if native.backward:\n",
        "    if native.backward and False:\n",
    ),
    Mutant(
        "platform_keeps_meta",
        "PyTorch's device is kept from Keras's symbolic pass ('meta'), so "
        "no later call of the process gets a native kernel",
        "keras_attention/ops/_native_plan.py",
        '    if device == "meta":\n        return device\n',
        "",
    ),
    Mutant(
        "rotation_pair_one_position_on",
        "the query and key rotated in one call are rotated one position "
        "past their own",
        "keras_attention/layers/_rotation.py",
        "    both = rotate(rotary_embedding, both, start_index)\n",
        "    both = rotate(rotary_embedding, both, start_index + 1)\n",
    ),
    Mutant(
        "partial_rotation_last_features",
        "a partial rotary embedding rotates the last features instead of "
        "the first (keras-hub's and Qwen3.5's)",
        "keras_attention/layers/rotary.py",
        "            moved[..., :turned] if turned < features else moved,\n",
        "            moved[..., -turned:] if turned < features else moved,\n",
    ),
    Mutant(
        "yarn_truncate_ignored",
        "YaRN's correction range is always rounded, so gpt-oss's "
        "`truncate=False` frequencies are keras-hub's default ones",
        "keras_attention/ops/rotary.py",
        "    if truncate:\n",
        "    if True:\n",
    ),
    Mutant(
        "hub_gpt_oss_window_one_short",
        "gpt-oss's window w (keys j >= i - w) swapped in as our "
        "sliding_window=w, one key short",
        "keras_attention/_hub_families.py",
        '        "sliding_window": window + 1 if window else None,\n',
        '        "sliding_window": window if window else None,\n',
    ),
    Mutant(
        "hub_gemma_one_plus_scale_not_mapped",
        "Gemma 3's norm scales copied as they are, not as `1 + scale` "
        "(keras-hub's Gemma RMSNorm multiplies by `1 + scale`)",
        "keras_attention/_hub_families.py",
        "        return 1.0 + value\n",
        "        return value\n",
    ),
    Mutant(
        "hub_smollm3_nope_rotated",
        "SmolLM3's NoPE layers swapped in with a rotation",
        "keras_attention/_hub_families.py",
        "    if layer.use_rope:\n",
        "    if True:\n",
    ),
    Mutant(
        "hub_qwen3_5_gate_split_swapped",
        "Qwen3.5's query kernel split the wrong way for the gate: the "
        "gate takes each head's query half, not its second half",
        "keras_attention/_hub_families.py",
        '            "gate/kernel": value[..., head_dim:],\n',
        '            "gate/kernel": value[..., :head_dim],\n',
    ),
    Mutant(
        "hub_qwen3_5_prefill_whole_prompt",
        "the Gated DeltaNet adapter builds the state over the whole "
        "prompt in keras-hub's prefill, which its generate then feeds the "
        "shortest prompt's last token again (keras-hub's own behaviour)",
        "keras_attention/_hub_adapters.py",
        "                mask = _before_the_first_fed_again(mask)\n",
        "                pass\n",
    ),
    Mutant(
        "hub_old_attention_tracked",
        "the swap leaves keras-hub's attention tracked: its variables stay "
        "the model's and are saved beside ours",
        "keras_attention/hub.py",
        "        tracker.untrack(old)\n",
        "",
    ),
    Mutant(
        "hub_generate_function_kept",
        "a CausalLM's generate compiled before the swap is kept, so it "
        "still runs keras-hub's attention",
        "keras_attention/hub.py",
        '        "generate_function",\n',
        "",
    ),
    Mutant(
        "hub_route_ignored",
        "the adapter ignores the cache a language_model block hands it "
        "past keras-hub's decoder: our generation's caches are not written",
        "keras_attention/_hub_adapters.py",
        "        if route is not None and cache is None:\n"
        "            return _routed(self.attention, hidden_states, "
        "attention_mask, route)\n",
        "        if False:\n"
        "            return _routed(self.attention, hidden_states, "
        "attention_mask, route)\n",
    ),
    Mutant(
        "hub_gemma_embeddings_unscaled",
        "language_model leaves out Gemma's embedding scale "
        "(`sqrt(hidden_dim)`, in keras-hub's call_with_cache)",
        "keras_attention/_hub_generation.py",
        "        scale = float(backbone.hidden_dim) ** 0.5\n",
        "        scale = None\n",
    ),
    Mutant(
        "hub_block_scores_not_asked",
        "a language_model block asked for its attention weights does not "
        "ask the adapter: collect_attention gets no weights",
        "keras_attention/_hub_generation.py",
        "        route = Route(cache, cache_update_index, "
        "return_attention_scores)\n",
        "        route = Route(cache, cache_update_index)\n",
    ),
    Mutant(
        "hub_views_padding_dropped",
        "a KerasHubBlock asked for its attention weights calls keras-hub's "
        "decoder without the backbone's arguments: the padding mask is "
        "dropped, padded keys get weight",
        "keras_attention/_hub_generation.py",
        "            x = self.decoder(x, training=training, "
        "**decoder_arguments)\n",
        "            x = self.decoder(x, training=training)\n",
    ),
    Mutant(
        "hub_views_layers_mis_keyed",
        "a swapped backbone's attention_scores_layers hands each decoder's "
        "name another decoder's block (reversed): collect_attention "
        "reports each layer's weights under another layer's path",
        "keras_attention/_hub_generation.py",
        "    return blocks\n",
        "    return dict(zip(blocks, reversed(blocks.values())))\n",
    ),
    Mutant(
        "collect_sparse_mark_kept",
        "collect_attention calls a layer on a tensor Keras marks sparse (a "
        "product with a constant: Gemma's scaled embeddings) as it is: "
        "the traced call fails on a sparse placeholder (TF, JAX)",
        "keras_attention/visualize/collect.py",
        "    args, kwargs = keras.tree.map_structure(_dense, (args, kwargs))\n",
        "",
    ),
    Mutant(
        "collect_nested_inputs_by_keyword_dropped",
        "collect_attention drops the inputs of a nested model called by "
        "keyword (keras-hub's Gemma 3 CausalLM: `backbone(inputs=inputs)`)",
        "keras_attention/visualize/collect.py",
        'if k in ("inputs", "training")}',
        'if k == "training"}',
    ),
    Mutant(
        "in_place_left_on",
        "the in-place writes stay on after the Generator's loop: later "
        "cache writes change the caller's tensors",
        "keras_attention/layers/_in_place.py",
        "        _STATE.on = previous\n",
        "        pass\n",
    ),
    Mutant(
        "compiled_write_at_zero",
        "under torch.compile a cache's in-place write at a step's tensor "
        "position lands at slot 0 (the position dropped)",
        "keras_attention/layers/_in_place.py",
        "    positions = at + torch.arange(",
        "    positions = 0 * at + torch.arange(",
    ),
    Mutant(
        "eager_tensors_baked",
        "an eager JAX call of the block kernel compiled once keeps its "
        "first call's padding mask as a constant",
        "keras_attention/ops/_eager.py",
        "            return attend(tensors, static._replace(**arrays))\n",
        "            return attend(tensors, spec)\n",
    ),
    Mutant(
        "eager_users_mod_keyed",
        "the compiled-once eager kernel keys a function of the user's by "
        "its type, so a second closure reuses the first one's program",
        "keras_attention/ops/_eager.py",
        "    if not plain:\n        return _NO_KEY\n",
        "    if not plain:\n        return type(mod).__name__\n",
    ),
    Mutant(
        "eager_plain_values_unkeyed",
        "an eager JAX call of a pure kernel keys its program by which "
        "arguments are plain, not by their values: a second scale reuses "
        "the first one's program",
        "keras_attention/ops/_eager.py",
        "            tuple((where, _static_key(value)) for where, value in "
        "static),\n",
        "            tuple(where for where, _ in static),\n",
    ),
    Mutant(
        "eager_pure_arrays_baked",
        "an eager JAX call of a pure kernel compiles the first call's "
        "arrays in as constants",
        "keras_attention/ops/_eager.py",
        "                given = {**plain, **dict(zip(dynamic, arrays, "
        "strict=True))}\n",
        "                given = {**plain, **{w: values[w] for w in "
        "dynamic}}\n",
    ),
    Mutant(
        "jax_cpu_mapped_steps_dense",
        "the planner keeps JAX's CPU on the fused kernel for dense steps "
        "of 1024 to 2047 queries that it maps afresh on each call",
        "keras_attention/ops/plan.py",
        "        and min(shapes[2], shapes[3]) >= JAX_CPU_MIN_LENGTH\n",
        "        and min(shapes[2], shapes[3]) >= 2 * JAX_CPU_MIN_LENGTH\n",
    ),
    Mutant(
        "jax_blocks_small_unskipped",
        "the planner gives JAX's automatic blocks 256 x 256 also where "
        "every pair is visited (no band or mask to skip by)",
        "keras_attention/ops/plan.py",
        "    return request.kept is not None and request.kept < 1 and short\n",
        "    return True\n",
    ),
    Mutant(
        "jax_fine_blocks_at_any_length",
        "the planner gives JAX's automatic blocks 256 x 256 where a mask "
        "skips pairs at any length, also from 4096 queries and keys",
        "keras_attention/ops/plan.py",
        "        min(lengths) < FINE_BLOCKS_BELOW\n",
        "        min(lengths) < 2**40\n",
    ),
    Mutant(
        "few_rows_head_zero",
        "a decoding step's few query rows read key/value head 0 for every "
        "query head (the fused kernel's contraction of the cache as stored)",
        "keras_attention/ops/_fused.py",
        "        index[first], index[second] = head, head\n",
        "        index[first], index[second] = head, 0\n",
    ),
    Mutant(
        "greedy_nan_uncounted",
        "the generator's greedy id ignores a NaN logit, where argmax takes it",
        "keras_attention/models/generation.py",
        "    held = ops.logical_or(ops.equal(logits, top), "
        "ops.isnan(logits))\n",
        "    held = ops.equal(logits, top)\n",
    ),
    Mutant(
        "band_cache_untyped",
        "the interned band of attention_masks is cached by value only: a "
        "band of 1.0 or True is taken for the cached band of 1, not refused",
        "keras_attention/ops/masks.py",
        "@functools.lru_cache(maxsize=256, typed=True)\n",
        "@functools.lru_cache(maxsize=256)\n",
        reach=("    try:\n        return _interned_band(left, right)\n",),
    ),
    Mutant(
        "ops_score_heads_widened",
        "flex_attention's own score gets its heads cast to float32 like a "
        "score layer's (float32 copies of half heads on a GPU)",
        "keras_attention/ops/engine.py",
        "        if not self.score.casts_to_logits_dtype:\n",
        "        if False:\n",
    ),
    Mutant(
        "score_old_hooks_ignored",
        "a score class that still defines _dot_product_form is accepted "
        "and its form silently ignored",
        "keras_attention/scores/base.py",
        '        for old in ("_dot_product_form", "_additive_form"):\n',
        "        for old in ():\n",
    ),
    Mutant(
        "score_form_unset",
        "a score's form is not set with its class (every score layer "
        "planned as one without a dot-product form)",
        "keras_attention/scores/base.py",
        '        if "form" not in own:\n',
        "        if False:\n",
    ),
    Mutant(
        "flex_mod_numbers_kept",
        "PyTorch's FlexAttention path hands its mods' plain numbers to "
        "the compiled kernel as they are (a new compile for each window "
        "or cap, uncompiled after 8)",
        "keras_attention/ops/_native_torch.py",
        "        with_scalars(mod, lambda number: torch.tensor(number, "
        "device=device))\n",
        "        mod\n",
    ),
    Mutant(
        "mod_scalars_not_converted",
        "`Mod.with_scalars` copies the mod but keeps its plain numbers",
        "keras_attention/ops/_mod_base.py",
        "                numbers[name] = convert(value)\n",
        "                numbers[name] = value\n",
    ),
    Mutant(
        "gated_delta_one_step_no_decay",
        "the gated delta rule's one-step path (decoding a token) writes "
        "into the undecayed state",
        "keras_attention/ops/_gated_delta_scan.py",
        "        final = state * across[0] + _transpose(to_end[0]) @ writes\n",
        "        final = state + _transpose(to_end[0]) @ writes\n",
    ),
    Mutant(
        "gated_delta_decay_after_write",
        "Gated DeltaNet's recurrence decays the state after the write, "
        "not before it (the key reads the undecayed state, the write "
        "decays with it)",
        "keras_attention/ops/_gated_delta_recurrent.py",
        "    carried = key * rows[..., 0] * b\n    to_end = key\n",
        "    carried = key * b\n    to_end = key * rows[..., 0]\n",
    ),
    Mutant(
        "gated_delta_beta_on_key",
        "the write strength β scales the key that reads the state, not the "
        "value written",
        "keras_attention/ops/_gated_delta_recurrent.py",
        "    written = value * b\n",
        "    written = value\n",
    ),
    Mutant(
        "kda_recurrent_decay_on_value_axis",
        "KDA's per-channel decay scales the state's value axis (its "
        "columns), not its key axis (its rows), in the recurrent form",
        "keras_attention/ops/_gated_delta_recurrent.py",
        "    states = state_scan(state, *steps, ops.moveaxis(rows, 1, 0))\n",
        "    columns = ops.swapaxes(rows, -1, -2)\n"
        "    states = state_scan(state, *steps, ops.moveaxis(columns, 1, 0))\n",
    ),
    Mutant(
        "kda_chunk_decay_on_value_axis",
        "KDA's per-channel decay of the state over a chunk scales its "
        "value axis, not its key axis, in the chunked form",
        "keras_attention/ops/_gated_delta_chunk.py",
        "    across = lift(across)[..., None]\n",
        "    across = lift(across)[..., None, :]\n",
    ),
    Mutant(
        "gated_delta_backward_drops_decay",
        "the written-out backward pass of the state's scan carries the "
        "gradient of the state back without its decay",
        "keras_attention/ops/_gated_delta_scan.py",
        "    earlier = up_state + later * a - w_t @ d_writes\n",
        "    earlier = up_state + later - w_t @ d_writes\n",
    ),
    Mutant(
        "gated_delta_solve_gradient_sign",
        "the written-out gradient of the chunk's triangular solve gives "
        "the matrix the opposite sign",
        "keras_attention/ops/_gated_delta_chunk.py",
        "        return -ops.matmul(d_right, _transpose(solved)), d_right\n",
        "        return ops.matmul(d_right, _transpose(solved)), d_right\n",
    ),
    Mutant(
        "gated_delta_doubling_inverse_sign",
        "the chunk's (I + L)⁻¹ by doubling blocks (JAX's path) gives the "
        "merged blocks' lower left quarter the opposite sign",
        "keras_attention/ops/_gated_delta_chunk.py",
        "        below = -ops.matmul(ops.matmul(second, corner), first)\n",
        "        below = ops.matmul(ops.matmul(second, corner), first)\n",
    ),
    Mutant(
        "gated_delta_chunk_start_off_by_one",
        "the decay from a chunk's start to a position leaves out the "
        "position's own",
        "keras_attention/ops/_gated_delta_chunk.py",
        "    start = ops.exp(ops.cumsum(g, axis=rows_axis + 1))\n",
        "    start = ops.exp(ops.cumsum(g, axis=rows_axis + 1) - g)\n",
    ),
    Mutant(
        "gated_delta_decay_sum_includes_own",
        "the chunked form's decay between two positions, a product with a "
        "constant of zeros and ones, also counts the earlier position's "
        "own decay",
        "keras_attention/ops/_gated_delta_chunk.py",
        "    return ops.matmul(terms, ops.cast(strict, g.dtype))\n",
        "    return ops.matmul(terms, ops.cast(lower, g.dtype))\n",
    ),
    Mutant(
        "gated_delta_decay_sum_minus_infinity",
        "the chunked form's decay between two positions, a product, takes "
        "a decay of -inf as it is (0 · -inf in the product: not a number)",
        "keras_attention/ops/_gated_delta_chunk.py",
        "    terms = ops.where(lower, ops.maximum(g, -1e30)[..., None, :], "
        "0.0)\n",
        "    terms = ops.where(lower, g[..., None, :], 0.0)\n",
    ),
    Mutant(
        "gated_delta_no_reset",
        "the chunked form carries the state over a document boundary",
        "keras_attention/ops/_gated_delta_chunk.py",
        "        start = ops.where(first, start, 0.0)\n",
        "        start = start\n",
    ),
    Mutant(
        "gated_delta_conv_state_shifted",
        "GatedDeltaNet's convolution state is one input early after a call",
        "keras_attention/layers/gated_delta_net.py",
        "        return padded[:, length:]\n",
        "        return padded[:, length - 1 : -1]\n",
    ),
    Mutant(
        "sdpa_drops_mask",
        "SDPA on PyTorch is given no mask where the call has one (the "
        "dense mask built, then dropped)",
        "keras_attention/ops/_native_torch.py",
        "    mask, kept = (None, None) if causal else sdpa_mask(call, "
        "q.dtype)\n",
        "    mask, kept = None, (None if causal else sdpa_mask(call, "
        "q.dtype)[1])\n",
    ),
    Mutant(
        "band_block_cut_full",
        "a band's pair of blocks cut by the end of a sequence counted full "
        "in PyTorch's BlockMask (its padded positions unmasked)",
        "keras_attention/ops/_native_torch.py",
        "    whole = (first_q + size <= q_len) & (first_k + size <= k_len)\n",
        "    whole = (first_q < q_len) & (first_k < k_len)\n",
    ),
    Mutant(
        "band_block_left_side_flipped",
        "a band's left side read the wrong way round in PyTorch's "
        "BlockMask (a window's older blocks skipped or kept)",
        "keras_attention/ops/_native_torch.py",
        "        some = some & (last_k - first_q >= low)\n",
        "        some = some & (first_k - last_q >= low)\n",
    ),
    Mutant(
        "shifted_and_loses_band",
        "a shifted AND of band mods (a window after a cache's offset) "
        "reads no limits, so no block is skipped by arithmetic",
        "keras_attention/ops/mods.py",
        "    if isinstance(mod, MaskCombination):\n"
        "        # Each mod shifted, so that an AND of bands keeps its "
        "limits.\n",
        "    if False:\n",
    ),
    Mutant(
        "only_band_ignores_tensor_masks",
        "a band with padding or an explicit mask taken as the call's one "
        "mask: PyTorch's BlockMask of the band alone, the padding lost",
        "keras_attention/ops/_call_mods.py",
        "    tensors = (masks.key_mask, masks.query_mask, "
        "masks.attention_mask)\n",
        "    tensors = ()\n",
    ),
    Mutant(
        "sdpa_lse_off_by_constant",
        "the log-sum-exp of PyTorch's CPU flash kernel is off by a "
        "constant (a scale or a log base mistaken)",
        "keras_attention/ops/_native_torch.py",
        "        lse = lse.float()\n",
        "        lse = lse.float() + 1.0\n",
    ),
    Mutant(
        "query_key_norm_after_rotation",
        "`query_key_norm` normalizes the heads after the rotation instead "
        "of before (Qwen3's and Gemma 3's order)",
        "keras_attention/layers/_multi_head_base.py",
        "        k = k if norm is None else norm.key(k)\n"
        "        if rotary is not None:\n"
        "            q, k = _rotation.rotate_pair(rotary, q, k, start)\n",
        "        if rotary is not None:\n"
        "            q, k = _rotation.rotate_pair(rotary, q, k, start)\n"
        "        k = k if norm is None else norm.key(k)\n",
    ),
    Mutant(
        "update_mask_ignored",
        "a token masked by `cache_update_mask` is written to the cache "
        "all the same (Gemma 3's batched generate overwrites prompts)",
        "keras_attention/layers/_update_mask.py",
        "    return ops.where(ops.reshape(mask, shape), update, old)\n",
        "    return update\n",
    ),
    Mutant(
        "query_pre_attn_scalar_ignored",
        "`query_pre_attn_scalar` leaves the queries at the score's "
        "`1 / sqrt(head_dim)` (Gemma's scale lost)",
        "keras_attention/layers/_multi_head_base.py",
        "        factor = (query.shape[-1] / scalar) ** 0.5\n",
        "        factor = 1.0\n",
    ),
    Mutant(
        "block_weights_unmasked",
        "the blocks' backward recomputes its weights with the floored exp "
        "and does not mask them afterwards (masked pairs get gradients)",
        "keras_attention/ops/_kernel.py",
        "        weights = blocks.mask_pairs("
        "exp_floored(s_mod), i, j, full, 0.0)\n",
        "        weights = exp_floored(s_mod)\n",
    ),
    Mutant(
        "lse_floor_too_high",
        "the floored exp of the blocks' weights and the masked log-sum-exp "
        "floors its argument at -8 where -80 was meant (weights of 3e-4 "
        "where they are far smaller)",
        "keras_attention/ops/logits.py",
        "EXP_FLOOR = -80.0\n",
        "EXP_FLOOR = -8.0\n",
        reach=("        x = ops.maximum(x, EXP_FLOOR)\n",),
    ),
    Mutant(
        "narrow_band_ignored",
        "a band at most 256 keys wide (a sliding window) runs in the "
        "automatic blocks of 512, 3-4 keys computed for each one kept",
        "keras_attention/ops/plan.py",
        "        if not chunk_size and _narrow(request.limits):\n",
        "        if False:\n",
    ),
    Mutant(
        "bounds_band_only",
        "the planner reads the limits of the call's band only, not of the "
        "mask mods that are bands (a window given as and_masks counts as "
        "an unknown mod, in blocks of 512)",
        "keras_attention/ops/masks.py",
        "        mods = (self.band, *self.mask_mods)\n",
        "        mods = (self.band,)\n",
    ),
    Mutant(
        "band_grid_key_offset_dropped",
        "a band on its grid reads key `c` at `c`, not at `key_offset + c` "
        "(a block of keys of a longer sequence)",
        "keras_attention/ops/masks.py",
        '        cols = cols + ops.cast(key_offset, "int32")\n',
        "        cols = cols\n",
    ),
    Mutant(
        "band_grid_one_offset_for_all",
        "a band on its grid reads the first sequence's query offset for "
        "every sequence (a paged cache's ragged batch)",
        "keras_attention/ops/masks.py",
        "            rows = query_offset[:, None] + rows[None]\n",
        "            rows = query_offset[:1, None] + rows[None]\n",
    ),
)


def _copy_repository(destination):
    ignore = shutil.ignore_patterns(
        ".git",
        "__pycache__",
        ".pytest_cache",
        ".hypothesis",
        "runs",
        "*.egg-info",
    )
    shutil.copytree(ROOT, destination, ignore=ignore)


def _plant(copy, mutant):
    path = os.path.join(copy, mutant.path)
    with open(path, encoding="utf-8") as f:
        source = f.read()
    count = source.count(mutant.old)
    if count != 1:
        raise SystemExit(
            f"error: mutant {mutant.name}: the text to replace occurs "
            f"{count} times in {mutant.path} (expected once); update "
            "tests/mutants.py"
        )
    with open(path, "w", encoding="utf-8") as f:
        f.write(source.replace(mutant.old, mutant.new))


# Where the probes of a --reach run write, in the copy.
PROBES = ".mutant-probes.tsv"
_HITS = set()


def hit(name):
    """Records that mutant `name`'s statement ran, once per test module.

    The probes of a `--reach` run call it. The test is pytest's current
    one, which subprocesses inherit in their environment, else the test
    module on the stack (a module's import); "" if neither is known.
    """
    where = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[0]
    if not where:
        frame = sys._getframe(1)
        while frame is not None and not where:
            path = os.path.relpath(frame.f_code.co_filename, ROOT)
            if path.startswith("tests" + os.sep) and os.path.basename(
                path
            ).startswith("test_"):
                where = path.replace(os.sep, "/")
            frame = frame.f_back
    if (name, where) in _HITS:
        return
    _HITS.add((name, where))
    with open(os.path.join(ROOT, PROBES), "a", encoding="utf-8") as f:
        f.write(f"{name}\t{where}\n")


def _probe_lines(source, mutant):
    """Line numbers (from 1) before which `mutant`'s probes go, or None.

    The innermost statement holding `old` (or each of `reach`), if it
    starts a line inside a function; None for one outside any function,
    which runs at import.
    """
    if mutant.reach:
        offsets = [source.index(text) for text in mutant.reach]
    else:
        offsets = [source.index(mutant.old)]
    tree = ast.parse(source)
    parents = {
        child: node
        for node in ast.walk(tree)
        for child in ast.iter_child_nodes(node)
    }
    lines = source.split("\n")
    found = []
    for offset in offsets:
        line = source.count("\n", 0, offset) + 1
        holding = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.stmt)
            and node.lineno <= line <= node.end_lineno
        ]
        statement = max(holding, key=lambda n: (n.lineno, -n.end_lineno))
        if lines[statement.lineno - 1][: statement.col_offset].strip():
            return None
        node = statement
        while node in parents and not isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef)
        ):
            node = parents[node]
        if node not in parents:
            return None
        found.append((statement.lineno, statement.col_offset))
    return found


def _plant_probes(copy, mutants):
    """Puts each mutant's probes into `copy`: the names without a site."""
    unplaced = []
    sites = {}
    for mutant in mutants:
        path = os.path.join(copy, mutant.path)
        with open(path, encoding="utf-8") as f:
            lines = _probe_lines(f.read(), mutant)
        if lines is None:
            unplaced.append(mutant.name)
            continue
        for line, indent in lines:
            sites.setdefault(path, []).append((line, indent, mutant.name))
    for path, places in sites.items():
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for line, indent, name in sorted(places, reverse=True):
            probe = f'__import__("tests.mutants").mutants.hit({name!r})'
            lines.insert(line - 1, " " * indent + probe)
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
    return unplaced


def reach(mutants, pytest_args, environment):
    """`{name: test modules that run its statement, or None: all}`.

    One run of the lane in a copy with the probes; its failures are not
    looked at.
    """
    with tempfile.TemporaryDirectory() as parent:
        copy = _prepare_copy(parent)
        unplaced = _plant_probes(copy, mutants)
        environment = dict(environment, PYTHONPATH=copy)
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", *pytest_args],
            cwd=copy,
            env=environment,
            capture_output=True,
            text=True,
        )
        probes = os.path.join(copy, PROBES)
        rows = []
        if os.path.exists(probes):
            with open(probes, encoding="utf-8") as f:
                rows = [line.split("\t") for line in f.read().splitlines()]
    reached = {m.name: set() for m in mutants}
    for name, where in rows:
        if reached[name] is not None:
            reached[name] = None if not where else reached[name] | {where}
    for name in unplaced:
        reached[name] = None
    return reached


def _prepare_copy(parent):
    """Copies the repository into `parent`/repo, shared/ beside it."""
    copy = os.path.join(parent, "repo")
    _copy_repository(copy)
    # shared/ beside the repository, as in a checkout.
    shared = os.path.join(os.path.dirname(ROOT), "shared")
    if os.path.isdir(shared):
        os.symlink(shared, os.path.join(parent, "shared"))
    return copy


def _check_imports_the_copy(copy, environment):
    """Fails unless a script in the copy's examples/ imports the copy."""
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "import keras_attention; print(keras_attention.__file__)",
        ],
        cwd=os.path.join(copy, "examples"),
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    expected = os.path.join(copy, "keras_attention", "__init__.py")
    if os.path.realpath(found) != os.path.realpath(expected):
        raise SystemExit(
            f"error: a subprocess in the copy imports {found}, not the "
            f"copy's {expected}"
        )


def run(mutant, pytest_args, environment):
    """Runs the suite against `mutant`: (failed test ids, seconds, output)."""
    with tempfile.TemporaryDirectory() as parent:
        copy = _prepare_copy(parent)
        _plant(copy, mutant)
        # The copy's package, not the installed one (an editable install
        # points at some checkout), in pytest and in every subprocess the
        # tests start: the examples run as scripts, whose own folder is
        # first on their path.
        environment = dict(environment, PYTHONPATH=copy)
        _check_imports_the_copy(copy, environment)
        start = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-rfE", *pytest_args],
            cwd=copy,
            env=environment,
            capture_output=True,
            text=True,
        )
        seconds = time.monotonic() - start
    output = result.stdout + result.stderr
    # "FAILED id - message": an id may hold spaces (parameters), so it ends
    # at the " - " of the message or at the end of the line.
    failed = sorted(
        set(re.findall(r"^(?:FAILED|ERROR) (.+?)(?: - |$)", output, re.M))
    )
    if result.returncode not in (0, 1):
        failed.append(f"(pytest exit {result.returncode})")
    return failed, seconds, output


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "names",
        nargs="*",
        help="mutants to run (default: all): "
        + ", ".join(m.name for m in MUTANTS),
    )
    parser.add_argument(
        "--backend",
        default="tensorflow",
        help="KERAS_BACKEND of the lane to run (default: %(default)s)",
    )
    parser.add_argument(
        "--reach",
        action="store_true",
        help="run each mutant on the test modules that execute its "
        "statement (found by a first, probed run of the lane)",
    )
    argv = sys.argv[1:] if argv is None else list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    pytest_args = argv[split + 1 :] or ["-n", "auto"]
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"unknown mutants: {', '.join(sorted(unknown))}")
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    environment = dict(os.environ, KERAS_BACKEND=args.backend)
    environment.setdefault("HYPOTHESIS_PROFILE", "mutants")
    reached = {}
    if args.reach:
        reached = reach(chosen, pytest_args, environment)
    survivors = []
    for mutant in chosen:
        modules = reached.get(mutant.name)
        if args.reach:
            where = "the whole lane" if modules is None else sorted(modules)
            print(f"## {mutant.name} is reached by: {where}")
        if modules == set():
            survivors.append(mutant.name)
            continue
        failed, seconds, output = run(
            mutant, [*pytest_args, *sorted(modules or ())], environment
        )
        print(f"## {mutant.name}: {mutant.what} ({seconds:.0f} s)")
        print(f"   {len(failed)} failing tests")
        for test in failed:
            print(f"   - {test}")
        if not failed:
            survivors.append(mutant.name)
            print(output[-3000:])
        sys.stdout.flush()
    if survivors:
        print(f"survived: {', '.join(survivors)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
