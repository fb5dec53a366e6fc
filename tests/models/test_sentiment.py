import os

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention.data import make_synthetic_sentiment
from keras_attention.data import make_text_vectorizer
from keras_attention.models import sentiment

SENTENCES = [
    "a good film",
    "a bad film, not good",
    "never dull and never boring",
    "the plot was weak",
]


def _model(penalty=0.1, **kwargs):
    vectorizer = make_text_vectorizer(SENTENCES)
    return sentiment.build_sentiment_classifier(
        vectorizer,
        embedding_dim=8,
        lstm_units=4,
        attention_units=6,
        num_hops=3,
        penalty_coefficient=penalty,
        mlp_units=5,
        **kwargs,
    )


def _strings(sentences):
    return np.array(sentences, dtype=object)


def _ids(model, sentences):
    """Token ids from the model's own vectorizer (run eagerly)."""
    vectorizer = model.get_layer(index=1)
    ids = keras.ops.convert_to_numpy(vectorizer(_strings(sentences)))
    return ids.astype("int32")


def _outputs(model, sentences):
    """The model's output dict, on any backend (strings on TensorFlow)."""
    if keras.backend.backend() == "tensorflow":
        return model.predict(_strings(sentences), verbose=0)
    ids = _ids(model, sentences)
    return sentiment.token_id_model(model).predict(ids, verbose=0)


def test_outputs_are_named_and_shaped():
    model = _model()
    outputs = _outputs(model, SENTENCES)
    assert sorted(outputs) == list(sentiment.OUTPUT_NAMES)
    assert outputs["probabilities"].shape == (4, 2)
    np.testing.assert_allclose(outputs["probabilities"].sum(-1), 1, 1e-5)
    assert outputs["embedding"].shape == (4, 3 * 2 * 4)
    # The longest sentence has 5 tokens; the attention covers the batch.
    assert outputs["attention"].shape == (4, 3, 5)
    assert [o for o in keras.tree.flatten(outputs)][0].shape == (4, 3, 5)


def test_attention_is_zero_on_padding_and_sums_to_one():
    model = _model()
    weights = _outputs(model, SENTENCES)["attention"]
    lengths = [3, 5, 5, 4]
    for w, n in zip(weights, lengths, strict=True):
        np.testing.assert_allclose(w[:, :n].sum(-1), 1.0, rtol=1e-5)
        np.testing.assert_array_equal(w[:, n:], 0.0)


def test_empty_sentence_gives_zero_attention_not_nan():
    model = _model()
    outputs = _outputs(model, ["", "a good film"])
    np.testing.assert_array_equal(outputs["attention"][0], 0.0)
    assert np.all(np.isfinite(outputs["probabilities"]))


@pytest.mark.tensorflow_only
def test_save_and_load_in_safe_mode_takes_raw_strings(tmp_path):
    model = _model()
    x = _strings(SENTENCES + ["Unknown WORDS here!"])
    expected = model.predict(x, verbose=0)
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    got = loaded.predict(x, verbose=0)
    for name in sentiment.OUTPUT_NAMES:
        np.testing.assert_allclose(got[name], expected[name], atol=1e-6)
    # One string tensor per example, shape (batch,), works too.
    single = loaded.predict(np.array(["a good film"], dtype=object), verbose=0)
    np.testing.assert_allclose(
        single["probabilities"], expected["probabilities"][:1], atol=1e-6
    )


def test_save_and_load_then_predict_sentiment_on_any_backend(tmp_path):
    model = _model()
    sentences = SENTENCES + ["Unknown WORDS here!"]
    expected, _ = sentiment.predict_sentiment(model, sentences)
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.inputs[0].dtype == "string"
    got, attention = sentiment.predict_sentiment(loaded, sentences)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert [w.shape[1] for w in attention] == [3, 5, 5, 4, 3]


def test_spatial_dropout_drops_whole_channels_and_keeps_the_mask():
    assert "spatial_dropout" not in [layer.name for layer in _model().layers]
    model = _model(spatial_dropout=0.5)
    # Inference: no dropout, and the padding mask still reaches attention.
    weights = _outputs(model, SENTENCES)["attention"]
    np.testing.assert_array_equal(weights[0][:, 3:], 0.0)
    np.testing.assert_allclose(weights[0][:, :3].sum(-1), 1.0, rtol=1e-5)
    # Training: each (sentence, channel) is dropped at every step or none.
    vectorizer = model.get_layer(index=1)
    embedded = keras.Model(
        vectorizer.output,
        [
            model.get_layer("embedding").output,
            model.get_layer("spatial_dropout").output,
        ],
    )
    before, after = embedded(_ids(model, SENTENCES), training=True)
    before = keras.ops.convert_to_numpy(before)
    after = keras.ops.convert_to_numpy(after)
    kept = np.all(np.isclose(after, 2 * before, atol=1e-6), axis=1)
    dropped = np.all(after == 0, axis=1)
    assert np.all(kept | dropped) and dropped.any() and kept.any()


