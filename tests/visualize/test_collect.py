"""`collect_attention`: every attention layer's weights, on every backend.

Each model's weights are checked against the layer called directly with
`return_attention_scores=True` on the same inputs (the model's own
intermediate outputs, through `keras.Model(x, tensor)`), so a wrong layer,
axis or mask shows. In the PyTorch lane too (`TORCH_LANE`).
"""

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention import visualize
from tests.layer_basics import to_np

T, D = 5, 8


def _scores(layer, *args, **kwargs):
    return to_np(layer(*args, return_attention_scores=True, **kwargs)[1])


def _joint_model():
    """Ours and Keras's layers in a chain, one of them in a nested model."""
    x = keras.Input((T, D), name="x")
    encoder = keras_attention.SelfAttention(num_heads=2, name="encoder")
    h = encoder(x)
    inner_x = keras.Input((T, D))
    inner = keras.Model(
        inner_x,
        keras_attention.MultiHeadAttention(3, 4, name="mha")(inner_x, inner_x),
        name="inner",
    )
    h2 = inner(h)
    keras_mha = keras.layers.MultiHeadAttention(2, 4, name="keras_mha")
    k = keras_mha(h2, h2)
    gqa = keras.layers.GroupQueryAttention(4, 4, 2, name="keras_gqa")
    g = gqa(k, k)
    pooled, hops = keras_attention.StructuredSelfAttention(
        4, 3, 0.0, name="hops"
    )(g, return_attention_scores=True)
    model = keras.Model(x, [pooled, hops])
    parts = keras.Model(x, [h, h2, k, g])
    return model, parts


@pytest.fixture(scope="module")
def joint():
    return _joint_model()


def test_every_layer_of_a_functional_model_by_path(joint, rng):
    model, parts = joint
    data = rng.normal(size=(2, T, D)).astype("float32")
    maps = visualize.collect_attention(model, data)
    assert list(maps) == [
        "encoder",
        "inner/mha",
        "keras_mha",
        "keras_gqa",
        "hops",
    ]
    h, h2, k, g = (to_np(p) for p in parts(data))
    layers = {layer.name: layer for layer in model.layers}
    mha = layers["inner"].get_layer("mha")
    expected = {
        "encoder": _scores(layers["encoder"], data),
        "inner/mha": _scores(mha, h, h),
        "keras_mha": _scores(layers["keras_mha"], h2, h2),
        "keras_gqa": _scores(layers["keras_gqa"], k, k),
        "hops": _scores(layers["hops"], g)[:, :, None, :],
    }
    for path, want in expected.items():
        assert maps[path].shape == want.shape, path
        np.testing.assert_allclose(maps[path], want, atol=1e-5, err_msg=path)
    assert maps["hops"].shape == (2, 3, 1, T)
    assert maps.tokens is None and maps.query_tokens is None


