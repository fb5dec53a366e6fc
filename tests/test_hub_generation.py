"""keras_attention.hub.language_model: a swapped keras-hub model run by our
compiled generation (`keras_attention.models.Generator`) with each of our
caches.

Two references: keras-hub's own `generate` on the model before the swap
(greedy, its static cache), and each sequence decoded alone (the paged
cache's ragged batch). The tiny random models are tests/test_hub.py's.
"""

import numpy as np
import pytest

import keras_attention
from keras_attention import hub
from keras_attention.models import Generator
from tests.layer_basics import to_np
from tests.test_hub import _batch
from tests.test_hub import _causal_lm
from tests.test_hub import _generate

pytest.importorskip("keras_hub", reason="keras-hub is the model")

NEW_TOKENS = 5


def _prompt(seed=4, batch=2, length=4):
    rng = np.random.default_rng(seed)
    return rng.integers(1, 40, size=(batch, length)).astype("int32")


def _keras_hubs_tokens(causal_lm, prompt, new_tokens=NEW_TOKENS):
    """keras-hub's greedy `generate` of `prompt` (every row its length)."""
    batch, length = prompt.shape
    padding = np.zeros((batch, new_tokens), "int32")
    mask = np.arange(length + new_tokens)[None] < length
    prompt = {
        "token_ids": np.concatenate([prompt, padding], axis=1),
        "padding_mask": np.repeat(mask, batch, axis=0),
    }
    return to_np(_generate(causal_lm, prompt)["token_ids"])


def _cache_kinds(generator, batch=2, length=9):
    return [type(cache).__name__ for cache in generator.caches(batch, length)]


def test_gemma3_rolling_and_int8_caches_give_keras_hubs_tokens():
    # Five sliding layers on a RollingCache, a global one on int8 entries
    # (a QuantizedCache); the embeddings scaled, the final logits
    # soft-capped. One compile of the generation (an XLA compile of six
    # layers is the cost): int8, whose tokens equal keras-hub's here, where
    # no two logits are within the rounding of each other. (keras-hub's
    # tensor, `KeyValueCache`: Llama 3 in docs/hub.md's example, which
    # tests/test_doc_blocks.py runs.)
    causal_lm = _causal_lm("gemma3")
    prompt = _prompt()
    want = _keras_hubs_tokens(causal_lm, prompt)
    swapped = hub.swap_attention(causal_lm)
    assert swapped is causal_lm
    model = hub.language_model(swapped)
    # The model is the swapped one's layers: its logits are the same.
    logits = to_np(swapped({"token_ids": want, "padding_mask": want >= 0}))
    np.testing.assert_allclose(to_np(model(want)), logits, atol=1e-6)
    generator = Generator(model, cache_dtype="int8")
    kinds = _cache_kinds(generator)
    assert kinds == ["RollingCache"] * 5 + ["QuantizedCache"]
    np.testing.assert_array_equal(generator.generate(prompt, NEW_TOKENS), want)


def _parts(model):
    names = ("token_embedding", "final_norm", "logits")
    blocks = [b for b in model.layers if b.name.startswith("block_")]
    return (*(model.get_layer(n) for n in names), blocks)


def _run(model, ids, caches, index):
    """The next-id logits after `ids` at `index`, and the caches written."""
    embedding, norm, logits, blocks = _parts(model)
    x, written = embedding(ids), []
    for block, cache in zip(blocks, caches, strict=True):
        x, cache = block(x, cache=cache, cache_update_index=index)
        written.append(cache)
    return to_np(logits(norm(x[:, -1:])))[:, 0], written


def _paged_greedy(model, prompts, steps, chunk=3):
    """Greedy ids of `prompts` (of different lengths, multiples of
    `chunk`) in one batch on a `PagedCache` per block: each prompt alone
    into the pool, `chunk` tokens a call (one shape: each new shape is a
    compile of every op on eager JAX), then one token of every sequence a
    step, each at its own position."""
    blocks = _parts(model)[3]
    caches = [
        keras_attention.PagedCache.allocate(
            block.self_attention,
            num_pages=12,
            page_size=4,
            pages_per_sequence=3,
        )
        for block in blocks
    ]
    lengths, ids = [len(p) for p in prompts], [list(p) for p in prompts]
    for row, prompt in enumerate(prompts):
        caches = [c.join().reserve(lengths[: row + 1]) for c in caches]
        alone = [cache.select([row]) for cache in caches]
        for start in range(0, len(prompt), chunk):
            tokens = np.array([prompt[start : start + chunk]], "int32")
            last, alone = _run(model, tokens, alone, np.array([start]))
        caches = [c.with_pages(a) for c, a in zip(caches, alone, strict=True)]
        ids[row].append(int(last[0].argmax()))
    for _ in range(steps - 1):
        caches = [cache.reserve([n + 1 for n in lengths]) for cache in caches]
        tokens = np.array([row[-1:] for row in ids], "int32")
        last, caches = _run(model, tokens, caches, np.array(lengths, "int32"))
        lengths = [n + 1 for n in lengths]
        for row, logits in zip(ids, last, strict=True):
            row.append(int(logits.argmax()))
    return ids