def test_token_id_model_shares_weights_and_penalty():
    model = _model(penalty=1.0)
    view = sentiment.token_id_model(model, probabilities_only=True)
    assert view.inputs[0].dtype == "int32"
    assert {id(w) for w in view.weights} == {id(w) for w in model.weights}
    ids = _ids(model, SENTENCES)
    view.compile("adam", "sparse_categorical_crossentropy")
    before = [w.copy() for w in model.get_weights()]
    view.fit(ids, np.array([1, 0, 1, 0]), verbose=0)
    assert any(
        not np.allclose(a, b)
        for a, b in zip(before, model.get_weights(), strict=True)
    )
    view(ids)
    assert len(view.losses) == 1
    full = sentiment.token_id_model(model).predict(ids, verbose=0)
    np.testing.assert_allclose(
        view.predict(ids, verbose=0), full["probabilities"], atol=1e-6
    )


@pytest.mark.tensorflow_only
def test_token_id_model_agrees_with_the_raw_string_model():
    model = _model()
    from_ids = sentiment.token_id_model(model).predict(
        _ids(model, SENTENCES), verbose=0
    )
    from_strings = model.predict(_strings(SENTENCES), verbose=0)
    for name in sentiment.OUTPUT_NAMES:
        np.testing.assert_allclose(
            from_ids[name], from_strings[name], atol=1e-6
        )


@pytest.mark.tensorflow_only
def test_classifier_for_training_shares_weights_and_penalty():
    model = _model(penalty=1.0)
    trainer = sentiment.classifier_for_training(model)
    assert len(trainer.outputs) == 1
    assert {id(w) for w in trainer.weights} == {id(w) for w in model.weights}
    trainer.compile("adam", "sparse_categorical_crossentropy")
    before = [w.copy() for w in model.get_weights()]
    trainer.fit(_strings(SENTENCES), np.array([1, 0, 1, 0]), verbose=0)
    assert any(
        not np.allclose(a, b)
        for a, b in zip(before, model.get_weights(), strict=True)
    )
    trainer(_strings(SENTENCES))
    assert len(trainer.losses) == 1


def test_no_penalty_loss_without_coefficient():
    view = sentiment.token_id_model(_model(penalty=0.0))
    view(np.array([[2, 3, 0]], dtype="int32"))
    assert view.losses == []


def test_predict_sentiment_trims_each_sentence_across_batches():
    model = _model()
    sentences = ["good"] * 3 + ["never dull and never boring at all"] * 3
    # The last batch has no token at all (an RNN takes no 0 steps).
    sentences += ["", "!"]
    probabilities, attention = sentiment.predict_sentiment(
        model, sentences, batch_size=2
    )
    assert probabilities.shape == (8, 2)
    shapes = [(3, 1)] * 3 + [(3, 7)] * 3 + [(3, 0)] * 2
    assert [w.shape for w in attention] == shapes
    full = _outputs(model, sentences[3:])
    np.testing.assert_allclose(attention[3], full["attention"][0], atol=1e-6)
    # An empty text gets what it gets next to a longer one.
    np.testing.assert_allclose(
        probabilities[6:], full["probabilities"][-2:], atol=1e-6
    )


def test_predict_sentiment_rejects_models_without_vectorizer():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    with pytest.raises(ValueError, match="no TextVectorization layer"):
        sentiment.predict_sentiment(model, ["a"])


def test_cue_positions_skip_punctuation_only_tokens():
    sentence = "Not -- bad , really !"
    mask = [True, False, True, False, False, False]
    np.testing.assert_array_equal(
        sentiment.cue_positions(sentence, mask), [True, True, False]
    )
    np.testing.assert_array_equal(
        sentiment.cue_positions(sentence, mask, num_positions=1), [True]
    )


def test_cue_positions_agree_with_tokens_for():
    vectorizer = make_text_vectorizer(SENTENCES)
    sentence = "it's, -- NOT bad... (really) !!"
    tokens = keras_attention.data.tokens_for(vectorizer, sentence)
    mask = np.ones(len(sentence.split()), bool)
    assert len(sentiment.cue_positions(sentence, mask)) == len(tokens)


def test_cue_positions_length_mismatch_raises():
    with pytest.raises(ValueError, match="cue mask has 1 entries"):
        sentiment.cue_positions("not bad", [True])


def test_attention_on_cues_hand_computed():
    attention = [
        np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]),  # hop mean .75/.25/0
        np.array([[0.2, 0.8]]),
        np.zeros((1, 2)),  # an empty sentence is skipped
    ]
    sentences = ["not bad film", "good stuff", "a b"]
    cues = [
        np.array([True, False, False]),
        np.array([False, True]),
        np.array([True, True]),
    ]
    share = sentiment.attention_on_cues(attention, sentences, cues)
    assert share == pytest.approx((0.75 + 0.8) / 2)


