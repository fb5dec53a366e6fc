"""The sentiment model (`models/sentiment/model.py`): outputs, masks, saving.

Moved from `tests/models/test_sentiment.py` with the module split.
"""

import os

import keras
import numpy as np
import pytest

from keras_attention.models import sentiment
from tests.models.sentiment._models import SENTENCES
from tests.models.sentiment._models import _ids
from tests.models.sentiment._models import _model
from tests.models.sentiment._models import _outputs
from tests.models.sentiment._models import _strings


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
    # Text without a word is refused by `predict` (docs/errors.md); the
    # model itself, fed an all-padding row of ids, attends to nothing.
    model = _model()
    ids = _ids(model, ["", "a good film"])
    outputs = sentiment.token_id_model(model).predict(ids, verbose=0)
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


@pytest.mark.heavy
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
