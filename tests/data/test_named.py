"""TFDS loaders, tested offline with `tfds.testing.mock_data`.

The installed tensorflow-datasets ships no mock metadata files, so every
test uses `MockPolicy.USE_CODE`: the dataset info comes from the builder's
code and the examples are random (or ours, through `as_dataset_fn`); nothing
is downloaded.
"""

import numpy as np
import pytest

from keras_attention.data import load_tfds_sentiment

# Checks TFDS loaders, not a backend: the TensorFlow lane runs it.
pytestmark = [
    pytest.mark.backend_independent,
    pytest.mark.usefixtures("tfds_temp_in_tmp_path"),
]

tfds = pytest.importorskip("tensorflow_datasets")


def _mock(num_examples=4, **kwargs):
    return tfds.testing.mock_data(
        num_examples=num_examples,
        policy=tfds.testing.MockPolicy.USE_CODE,
        **kwargs,
    )


def _examples(text_feature, texts, labels):
    """An `as_dataset_fn` that yields the given texts and labels."""

    def as_dataset(self, *args, **kwargs):
        import tensorflow as tf

        return tf.data.Dataset.from_tensor_slices(
            {text_feature: list(texts), "label": list(labels)}
        )

    return as_dataset


@pytest.mark.parametrize(
    "name, split", [("imdb_reviews", "train"), ("glue/sst2", "validation")]
)
def test_loads_sentences_and_int32_labels(name, split, tmp_path):
    with _mock(num_examples=5):
        sentences, labels = load_tfds_sentiment(
            name, split, data_dir=str(tmp_path)
        )
    assert len(sentences) == len(labels) == 5
    assert all(isinstance(s, str) for s in sentences)
    assert labels.dtype == np.int32
    assert set(np.unique(labels)) <= {0, 1}


def test_imdb_text_is_lower_cased_without_break_tags():
    texts = ["A <br />GREAT film.<br /><br />Really!", "Dull<BR>  plot"]
    with _mock(as_dataset_fn=_examples("text", texts, [1, 0])):
        sentences, labels = load_tfds_sentiment("imdb_reviews", "test")
    assert sentences == ["a great film. really!", "dull plot"]
    np.testing.assert_array_equal(labels, [1, 0])


def test_sst2_reads_the_sentence_feature():
    texts = ["it 's a charming journey . ", "unfunny"]
    with _mock(as_dataset_fn=_examples("sentence", texts, [1, 0])):
        sentences, labels = load_tfds_sentiment("glue/sst2", "train")
    assert sentences == ["it 's a charming journey .", "unfunny"]
    np.testing.assert_array_equal(labels, [1, 0])


def test_unlabelled_split_raises():
    with _mock(as_dataset_fn=_examples("sentence", ["a", "b"], [-1, -1])):
        with pytest.raises(ValueError, match="'test'.*no labels"):
            load_tfds_sentiment("glue/sst2", "test")


@pytest.mark.parametrize("name", ["mnist", "sst2", "glue/cola"])
def test_unknown_name_raises_naming_it(name):
    with pytest.raises(ValueError, match=f"name='{name}'"):
        load_tfds_sentiment(name, "train")


def _offline(monkeypatch):
    """No network: every connection fails at once, as without DNS."""
    import socket

    def refuse(*args, **kwargs):
        raise OSError("network is unreachable (test)")

    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.parametrize(
    "name, instead",
    [("glue/sst2", "--preset sst2"), ("imdb_reviews", "--data PATH")],
)
def test_offline_without_prepared_data_says_what_to_pass(
    monkeypatch, tmp_path, name, instead
):
    # Was minutes of silent download retries (issue #30, item 5).
    _offline(monkeypatch)
    with pytest.raises(ValueError, match="cannot be downloaded") as error:
        load_tfds_sentiment(name, "train", data_dir=str(tmp_path))
    assert instead in str(error.value)
    assert str(tmp_path) in str(error.value)


def test_offline_translation_set_says_what_to_pass(monkeypatch, tmp_path):
    from keras_attention.data import load_tfds_translation

    _offline(monkeypatch)
    with pytest.raises(ValueError, match="--preset multi30k"):
        load_tfds_translation(
            "ted_hrlr_translate/pt_to_en",
            source="pt",
            data_dir=str(tmp_path),
        )


def test_offline_prepared_data_loads_without_the_network(monkeypatch):
    # mock_data stands for prepared data: `download=False` reads it, and
    # the network is never probed.
    _offline(monkeypatch)
    texts = ["a charming journey", "unfunny"]
    with _mock(as_dataset_fn=_examples("sentence", texts, [1, 0])):
        sentences, _ = load_tfds_sentiment("glue/sst2", "train")
    assert sentences == texts