def test_attention_on_cues_matches_synthetic_positions():
    data = make_synthetic_sentiment(20, seed=3)
    vectorizer = make_text_vectorizer(data.sentences)
    uniform_on_cues = []
    for sentence, mask in zip(data.sentences, data.cue_masks, strict=True):
        n = len(keras_attention.data.tokens_for(vectorizer, sentence))
        assert n == len(mask)
        uniform_on_cues.append(mask[None, :] / mask.sum())
    share = sentiment.attention_on_cues(
        uniform_on_cues, data.sentences, data.cue_masks
    )
    assert share == pytest.approx(1.0)


def test_attention_redundancy_hand_computed():
    same = [np.array([[0.0, 1.0], [0.0, 1.0]])]
    disjoint = [np.array([[1.0, 0.0], [0.0, 1.0]])]
    half = [np.array([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]])]
    assert sentiment.attention_redundancy(same) == pytest.approx(1.0)
    assert sentiment.attention_redundancy(disjoint) == pytest.approx(0.0)
    assert sentiment.attention_redundancy(half) == pytest.approx(0.5)
    assert sentiment.attention_redundancy([np.ones((1, 3)) / 3]) == 0.0


# Names and plots, not numerics: the TensorFlow lane.
@pytest.mark.backend_independent
def test_label_names_set_the_classes_and_survive_saving(tmp_path):
    names = ("bad", "so-so", "good")
    model = _model(label_names=names)
    assert model.get_layer("probabilities").output.shape[-1] == 3
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras_attention.load_model(path)
    assert loaded.label_names == names
    probabilities, _ = sentiment.predict_sentiment(loaded, SENTENCES)
    assert probabilities.shape == (4, 3)
    labels = sentiment.predict_labels(loaded, SENTENCES)
    assert labels == [names[i] for i in probabilities.argmax(-1)]
    # A model without names (as the committed ones) names classes by index;
    # this one starts from `model` (as SST-5 from SST-2), with a copy of its
    # vocabulary and the weights of every layer but the 3-class output.
    vectorizer = sentiment.copy_vectorizer(sentiment.vectorizer_of(model))
    assert vectorizer.get_vocabulary() == (
        sentiment.vectorizer_of(model).get_vocabulary()
    )
    other = sentiment.build_sentiment_classifier(
        vectorizer,
        embedding_dim=8,
        lstm_units=4,
        attention_units=6,
        num_hops=3,
        mlp_units=5,
        num_classes=4,
    )
    assert sentiment.class_names(other) == ("0", "1", "2", "3")
    copied = sentiment.copy_matching_weights(model, other)
    assert copied == ["embedding", "bilstm", "attention", "mlp"]
    for name in copied:
        for a, b in zip(
            model.get_layer(name).get_weights(),
            other.get_layer(name).get_weights(),
            strict=True,
        ):
            np.testing.assert_array_equal(a, b)
    assert other.get_layer("probabilities").get_weights()[0].shape == (5, 4)
    # The copy starts a model of its own (a shared layer would not).
    view = sentiment.token_id_model(other, probabilities_only=True)
    assert view.output.shape[-1] == 4


def test_balanced_indices_take_the_classes_in_turn():
    labels = [1, 1, 1, 1, 0, 1, 2, 0]
    assert sentiment.balanced_indices(labels, 6) == [4, 0, 6, 7, 1, 2]
    assert sentiment.balanced_indices([1, 1], 6) == [0, 1]


# Names and plots, not numerics: the TensorFlow lane.
@pytest.mark.backend_independent
def test_attention_report_names_the_classes_and_balances_them(tmp_path):
    from keras_attention.data.splits import SentimentSplit

    names = ("negative", "neutral", "positive")
    model = _model(label_names=names)
    labels = np.array([2, 2, 2, 2, 0, 1, 1, 0])
    sentences = [SENTENCES[i % 4] for i in range(8)]
    split = SentimentSplit(sentences, labels, label_names=names)
    probabilities, attention = sentiment.predict_sentiment(model, sentences)
    sentiment.save_attention_report(
        model, split, probabilities, attention, str(tmp_path)
    )
    with open(os.path.join(tmp_path, "attention.html"), encoding="utf-8") as f:
        page = f.read()
    # Two sentences of each class, titled by name; the hops are averaged.
    for name in names:
        assert page.count(f"true: {name}, predicted: ") == 2
    assert "averaged over the model&#x27;s 3 attention hops" in page
    assert os.path.getsize(os.path.join(tmp_path, "attention.png")) > 0


def test_attention_report_without_a_token_to_show_warns(tmp_path):
    # A test set of punctuation-only sentences: plot_attention_grid's
    # "weights_list is empty" traceback came after the model was written.
    from keras_attention.data.splits import SentimentSplit

    model = _model()
    sentences = ["!!!", "  "]
    split = SentimentSplit(sentences, np.array([0, 1]))
    probabilities, attention = sentiment.predict_sentiment(model, sentences)
    with pytest.warns(UserWarning, match="none of the 2 test sentences"):
        written = sentiment.save_attention_report(
            model, split, probabilities, attention, str(tmp_path)
        )
    assert written == [] and os.listdir(tmp_path) == []
