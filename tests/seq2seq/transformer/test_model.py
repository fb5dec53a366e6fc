"""TransformerTranslator: the decoders with and without the cache, teacher
forcing, raw text, saving."""

import os

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention.data.translation import make_synthetic_translation
from keras_attention.seq2seq.text_translator import target_text
from keras_attention.seq2seq.transformer import TransformerTranslator
from keras_attention.text import tokenize
from tests.seq2seq._arrays import assert_allclose
from tests.seq2seq._arrays import to_numpy

DATA = make_synthetic_translation(40, seed=5)


def _vocabulary(texts):
    return ["", "[UNK]", *sorted({w for t in texts for w in t.split()})]


SOURCE_VOCABULARY = _vocabulary(tokenize(t) for t in DATA.sources)
TARGET_VOCABULARY = _vocabulary(target_text(t) for t in DATA.targets)


def _model(**kwargs):
    defaults = {
        "model_dim": 8,
        "num_layers": 2,
        "num_heads": 2,
        "feed_forward_dim": 16,
        "max_output_length": 6,
        "dropout": 0.0,
    }
    keras.utils.set_random_seed(3)
    model = TransformerTranslator(
        SOURCE_VOCABULARY, TARGET_VOCABULARY, **{**defaults, **kwargs}
    )
    # Padding is never a decoded token, so teacher forcing sees the same
    # target as decoding did.
    bias = np.zeros(len(TARGET_VOCABULARY), "float32")
    bias[0] = -1e4
    model.output_layer.bias.assign(bias)
    return model


def _sources(model):
    return model.vectorize_sources(DATA.sources[:3])


# Greedy and beam run in the TensorFlow lane only (each compiles two
# decoding loops, about 25 s on JAX); on JAX and PyTorch the sample case
# here steps the same cached cell, and
# test_cell.py::test_beam_search_is_the_same_with_and_without_the_cache
# runs beam search on it.
@pytest.mark.parametrize(
    "decoding, options",
    [
        pytest.param("greedy", {}, marks=pytest.mark.tensorflow_lane),
        pytest.param(
            "beam",
            {"beam_width": 3, "length_penalty": 0.6},
            marks=pytest.mark.tensorflow_lane,
        ),
        ("sample", {"seed": 4, "temperature": 0.8}),
    ],
)
def test_cached_and_uncached_decoding_give_the_same_translations(
    decoding, options
):
    model = _model(num_key_value_heads=1)
    ids = _sources(model)
    cached = model.decode(ids, decoding=decoding, **options)
    uncached = model.decode(ids, decoding=decoding, use_cache=False, **options)
    assert (
        to_numpy(cached.tokens).tolist() == to_numpy(uncached.tokens).tolist()
    )
    assert_allclose(cached.scores, uncached.scores, atol=1e-4)
    assert_allclose(cached.alignments, uncached.alignments, atol=1e-5)


def test_local_and_global_layers_decode_as_their_full_pass(tmp_path):
    """Gemma 3's alternation behind `sliding_window`: layer 1 of 2 is
    global (`global_every=2`), layer 0 local in the encoder and the
    decoder; cached decoding (a rolling cache for the local layer, int8
    entries for the global one) saves and loads with the options."""
    model = _model(sliding_window=2, global_every=2)
    assert [b.sliding_window for b in model.decoder_blocks] == [2, None]
    assert [b.sliding_window for b in model.encoder_blocks] == [2, None]
    ids = _sources(model)
    options = {"decoding": "sample", "seed": 4, "temperature": 0.8}
    cached = model.decode(ids, **options)
    uncached = model.decode(ids, use_cache=False, **options)
    assert (
        to_numpy(cached.tokens).tolist() == to_numpy(uncached.tokens).tolist()
    )
    assert_allclose(cached.scores, uncached.scores, atol=1e-4)
    config = model.get_config()
    assert (config["sliding_window"], config["global_every"]) == (2, 2)
    quantized = TransformerTranslator.from_config(
        {**config, "cache_dtype": "int8"}
    )
    quantized.set_weights(model.get_weights())
    int8 = quantized.decode(ids, **options)
    assert_allclose(int8.scores, cached.scores, atol=0.05)
    path = str(tmp_path / "local.keras")
    quantized.save(path)
    again = keras.saving.load_model(path)
    assert again.cache_dtype == "int8" and again.sliding_window == 2
    config["cache_dtype"] = "float8_e4m3fn"
    if keras.backend.backend() == "tensorflow":
        # The decoding loop is a graph while loop: no float8 kernels.
        with pytest.raises(ValueError, match="cache_dtype='float8_e4m3fn'"):
            TransformerTranslator.from_config(config)
        return
    float8 = TransformerTranslator.from_config(config)
    float8.set_weights(model.get_weights())
    assert_allclose(
        float8.decode(ids, **options).scores, cached.scores, atol=0.2
    )