def test_a_model_on_keras_hubs_attention_is_refused():
    with pytest.raises(ValueError, match="Received: a Llama3Backbone on"):
        hub.language_model(_causal_lm("llama3").backbone)


def _keras_hubs_ragged_tokens(causal_lm, prompts, new_tokens=NEW_TOKENS):
    """keras-hub's greedy `generate` of `prompts` (of different lengths)
    in one right-padded batch: each row's ids, as decoded alone."""
    total = max(map(len, prompts)) + new_tokens
    ids = np.zeros((len(prompts), total), "int32")
    for row, prompt in enumerate(prompts):
        ids[row, : len(prompt)] = prompt
    lengths = np.array([len(p) for p in prompts])
    prompt = {
        "token_ids": ids,
        "padding_mask": np.arange(total)[None] < lengths[:, None],
    }
    tokens = to_np(_generate(causal_lm, prompt)["token_ids"])
    return [
        list(row[: n + new_tokens])
        for row, n in zip(tokens, lengths, strict=True)
    ]


def test_mistral_rolling_and_paged_caches_and_its_attention_weights():
    # One tiny Mistral (a window of 3 on each layer) for the three: our
    # generation on RollingCaches, a PagedCache ragged batch (sequences of
    # 3 and 6 tokens, the second written 3 at a time, pages of 4
    # positions) and collect_attention.
    causal_lm = _causal_lm("mistral")
    prompts = [[5, 9, 2], [7, 1, 3, 8, 11, 4]]
    want = _keras_hubs_ragged_tokens(causal_lm, prompts)
    swapped = hub.swap_attention(causal_lm)
    model = hub.language_model(swapped)
    generator = Generator(model)
    assert _cache_kinds(generator) == ["RollingCache"] * 2
    alone = generator.generate(np.array(prompts[1:], "int32"), NEW_TOKENS)
    np.testing.assert_array_equal(alone[0], want[1])
    # Each sequence of the ragged batch as keras-hub decodes it alone.
    assert _paged_greedy(model, prompts, NEW_TOKENS) == want

    ids = alone[:, :6]
    maps = keras_attention.visualize.collect_attention(model, ids)
    assert list(maps) == ["block_0", "block_1"]
    query, key = np.indices((6, 6))
    outside = (key > query) | (key <= query - 3)  # causal, a window of 3
    for weights in maps.values():
        assert weights.shape == (1, 4, 6, 6)
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        assert (weights[..., outside] == 0).all()
    # The first layer's weights are our layer's on the decoder's normed
    # input, called on its own.
    decoder = swapped.backbone.transformer_layers[0]
    x = swapped.backbone.token_embedding(ids)
    x = decoder._self_attention_layernorm(x)
    attention = decoder._self_attention_layer.attention
    _, weights = attention(
        x, x, use_causal_mask=True, return_attention_scores=True
    )
    np.testing.assert_allclose(maps["block_0"], to_np(weights), atol=1e-6)


def _our_weights(decoder, x, mask):
    """Our attention layer of `decoder`, called on its own on the
    decoder's normed input `x`: its weights."""
    attention = decoder._self_attention_layer.attention
    x = decoder._self_attention_layernorm(x)
    _, weights = attention(
        x, x, attention_mask=mask, return_attention_scores=True
    )
    return to_np(weights)


def test_collect_attention_reads_a_swapped_causal_lm_itself():
    # No language model in between: the CausalLM as keras-hub gives it,
    # a right-padded batch (keras-hub's dict) and bare token ids.
    causal_lm = _causal_lm("llama3")
    batch = _batch(length=6, lengths=(6, 4))
    with pytest.raises(ValueError, match="swap_attention\\(model\\)` first"):
        keras_attention.visualize.collect_attention(causal_lm, batch)
    hub.swap_attention(causal_lm)
    maps = keras_attention.visualize.collect_attention(causal_lm, batch)
    paths = [f"llama3_backbone/transformer_layer_{i}" for i in range(2)]
    assert list(maps) == paths
    query, key = np.indices((6, 6))
    mask = (key <= query)[None] & np.asarray(batch["padding_mask"])[:, None]
    for weights in maps.values():
        assert weights.shape == (2, 4, 6, 6)
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        # Causal, and the padded keys (the second row's last two) at 0.
        assert (weights.transpose(0, 2, 3, 1)[~mask] == 0).all()
    # The first layer's weights are our layer's on the decoder's input,
    # called on its own with keras-hub's mask.
    backbone = causal_lm.backbone
    decoder = backbone.transformer_layers[0]
    x = backbone.token_embedding(batch["token_ids"])
    want = _our_weights(decoder, x, mask)
    np.testing.assert_allclose(maps[paths[0]], want, atol=1e-6)

    # Bare ids: every token real (a padding mask of ones), causal only.
    ids = np.asarray(batch["token_ids"])
    maps = keras_attention.visualize.collect_attention(causal_lm, ids)
    causal = np.broadcast_to(key <= query, (2, 6, 6))
    want = _our_weights(decoder, x, causal)
    np.testing.assert_allclose(maps[paths[0]], want, atol=1e-6)
    assert (maps[paths[0]][1, ..., 4:] > 0).any()
