"""Named public sentiment datasets through TensorFlow Datasets.

`tensorflow_datasets` is imported inside the loader, so the package imports
without it; it is part of the `examples` extra.
"""

import os
import re

import numpy as np

from keras_attention.data import download

# Name -> feature holding the text. Both datasets call the label `label`.
_TEXT_FEATURES = {"imdb_reviews": "text", "glue/sst2": "sentence"}
# Name -> what to pass instead when it cannot be downloaded.
_OFFLINE = {
    "imdb_reviews": "Offline, pass a sentence<TAB>label TSV file of your "
    "own (--data PATH).",
    "glue/sst2": "Offline, use the local SST files: --preset sst2 with "
    "--data-root (keras_attention.data.sst.load_sst_splits), or a "
    "sentence<TAB>label TSV file (--data PATH).",
}
_BREAK_TAG = re.compile(r"<br\s*/?>", flags=re.IGNORECASE)
_SPACES = re.compile(r"\s+")


def _clean(text: str) -> str:
    text = _BREAK_TAG.sub(" ", text)
    return _SPACES.sub(" ", text).strip().lower()


def load_tfds_sentiment(
    name: str,
    split: str,
    data_dir: str | os.PathLike | None = None,
) -> tuple[list[str], np.ndarray]:
    """Loads a sentiment dataset with `tensorflow_datasets.load`.

    Supported: `"imdb_reviews"` (feature `text`; the `<br />` tags in the
    reviews are replaced by spaces) and `"glue/sst2"` (feature `sentence`).
    Texts are lower-cased and their whitespace collapsed. TFDS downloads
    and prepares the data on first use unless `data_dir` already holds it;
    offline, a set that is not prepared is a `ValueError` within seconds
    that says what to pass instead (`keras_attention.data.download`).

    Args:
        name: `"imdb_reviews"` or `"glue/sst2"`.
        split: A TFDS split, e.g. `"train"`, `"test"`, `"validation"` or
            `"train[:10%]"`. IMDB has `train`, `test` and `unsupervised`;
            GLUE SST-2 has `train`, `validation` and an unlabelled `test`.
        data_dir: TFDS data directory. Defaults to TFDS's own default.

    Returns:
        `(sentences, labels)`: a list of strings and an `int32` array,
        0 = negative, 1 = positive.

    Raises:
        ValueError: If `name` is not supported, or the split has no labels
            (GLUE hides the SST-2 test labels as `-1`, IMDB's
            `unsupervised` split has `-1` too), or the set is not prepared
            and the network is unreachable.
    """
    if name not in _TEXT_FEATURES:
        raise ValueError(
            "Received an invalid value for argument `name`, expected one of "
            f"{sorted(_TEXT_FEATURES)}. Received: name={name!r}"
        )
    import tensorflow_datasets as tfds

    dataset = download.load(name, _OFFLINE[name], split, data_dir)
    feature = _TEXT_FEATURES[name]
    sentences = []
    labels = []
    for example in tfds.as_numpy(dataset):
        sentences.append(_clean(example[feature].decode("utf-8")))
        labels.append(int(example["label"]))
    labels = np.array(labels, dtype="int32")
    if np.any(labels < 0):
        raise ValueError(
            f"Split {split!r} of {name!r} has no labels (TFDS marks them "
            "-1); use a labelled split such as 'train' or 'validation'."
        )
    return sentences, labels