def test_greedy_scores_are_the_teacher_forced_log_probabilities():
    model = _model()
    ids = _sources(model)
    result = model.decode(ids)
    tokens, lengths = to_numpy(result.tokens), to_numpy(result.lengths)
    target_input = np.concatenate(
        [np.full((3, 1), model.start_id), tokens[:, :-1]], axis=1
    )
    logits, alignments = model.teacher_forcing(ids, target_input)
    log_probs = to_numpy(keras.ops.log_softmax(logits, axis=-1))
    chosen = np.take_along_axis(log_probs, tokens[..., None], -1)[..., 0]
    for i in range(3):
        n = lengths[i]
        assert chosen[i, :n].sum() == pytest.approx(
            float(to_numpy(result.scores)[i]), abs=1e-4
        )
        assert_allclose(
            to_numpy(alignments)[i, :n],
            to_numpy(result.alignments)[i, :n],
            atol=1e-5,
        )


def test_encoder_attention_is_each_blocks_self_attention():
    model = _model()
    sources = _sources(model)
    maps = model.encoder_attention(sources)
    assert list(maps) == [
        f"{model.name}/encoder_{i}/self_attention" for i in range(2)
    ]
    # Block by block, each block's weights are those of its sublayer.
    mask = sources != 0
    x = model.source_embedding(sources)
    for block, weights in zip(model.encoder_blocks, maps.values(), strict=True):
        h = block.self_attention_norm(x)
        _, expected = block.self_attention(
            h, mask=mask, return_attention_scores=True
        )
        assert_allclose(weights, expected, atol=1e-5)
        x = block(x, padding_mask=mask)
    # The RNN translator's encoder has no attention to show.
    rnn = keras_attention.seq2seq.Translator(
        SOURCE_VOCABULARY, TARGET_VOCABULARY, embedding_dim=4, units=4
    )
    assert rnn.encoder_attention(sources) == {}


def test_tied_embeddings_reuse_the_target_table_and_load_back(tmp_path):
    model = _model(tie_embeddings=True)
    h = np.random.default_rng(0).normal(size=(3, 2, 8)).astype("float32")
    table = to_numpy(model.target_embedding.embeddings)
    bias = to_numpy(model.output_layer.bias)
    expected = h @ table.T / np.sqrt(8.0) + bias
    assert_allclose(model.output_layer(h), expected, atol=1e-4)
    # One table, not a Dense kernel beside it; every weight once.
    untied = _model()
    assert len(model.trainable_weights) == len(untied.trainable_weights) - 1
    assert len({id(w) for w in model.weights}) == len(model.weights)
    ids = _sources(model)
    target = np.full((3, 2), model.start_id)
    logits, _ = model.teacher_forcing(ids, target)
    path = os.path.join(tmp_path, "tied.keras")
    model.save(path)
    loaded = keras_attention.load_model(path)
    assert loaded.get_config()["tie_embeddings"] is True
    assert loaded.output_layer.embedding is loaded.target_embedding
    assert_allclose(loaded.teacher_forcing(ids, target)[0], logits, atol=1e-5)


def test_translates_raw_text_and_loads_back(tmp_path):
    model = _model()
    translations = model.translate(DATA.sources[:2], beam_width=2)
    path = os.path.join(tmp_path, "transformer.keras")
    model.save(path)
    loaded = keras_attention.load_model(path)
    assert isinstance(loaded, TransformerTranslator)
    assert loaded.translate(DATA.sources[:2], beam_width=2) == translations
    assert loaded.get_config()["num_layers"] == 2
    with pytest.raises(ValueError, match="at least one word"):
        model.translate("")


def test_refuses_bad_sizes_and_source_ranks():
    with pytest.raises(ValueError, match="num_layers"):
        _model(num_layers=0)
    with pytest.raises(ValueError, match="multiple of `num_heads`"):
        _model(model_dim=10, num_heads=4)
    model = _model()
    with pytest.raises(ValueError, match=r"`source_ids` of shape"):
        model.decode(np.array([2, 3]))
    with pytest.raises(ValueError, match="decoding"):
        model.decode(_sources(model), decoding="nucleus")