def test_the_model_is_left_as_it_was(joint, rng):
    model, _ = joint
    data = rng.normal(size=(2, T, D)).astype("float32")
    config = model.get_config()
    weights = [to_np(w) for w in model.weights]
    before = [to_np(y) for y in model.predict_on_batch(data)]
    visualize.collect_attention(model, data)
    assert model.get_config() == config
    assert len(model.weights) == len(weights)
    for got, want in zip(model.weights, weights, strict=True):
        np.testing.assert_array_equal(to_np(got), want)
    after = [to_np(y) for y in model.predict_on_batch(data)]
    for got, want in zip(after, before, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_sequential_model_with_a_padding_mask():
    model = keras.Sequential(
        [
            keras.Input((4,), dtype="int32"),
            keras.layers.Embedding(10, D, mask_zero=True, name="embed"),
            keras_attention.SelfAttention(num_heads=2, name="self"),
            keras_attention.AttentionPooling(name="pool"),
        ]
    )
    ids = np.array([[3, 4, 5, 0], [6, 0, 0, 0]], "int32")
    maps = visualize.collect_attention(model, ids)
    assert {p: w.shape for p, w in maps.items()} == {
        "self": (2, 2, 4, 4),
        "pool": (2, 1, 1, 4),
    }
    embedded = model.get_layer("embed")(ids)
    want = _scores(model.get_layer("self"), embedded)
    np.testing.assert_allclose(maps["self"], want, atol=1e-5)
    # The padding mask reached the layers: padded keys get no weight.
    assert np.all(maps["self"][1, :, :, 1:] == 0)
    assert np.all(maps["pool"][1, 0, 0, 1:] == 0)
    np.testing.assert_allclose(maps["pool"].sum(-1), 1.0, atol=1e-5)


def test_single_head_layers_and_a_shared_layer_get_one_path_per_call(rng):
    q = keras.Input((3, D))
    v = keras.Input((T, D))
    attention = keras_attention.Attention(name="cross")
    first = attention(q, v)
    second = attention(first, v)
    keras_attention_layer = keras.layers.Attention(name="keras_dot")
    third = keras_attention_layer([second, v])
    # A call argument of the model's graph reaches the layer.
    causal = keras.layers.MultiHeadAttention(1, 4, name="causal")
    model = keras.Model([q, v], causal(third, third, use_causal_mask=True))
    data = [rng.normal(size=(2, 3, D)), rng.normal(size=(2, T, D))]
    data = [d.astype("float32") for d in data]
    maps = visualize.collect_attention(model, data)
    assert {p: w.shape for p, w in maps.items()} == {
        "cross": (2, 1, 3, T),
        "cross:1": (2, 1, 3, T),
        "keras_dot": (2, 1, 3, T),
        "causal": (2, 1, 3, 3),
    }
    assert np.all(np.triu(maps["causal"][0, 0], k=1) == 0)
    assert np.all(maps["causal"][0, 0][np.tril_indices(3)] > 0)
    np.testing.assert_allclose(
        maps["cross"][:, 0], _scores(attention, data[0], data[1]), atol=1e-5
    )
    out = to_np(attention(data[0], data[1]))
    np.testing.assert_allclose(
        maps["cross:1"][:, 0], _scores(attention, out, data[1]), atol=1e-5
    )


def _translator():
    return keras_attention.seq2seq.Translator(
        ["", "[UNK]", "ein", "hund"],
        ["", "[UNK]", "[start]", "[end]", "a", "dog"],
        embedding_dim=4,
        units=4,
        max_output_length=3,
    )


def test_translator_alignments_with_source_and_decoded_words():
    """One decode per lane (decoding compiles on JAX); the test below
    compares with `model.decode` itself."""
    model = _translator()
    maps = visualize.collect_attention(model, np.array([[2, 3], [3, 0]]))
    (path,) = maps
    assert path.startswith(model.name + "/")
    assert maps[path].shape == (2, 1, 3, 2)
    assert maps.tokens == [["ein", "hund"], ["hund"]]
    # The alignments of each decoded word are a distribution over the
    # real source words (padding gets none).
    for i, words in enumerate(maps.query_tokens):
        rows = maps[path][i, 0, : len(words)]
        np.testing.assert_allclose(rows.sum(-1), 1.0, atol=1e-5)
    assert np.all(maps[path][1, 0, :, 1] == 0)


@pytest.mark.tensorflow_lane
def test_translator_equals_decode_and_takes_text():
    """What `model.decode` gives, from text too (the other lanes: the
    test above, on ids)."""
    model = _translator()
    texts = ["ein hund", "hund"]
    maps = visualize.collect_attention(model, texts)
    (weights,) = maps.values()
    result = model.decode(model.vectorize_sources(texts))
    np.testing.assert_allclose(
        weights[:, 0], to_np(result.alignments), atol=1e-6
    )
    assert maps.tokens == [["ein", "hund"], ["hund"]]
    assert maps.query_tokens == [
        model.tokens_to_words(t) for t in to_np(result.tokens)
    ]


@pytest.mark.tensorflow_lane
def test_transformer_translator_gives_encoder_heads_then_alignments():
    """On JAX and PyTorch, tests/seq2seq/transformer/test_model.py's
    test_encoder_attention_is_each_blocks_self_attention checks the
    weights this returns (the rest is the same Python on every backend)."""
    model = keras_attention.models.TransformerTranslator(
        ["", "[UNK]", "ein", "hund"],
        ["", "[UNK]", "[start]", "[end]", "a", "dog"],
        model_dim=4,
        num_layers=2,
        num_heads=2,
        feed_forward_dim=8,
        max_output_length=3,
    )
    ids = np.array([[2, 3], [3, 0]])
    maps = visualize.collect_attention(model, ids)
    encoder = model.encoder_attention(ids)
    assert list(maps)[:2] == list(encoder)
    for path, weights in encoder.items():
        assert maps[path].shape == (2, 2, 2, 2)
        np.testing.assert_allclose(maps[path], to_np(weights), atol=1e-6)
    decoder = list(maps)[-1]
    alignments = to_np(model.decode(ids).alignments)
    np.testing.assert_allclose(maps[decoder][:, 0], alignments, atol=1e-6)
    assert maps.tokens == [["ein", "hund"], ["hund"]]


@pytest.mark.tensorflow_only
def test_text_model_gives_its_tokens():
    vectorizer = keras.layers.TextVectorization()
    vectorizer.adapt(["a good film", "a bad film"])
    text = keras.Input((1,), dtype="string")
    ids = vectorizer(text)
    x = keras.layers.Embedding(10, D, mask_zero=True)(ids)
    pooled = keras_attention.AttentionPooling(name="pool")(x)
    model = keras_attention.text.TextModel(text, pooled)
    maps = visualize.collect_attention(model, ["a good film", "bad"])
    assert maps.tokens == [["a", "good", "film"], ["bad"]]
    assert maps["pool"].shape == (2, 1, 1, 3)
    assert np.all(maps["pool"][1, 0, 0, 1:] == 0)


class _Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.attention = keras_attention.SelfAttention()

    def call(self, x):
        return self.attention(x)


def test_a_product_with_a_constant_and_a_model_called_by_keyword(rng):
    # Keras marks `x * 2.0` sparse (ops.multiply's spec, a constant
    # counted as sparse): the layer's call is traced on it all the same.
    # keras-hub's Gemma 3 scales its embeddings so, and its CausalLM calls
    # its backbone as `backbone(inputs=inputs)`.
    x = keras.Input((T, D))
    encoder = keras_attention.SelfAttention(num_heads=2, name="encoder")
    inner = keras.Model(x, encoder(x * 2.0), name="inner")
    y = keras.Input((T, D))
    model = keras.Model(y, inner(inputs=y))
    data = rng.normal(size=(2, T, D)).astype("float32")
    maps = visualize.collect_attention(model, data)
    assert list(maps) == ["inner/encoder"]
    want = _scores(encoder, data * 2.0)
    np.testing.assert_allclose(maps["inner/encoder"], want, atol=1e-5)


def test_subclassed_model_or_no_attention_layer_raise():
    model = _Subclassed()
    model(np.ones((1, T, D), "float32"))
    with pytest.raises(ValueError, match="Received: model of type _Subclassed"):
        visualize.collect_attention(model, np.ones((1, T, D), "float32"))
    x = keras.Input((D,))
    dense = keras.Model(x, keras.layers.Dense(2, name="dense")(x))
    with pytest.raises(ValueError, match=r"no attention layer.*\['input_layer"):
        visualize.collect_attention(dense, np.ones((1, D), "float32"))


@pytest.mark.tensorflow_lane
def test_keras_hub_transformer_encoders(rng):
    """keras-hub's `TransformerEncoder` takes `return_attention_scores`,
    so it is collected as one layer (the other lanes: the same path in
    `test_every_layer_of_a_functional_model_by_path`)."""
    keras_hub = pytest.importorskip("keras_hub")
    x = keras.Input((T, D))
    first = keras_hub.layers.TransformerEncoder(16, 2, name="enc1")
    second = keras_hub.layers.TransformerEncoder(16, 2, name="enc2")
    hidden = first(x)
    model = keras.Model(x, second(hidden))
    data = rng.normal(size=(2, T, D)).astype("float32")
    maps = visualize.collect_attention(model, data)
    assert list(maps) == ["enc1", "enc2"]
    np.testing.assert_allclose(maps["enc1"], _scores(first, data), atol=1e-5)
    h = to_np(first(data))
    np.testing.assert_allclose(maps["enc2"], _scores(second, h), atol=1e-5)
