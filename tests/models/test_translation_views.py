"""The translation example's pictures: the decoder's alignments and the
encoder's self-attention, as PNG grids with interactive pages beside."""

import json
import os
import re

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.data.translation import make_synthetic_translation
from keras_attention.models import translation_views
from keras_attention.seq2seq import Translator
from keras_attention.seq2seq.text_translator import target_text
from keras_attention.seq2seq.transformer import TransformerTranslator
from keras_attention.text import tokenize

# Files from NumPy weights and one tiny model: the TensorFlow lane.
pytestmark = pytest.mark.backend_independent

DATA = make_synthetic_translation(20, seed=5)


def _payload(path):
    page = open(path, encoding="utf-8").read()
    found = re.search(r'id="attention-data">(.*?)</script>', page, re.S)
    return json.loads(found.group(1))


def _vocabulary(texts):
    return sorted({w for t in texts for w in t.split()})


def test_the_alignment_plot_writes_the_alignment_view(tmp_path):
    path = os.path.join(tmp_path, "alignment.png")
    translation_views.save_alignment_plot(
        ["ein hund", "katze"],
        [["a", "dog"], []],
        [np.array([[0.9, 0.1], [0.2, 0.8]]), np.zeros((0, 1))],
        path,
    )
    assert os.path.getsize(path) > 0
    payload = _payload(os.path.join(tmp_path, "alignment.html"))
    first, empty = payload["sentences"]
    assert first["title"] == "sentence 0: a dog"
    assert first["sources"] == ["ein", "hund"]
    assert first["targets"] == ["a", "dog"]
    np.testing.assert_allclose(first["weights"], [[0.9, 0.1], [0.2, 0.8]])
    assert empty["targets"] == ["(empty)"] and empty["weights"] == [[0.0]]


def test_the_encoder_attention_is_each_blocks_weights_per_head(tmp_path):
    sources = _vocabulary(tokenize(t) for t in DATA.sources)
    targets = _vocabulary(target_text(t) for t in DATA.targets)
    keras.utils.set_random_seed(3)
    model = TransformerTranslator(
        sources,
        targets,
        model_dim=8,
        num_layers=2,
        num_heads=2,
        feed_forward_dim=16,
        max_output_length=6,
    )
    sentence = DATA.sources[0]
    path = os.path.join(tmp_path, "encoder.png")
    written = translation_views.save_encoder_attention(model, sentence, path)
    assert written == [path, os.path.join(tmp_path, "encoder.html")]
    assert os.path.getsize(path) > 0
    payload = _payload(written[1])
    words = tokenize(sentence).split()
    assert payload["tokens"] == words
    maps = model.encoder_attention(model.vectorize_sources([sentence]))
    assert len(payload["layers"]) == len(maps) == 2
    n = len(words)
    for layer, weights in zip(payload["layers"], maps.values(), strict=True):
        want = ops.convert_to_numpy(weights)[0, :, :n, :n]
        # The page keeps four decimals.
        np.testing.assert_allclose(np.array(layer["heads"]), want, atol=5e-5)
    # The RNN translator's encoder has no attention: nothing is written.
    rnn = Translator(sources, targets, embedding_dim=4, units=4)
    other = os.path.join(tmp_path, "rnn.png")
    assert translation_views.save_encoder_attention(rnn, sentence, other) == []
    assert not os.path.exists(other)
